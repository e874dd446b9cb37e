#!/usr/bin/env bash
# down.sh stops what scripts/temporal/up.sh started in DIR (the pid in DIR/pids, a process group
# up.sh made with setsid): SIGTERM, then SIGKILL after 15 s; then removes DIR, unless --keep-dir.
# Usage: scripts/temporal/down.sh [DIR] [--keep-dir]   (DIR defaults to $AGENTENV_TEMPORAL_DIR)
set -euo pipefail
DIR=${1:-${AGENTENV_TEMPORAL_DIR:-}}
[ -n "$DIR" ] && [ -f "$DIR/pids" ] || { echo "temporal/down: no DIR/pids (DIR=$DIR)" >&2; exit 1; }
while read -r pid name; do
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL -- "-$pid" 2>/dev/null || true
		echo "temporal/down: killed $name ($pid): still running 15 s after SIGTERM" >&2
	else
		echo "temporal/down: stopped $name ($pid)" >&2
	fi
done <"$DIR/pids"
[ "${2:-}" = --keep-dir ] || rm -rf "$DIR"
