#!/usr/bin/env bash
# build.sh builds and caches the Temporal dev server of the integration tier: this folder's
# module (main.go around go.temporal.io/server/temporaltest), kept out of the product's go.mod.
#
# The binary is cached outside the repo, keyed by the server version, in
#   ${AGENTENV_TEMPORAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/temporal}/temporal-devserver-v1.32.1/
# beside a hash of this folder's sources; re-running is a no-op while they match. The cold build
# takes about 13 minutes on two cores. It runs under `nice -n ${TEMPORAL_NICE:-10}`.
#
# Usage: scripts/temporal/build.sh      (prints the binary's path at the end)
set -euo pipefail

TEMPORAL_VERSION=v1.32.1 # go.temporal.io/server in go.mod; newer ones need a newer Go
CACHE=${AGENTENV_TEMPORAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/temporal}
OUT=$CACHE/temporal-devserver-$TEMPORAL_VERSION
SRC=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export GOFLAGS=${GOFLAGS:--buildvcs=false}

log() { printf 'temporal/build: %s\n' "$*" >&2; }

grep -q "go.temporal.io/server $TEMPORAL_VERSION\$" "$SRC/go.mod" ||
	{ log "$SRC/go.mod does not require go.temporal.io/server $TEMPORAL_VERSION: update TEMPORAL_VERSION here too"; exit 2; }

# The sources the binary is built from: a change to any of them rebuilds it.
sum=$(cd "$SRC" && cat go.mod go.sum ./*.go | sha256sum | cut -d' ' -f1)
if [ -x "$OUT/temporal-devserver" ] && [ "$(cat "$OUT/source.sha256" 2>/dev/null)" = "$sum" ]; then
	log "temporal-devserver $TEMPORAL_VERSION cached"
	echo "$OUT/temporal-devserver"
	exit 0
fi

log "building temporal-devserver $TEMPORAL_VERSION into $OUT; cold, this takes about 13 minutes"
start=$SECONDS
mkdir -p "$CACHE"
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
(cd "$SRC" && nice -n "${TEMPORAL_NICE:-10}" go build -mod=readonly -trimpath -ldflags='-s -w' \
	-o "$OUT.tmp/temporal-devserver" .)
echo "$sum" >"$OUT.tmp/source.sha256"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "temporal-devserver -> $OUT/temporal-devserver ($((SECONDS - start)) s, $(du -h "$OUT/temporal-devserver" | cut -f1))"
echo "$OUT/temporal-devserver"
