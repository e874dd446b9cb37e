#!/usr/bin/env bash
# down.sh stops what scripts/registry/up.sh started in DIR (the pid in DIR/pids, a process group
# up.sh made with setsid): SIGTERM, then SIGKILL after 10 s; then removes DIR (the registry's
# storage with it), unless --keep-dir.
# Usage: scripts/registry/down.sh [DIR] [--keep-dir]   (DIR defaults to $AGENTENV_REGISTRY_DIR)
set -euo pipefail
DIR=${1:-${AGENTENV_REGISTRY_DIR:-}}
[ -n "$DIR" ] && [ -f "$DIR/pids" ] || { echo "registry/down: no DIR/pids (DIR=$DIR)" >&2; exit 1; }
while read -r pid name; do
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL -- "-$pid" 2>/dev/null || true
		echo "registry/down: killed $name ($pid): still running 10 s after SIGTERM" >&2
	else
		echo "registry/down: stopped $name ($pid)" >&2
	fi
done <"$DIR/pids"
[ "${2:-}" = --keep-dir ] || rm -rf "$DIR"
