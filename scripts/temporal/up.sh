#!/usr/bin/env bash
# up.sh starts the Temporal dev server (scripts/temporal/build.sh builds and caches it) in the
# background on 127.0.0.1, on a port the server picks, with the namespaces in
# $AGENTENV_TEMPORAL_NAMESPACES (default "default") registered, its log and pid in a new temp dir.
#
# It builds nothing. It waits at most 60 s for the server to say it is ready, then prints a shell
# line to eval:
#   export AGENTENV_TEST_TEMPORAL=HOST:PORT AGENTENV_TEMPORAL_DIR=DIR
# Stop it with scripts/temporal/down.sh DIR.
set -euo pipefail

TEMPORAL_VERSION=v1.32.1
CACHE=${AGENTENV_TEMPORAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/temporal}
BIN=$CACHE/temporal-devserver-$TEMPORAL_VERSION/temporal-devserver
READY_SECONDS=60

log() { printf 'temporal/up: %s\n' "$*" >&2; }
[ -x "$BIN" ] || { log "$BIN missing: run scripts/temporal/build.sh"; exit 1; }

DIR=$(mktemp -d "${TMPDIR:-/tmp}/agentenv-temporal.XXXXXX")
setsid "$BIN" -namespace "${AGENTENV_TEMPORAL_NAMESPACES:-default}" -ready-timeout "$((READY_SECONDS - 5))s" \
	>"$DIR/server.out" 2>"$DIR/server.log" </dev/null &
echo "$! temporal-devserver" >"$DIR/pids"
pid=$!

until=$((SECONDS + READY_SECONDS))
addr=""
while [ -z "$addr" ]; do
	addr=$(sed -n 's/^AGENTENV_TEST_TEMPORAL=//p' "$DIR/server.out")
	[ -n "$addr" ] && break
	if ! kill -0 "$pid" 2>/dev/null || [ "$SECONDS" -ge "$until" ]; then
		log "not ready within ${READY_SECONDS}s or exited; its log ($DIR/server.log):"
		tail -20 "$DIR/server.log" >&2 || true
		"$(dirname "$0")/down.sh" "$DIR" --keep-dir >&2 || true
		exit 1
	fi
	sleep 0.1
done
log "up on $addr in $DIR"
echo "export AGENTENV_TEST_TEMPORAL=$addr AGENTENV_TEMPORAL_DIR=$DIR"
