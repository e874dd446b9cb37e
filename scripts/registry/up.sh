#!/usr/bin/env bash
# up.sh starts the registry (scripts/registry/build.sh builds and caches it) in the background on
# 127.0.0.1 at a free port, with filesystem storage, its config, log and pid in a new temp dir.
# With AGENTENV_REGISTRY_USER and AGENTENV_REGISTRY_PASSWORD set, every request needs those
# credentials (basic auth, an htpasswd file the binary bcrypts).
#
# It builds nothing. It waits at most 30 s for GET /v2/ to answer (200, or 401 with a user),
# then prints a shell line to eval:
#   export AGENTENV_TEST_REGISTRY=127.0.0.1:PORT AGENTENV_REGISTRY_DIR=DIR
# Stop it with scripts/registry/down.sh DIR. The tests need none of this: internal/registryserver
# starts a registry of their own per test. It is for trying the registry by hand.
set -euo pipefail

REGISTRY_VERSION=v3.1.2
CACHE=${AGENTENV_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/registry}
BIN=$CACHE/registry-$REGISTRY_VERSION/registry
READY_SECONDS=30
USER_NAME=${AGENTENV_REGISTRY_USER:-}
PASSWORD=${AGENTENV_REGISTRY_PASSWORD:-}

log() { printf 'registry/up: %s\n' "$*" >&2; }
[ -x "$BIN" ] || { log "$BIN missing: run bash scripts/registry/build.sh"; exit 1; }
if [ -n "$USER_NAME" ] && [ -z "$PASSWORD" ]; then
	log "AGENTENV_REGISTRY_USER is set without AGENTENV_REGISTRY_PASSWORD"
	exit 2
fi

DIR=$(mktemp -d "${TMPDIR:-/tmp}/agentenv-registry.XXXXXX")
mkdir "$DIR/storage"
want=200
auth=""
if [ -n "$USER_NAME" ]; then
	printf '%s\n' "$PASSWORD" | "$BIN" htpasswd "$USER_NAME" >"$DIR/htpasswd"
	want=401
	auth="auth:
  htpasswd:
    realm: \"agentenv-test-registry\"
    path: \"$DIR/htpasswd\""
fi

# A free port, asked of the kernel. It could be taken between here and the bind; then the
# registry exits and the next attempt takes another.
for attempt in 1 2 3; do
	PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	cat >"$DIR/config.yml" <<CONF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: "$DIR/storage"
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: "127.0.0.1:$PORT"
  secret: "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
$auth
CONF
	env $(env | sed -n 's/^\(REGISTRY_[A-Za-z0-9_]*\)=.*/-u \1/p') \
		setsid "$BIN" serve "$DIR/config.yml" >"$DIR/server.log" 2>&1 </dev/null &
	pid=$!
	echo "$pid registry" >"$DIR/pids"

	until=$((SECONDS + READY_SECONDS))
	status=""
	while :; do
		status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v2/" || true)
		[ "$status" = "$want" ] && break
		if ! kill -0 "$pid" 2>/dev/null || [ "$SECONDS" -ge "$until" ]; then break; fi
		sleep 0.1
	done
	if [ "$status" = "$want" ]; then
		log "up on 127.0.0.1:$PORT in $DIR${USER_NAME:+ (basic auth as $USER_NAME)}"
		echo "export AGENTENV_TEST_REGISTRY=127.0.0.1:$PORT AGENTENV_REGISTRY_DIR=$DIR"
		exit 0
	fi
	if [ "$attempt" -lt 3 ] && ! kill -0 "$pid" 2>/dev/null && grep -q 'address already in use' "$DIR/server.log"; then
		log "port $PORT taken before the registry bound it; another"
		continue
	fi
	log "GET /v2/ did not answer $want within ${READY_SECONDS}s (last: ${status:-none}) or the registry exited; its log ($DIR/server.log):"
	tail -20 "$DIR/server.log" >&2 || true
	"$(dirname "$0")/down.sh" "$DIR" --keep-dir >&2 || true
	exit 1
done
