#!/bin/bash
# Step 1: pays when the greeting is written and the step's setup ran first.
if [ "$(cat /app/greeting.txt 2>/dev/null)" = hello ] && [ "$(cat /app/seed.txt 2>/dev/null)" = seed ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
