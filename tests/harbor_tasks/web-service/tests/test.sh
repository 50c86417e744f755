#!/bin/bash
# The service the agent left running must still answer.
if [ "$(curl -sf --max-time 5 http://localhost:8000/status.txt)" = "harbor-ok" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
