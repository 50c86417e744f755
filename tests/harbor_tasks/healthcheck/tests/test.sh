#!/bin/bash
if [ "$(cat /app/state.txt 2>/dev/null)" = healthy ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
