#!/bin/bash
# allow_internet = false: the container has loopback only.
if [ "$(ls /sys/class/net | sort)" = lo ] && [ "$(cat /app/interfaces.txt 2>/dev/null)" = lo ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
