#!/usr/bin/env bash
# down.sh stops what scripts/kube/up.sh started in DIR (the pids in DIR/pids, each a process
# group up.sh made with setsid) and removes DIR, unless --keep-dir is given.
# Usage: scripts/kube/down.sh [DIR] [--keep-dir]   (DIR defaults to $AGENTENV_KUBE_DIR)
set -euo pipefail
DIR=${1:-${AGENTENV_KUBE_DIR:-}}
[ -n "$DIR" ] && [ -f "$DIR/pids" ] || { echo "kube/down: no DIR/pids (DIR=$DIR)" >&2; exit 1; }
tac "$DIR/pids" | while read -r pid name; do
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL -- "-$pid" 2>/dev/null || true
	echo "kube/down: stopped $name ($pid)" >&2
done
[ "${2:-}" = --keep-dir ] || rm -rf "$DIR"
