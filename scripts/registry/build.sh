#!/usr/bin/env bash
# build.sh builds and caches the OCI registry of the integration tests: the CNCF distribution
# registry (github.com/distribution/distribution/v3), this folder's module (main.go: upstream's
# command with the filesystem driver, htpasswd auth and an htpasswd writer), kept out of the
# product's go.mod.
#
# The binary is cached outside the repo, keyed by the registry version, in
#   ${AGENTENV_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/registry}/registry-v3.1.2/
# beside a hash of this folder's sources; re-running is a no-op while they match. It is built
# into a temp folder renamed into place, so a killed build leaves no half binary. It runs under
# `nice -n ${REGISTRY_NICE:-10}`.
#
# Usage: scripts/registry/build.sh      (prints the binary's path at the end)
set -euo pipefail

REGISTRY_VERSION=v3.1.2 # github.com/distribution/distribution/v3 in go.mod
CACHE=${AGENTENV_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/registry}
OUT=$CACHE/registry-$REGISTRY_VERSION
SRC=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export GOFLAGS=${GOFLAGS:--buildvcs=false}

log() { printf 'registry/build: %s\n' "$*" >&2; }

grep -q "github.com/distribution/distribution/v3 $REGISTRY_VERSION\$" "$SRC/go.mod" ||
	{ log "$SRC/go.mod does not require github.com/distribution/distribution/v3 $REGISTRY_VERSION: update REGISTRY_VERSION here too"; exit 2; }

# The sources the binary is built from: a change to any of them rebuilds it.
sum=$(cd "$SRC" && cat go.mod go.sum ./*.go | sha256sum | cut -d' ' -f1)
if [ -x "$OUT/registry" ] && [ "$(cat "$OUT/source.sha256" 2>/dev/null)" = "$sum" ]; then
	log "registry $REGISTRY_VERSION cached"
	echo "$OUT/registry"
	exit 0
fi

log "building registry $REGISTRY_VERSION into $OUT"
start=$SECONDS
mkdir -p "$CACHE"
rm -rf "$OUT.tmp"
mkdir -p "$OUT.tmp"
(cd "$SRC" && CGO_ENABLED=0 nice -n "${REGISTRY_NICE:-10}" go build -mod=readonly -trimpath -ldflags='-s -w' \
	-o "$OUT.tmp/registry" .)
echo "$sum" >"$OUT.tmp/source.sha256"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
log "registry -> $OUT/registry ($((SECONDS - start)) s, $(du -h "$OUT/registry" | cut -f1))"
echo "$OUT/registry"
