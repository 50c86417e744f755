#!/bin/bash
# Pays only when run as the verifier user with the verifier's environment.
if [ "$(id -un)" != harborcheck ]; then
    echo "running as $(id -un), not harborcheck"; echo 0 > /logs/verifier/reward.txt; exit 0
fi
if [ -n "$EXPECTED_COLOR" ] && [ "$(cat /app/color.txt 2>/dev/null)" = "$EXPECTED_COLOR" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
