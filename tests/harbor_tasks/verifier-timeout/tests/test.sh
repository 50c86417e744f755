#!/bin/bash
want=$(python3 -c 'import hashlib; print(hashlib.sha256(b"harbor").hexdigest())')
if [ "$(cat /app/digest.txt 2>/dev/null)" = "$want" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
# A file named `slow` makes the tests outlast timeout_sec (after writing a reward).
if [ -f /app/slow ]; then sleep 60; fi
