#!/bin/bash
expected=$(printf 'hello from a Debian package\n42')
if [ "$(cat /app/answer.txt 2>/dev/null)" = "$expected" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
