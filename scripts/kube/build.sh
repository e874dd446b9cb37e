#!/usr/bin/env bash
# build.sh builds and caches the local Kubernetes test control plane used by
# the kubernetes provider's integration tier: kube-apiserver (built from
# k8s.io/kubernetes), kwok (simulated nodes and Pod phases) and Debian's etcd.
#
# Binaries are cached outside the repo, keyed by version, in
#   ${AGENTENV_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/kube}
# so only the first run is slow (kube-apiserver takes about 12 minutes on two
# cores). Builds run under `nice -n 10`. Re-running is a no-op once cached.
#
# Usage: scripts/kube/build.sh        (prints the cache directory at the end)
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE=${AGENTENV_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/kube}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export GOFLAGS=${GOFLAGS:--buildvcs=false}

log() { printf 'kube/build: %s\n' "$*" >&2; }

# etcd: Debian's etcd-server (3.4). No build needed.
ensure_etcd() {
	if command -v etcd >/dev/null 2>&1; then
		return
	fi
	log "installing etcd-server from Debian"
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	$sudo apt-get install -y etcd-server >/dev/null || {
		$sudo apt-get update >/dev/null
		$sudo apt-get install -y etcd-server >/dev/null
	}
	# The package starts a daemon on systems with an init; we want none.
	command -v etcd >/dev/null
}

# kube-apiserver: a scratch module that requires k8s.io/kubernetes and copies
# its staging replaces, each pointed at the published module version.
build_apiserver() {
	local out="$CACHE/kube-apiserver-$KUBE_VERSION"
	if [ -x "$out/kube-apiserver" ]; then
		log "kube-apiserver $KUBE_VERSION cached"
		return
	fi
	local staging="v0.${KUBE_VERSION#v1.}"
	local work
	work=$(mktemp -d)
	trap 'rm -rf "$work"' RETURN
	log "building kube-apiserver $KUBE_VERSION (staging $staging) in $work; this takes minutes"
	local modfile
	modfile=$(cd "$work" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	{
		printf 'module kubeapiserverbuild\n\ngo 1.26.8\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
		sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#\t\1 => \1 '"$staging"'#p' "$modfile"
		printf ')\n'
	} >"$work/go.mod"
	local n
	n=$(grep -c '=> k8s.io/' "$work/go.mod")
	log "$n staging replaces"
	printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n\nfunc main() {}\n' >"$work/tools.go"
	(cd "$work" && go mod tidy >/dev/null 2>&1)
	local pkg=k8s.io/component-base/version
	local minor=${staging#v0.}
	minor=${minor%%.*}
	local ld="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
	mkdir -p "$out.tmp"
	(cd "$work" && nice -n 10 go build -mod=mod -trimpath -ldflags "$ld" -o "$out.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
	rm -rf "$out"
	mv "$out.tmp" "$out"
	log "kube-apiserver -> $out/kube-apiserver"
}

# kwok and its fast node/pod stages (shipped inside the kwok module).
build_kwok() {
	local out="$CACHE/kwok-$KWOK_VERSION"
	if [ -x "$out/kwok" ] && [ -d "$out/stages" ]; then
		log "kwok $KWOK_VERSION cached"
		return
	fi
	log "building kwok $KWOK_VERSION"
	mkdir -p "$out.tmp/stages"
	GOBIN="$out.tmp" nice -n 10 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
	local dir
	dir=$(cd "$out.tmp" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	cp "$dir"/kustomize/stage/node/fast/*.yaml "$out.tmp/stages/"
	cp "$dir"/kustomize/stage/pod/fast/*.yaml "$out.tmp/stages/"
	chmod -R u+w "$out.tmp"
	rm -rf "$out"
	mv "$out.tmp" "$out"
	log "kwok -> $out/kwok"
}

mkdir -p "$CACHE"
ensure_etcd
build_kwok
build_apiserver
echo "$CACHE"
