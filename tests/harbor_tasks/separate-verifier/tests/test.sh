#!/bin/bash
# Pays only in the verifier's own container (its image's marker; none of the agent's files
# but the declared artifacts), with both artifacts carried over.
fail() { echo "$1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
[ -f /verifier-marker ] || fail "not in the verifier's image"
[ -e /app/agent-only.txt ] && fail "the agent's container is visible"
[ "$(cat /app/answer.txt 2>/dev/null)" = 42 ] || fail "answer.txt: $(cat /app/answer.txt 2>&1)"
[ -s /app/notes/how.txt ] || fail "notes/how.txt missing"
echo 1 > /logs/verifier/reward.txt
