#!/usr/bin/env bash
# Verifier of git-commit: writes no reward file, so the exit code decides (0 = pass).
set -u
repo=$HOME/repo
[ "$(git -C "$repo" rev-parse --abbrev-ref HEAD)" = "main" ] || exit 1
[ "$(git -C "$repo" log -1 --format=%s)" = "Initial release" ] || exit 1
[ "$(git -C "$repo" show HEAD:notes.txt)" = "release 1.0" ] || exit 1
[ "$(git -C "$repo" rev-parse 'v1.0^{commit}')" = "$(git -C "$repo" rev-parse HEAD)" ] || exit 1
git -C "$repo" diff --quiet HEAD || exit 1
