#!/bin/sh
# build.sh NAME builds one of agentenv's local images from a Debian base made on this machine,
# for hosts that reach no container registry. NAME is one of:
#
#   base-bookworm  agentenv-debian:bookworm  (debootstrap --variant=minbase, then docker import)
#   base-trixie    agentenv-debian:trixie
#   postgres       agentenv-postgres:local   (PostgreSQL from bookworm; env like postgres:16)
#   adminer        agentenv-adminer:local    (adminer on php -S, port 8080)
#   node           agentenv-node:local       (Node 20 from trixie + npm MCP servers)
#   dind           agentenv-dind:local       (Debian docker.io engine, the docker_vm provider's VM)
#   browser        agentenv-browser:local    (Debian's Chromium + @playwright/mcp, port 8931)
#
# It is idempotent: an image built from the same recipe is kept (FORCE=1 rebuilds the named image, not
# its base). TAG names the image instead of the tag above, to try a changed recipe beside the
# shared image. Needs root (debootstrap), docker, and the Debian mirror (MIRROR, default
# http://deb.debian.org/debian). The host CA bundle is copied into the build context at build
# time so HTTPS through this machine's proxy works inside the build; it is never committed.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
export DOCKER_BUILDKIT=0

log() { printf 'build.sh: %s\n' "$*" >&2; }

exists() { docker image inspect "$1" >/dev/null 2>&1; }

# base SUITE makes agentenv-debian:SUITE unless it exists.
base() {
	btag="agentenv-debian:$1"
	if exists "$btag"; then
		log "$btag exists"
		return
	fi
	command -v debootstrap >/dev/null || { log "debootstrap missing: apt-get install -y debootstrap"; exit 1; }
	root=$(mktemp -d /tmp/agentenv-debootstrap.XXXXXX)
	trap 'rm -rf "$root"' EXIT
	log "debootstrap $1 (about a minute)"
	debootstrap --variant=minbase "$1" "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
	rm -f "$root.log"
	rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
	tar -C "$root" -c . | docker import -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' - "$btag" >/dev/null
	rm -rf "$root"
	trap - EXIT
	log "$btag imported"
}

# image NAME TAG SUITE builds TAG from the recipe in $here/NAME on agentenv-debian:SUITE.
# (Shell variables are global: base uses btag, image uses itag.)
image() {
	name=$1 itag=${TAG:-$2} suite=$3
	# The recipe's digest is a label of the image: an image built from an older recipe is
	# rebuilt, so a changed recipe never hides behind a cached image.
	recipe=$(cd "$here/$name" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
	have=$(docker image inspect -f '{{index .Config.Labels "agentenv.recipe"}}' "$itag" 2>/dev/null || true)
	if [ "$have" = "$recipe" ] && [ "${FORCE:-0}" != 1 ]; then
		log "$itag exists (recipe $recipe)"
		return
	fi
	base "$suite"
	ctx=$(mktemp -d /tmp/agentenv-build.XXXXXX)
	trap 'rm -rf "$ctx"' EXIT
	cp -R "$here/$name/." "$ctx/"
	if [ -f "$CA_BUNDLE" ]; then
		cp "$CA_BUNDLE" "$ctx/host-ca.crt"
	else
		: >"$ctx/host-ca.crt"
	fi
	if [ -f "$ctx/npm-packages" ]; then
		command -v npm >/dev/null || { log "npm missing: the $name image's packages are installed with the host's npm"; exit 1; }
		log "npm install -g $(tr '\n' ' ' <"$ctx/npm-packages")"
		# shellcheck disable=SC2046 # one package a line
		npm install --global --prefix "$ctx/npm" --no-audit --no-fund --loglevel=error $(cat "$ctx/npm-packages") >&2
	fi
	log "build $itag"
	docker build -q --build-arg "BASE=agentenv-debian:$suite" --label "agentenv.image=$name" --label "agentenv.recipe=$recipe" -t "$itag" "$ctx" >/dev/null
	rm -rf "$ctx"
	trap - EXIT
	log "$itag built"
}

case "${1:-}" in
base-bookworm) base bookworm ;;
base-trixie) base trixie ;;
postgres) image postgres agentenv-postgres:local bookworm ;;
adminer) image adminer agentenv-adminer:local bookworm ;;
node) image node agentenv-node:local trixie ;;
dind) image dind agentenv-dind:local bookworm ;;
browser) image browser agentenv-browser:local trixie ;;
*)
	echo "usage: build.sh base-bookworm|base-trixie|postgres|adminer|node|dind|browser" >&2
	exit 2
	;;
esac
