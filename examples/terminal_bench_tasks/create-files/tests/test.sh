#!/usr/bin/env bash
# Verifier of create-files: one quarter of the reward per requirement met.
LOGS_DIR=${LOGS_DIR:-/logs/verifier}
mkdir -p "$LOGS_DIR"
passed=0
[ -d "$HOME/project/src" ] && passed=$((passed + 1))
[ -d "$HOME/project/docs" ] && passed=$((passed + 1))
[ "$(cat "$HOME/project/src/main.py" 2>/dev/null)" = "print('hello')" ] && passed=$((passed + 1))
[ "$(head -n 1 "$HOME/project/docs/README.md" 2>/dev/null)" = "# Project" ] && passed=$((passed + 1))
case $passed in
    4) echo 1 ;;
    0) echo 0 ;;
    *) echo "0.$((passed * 25))" ;;
esac > "$LOGS_DIR/reward.txt"
