#!/usr/bin/env bash
# Verifier of fix-script: 1 when the script's output is right on inputs the agent never saw.
LOGS_DIR=${LOGS_DIR:-/logs/verifier}
mkdir -p "$LOGS_DIR"
ok=1
[ "$(python3 /app/stats.py 2 4 9)" = "mean=5 max=9" ] || ok=0
[ "$(python3 /app/stats.py 1.5 2.5)" = "mean=2 max=2.5" ] || ok=0
[ "$(python3 /app/stats.py 7)" = "mean=7 max=7" ] || ok=0
echo "$ok" > "$LOGS_DIR/reward.txt"
