#!/bin/bash
# Step 2: pays when the greeting is extended with the file this step brought, in the same
# container as step 1 (its seed is still there), and no test was visible to the agent.
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "hello world" ] && [ -f /app/seed.txt ] \
    && [ "$(cat /app/tests-seen.txt 2>/dev/null)" = 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
