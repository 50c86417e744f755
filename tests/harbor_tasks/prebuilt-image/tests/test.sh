#!/bin/bash
# Runs from the task's workdir; the expected value sits in a hidden directory of tests/.
[ "$(pwd)" = /tmp/work ] || { echo "not run from the workdir: $(pwd)"; echo 0 > /logs/verifier/reward.txt; exit 0; }
if cmp -s out.txt /tests/.hidden/expected.txt; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
