#!/bin/bash
# Pays only when the agent ran as [agent] user (player) and the tests as the image's default
# user (root), as Harbor runs them.
if [ "$(id -un)" != root ]; then
    echo "tests running as $(id -un), not root"; echo 0 > /logs/verifier/reward.txt; exit 0
fi
if [ "$(cat /app/whoami.txt 2>/dev/null)" = player ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo "whoami.txt: $(cat /app/whoami.txt 2>&1)"; echo 0 > /logs/verifier/reward.txt
fi
