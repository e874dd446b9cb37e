#!/bin/sh
# Builds docker compose v5.6.0 from its Go module and installs it as a docker CLI plugin, for
# `agentenv bench` (see ../shared/reference/feasibility.md, "Compose v5 built from the Go module").
# `go install github.com/docker/compose/v5/cmd@v5.6.0` refuses compose's exclude directives, so
# this builds from a scratch module, outside the repository, that copies them. The build is
# cached: a second run takes seconds.
set -eu
VERSION=v5.6.0
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/agentenv-bench/compose-$VERSION"
PLUGINS="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
mkdir -p "$DIR" "$PLUGINS"
cd "$DIR"
go mod download -json "github.com/docker/compose/v5@$VERSION" >/dev/null
MOD="$(go env GOMODCACHE)/cache/download/github.com/docker/compose/v5/@v/$VERSION.mod"
{
	printf 'module scratch/composebuild\n\ngo 1.26.8\n\nrequire github.com/docker/compose/v5 %s\n\n' "$VERSION"
	awk '/^exclude \(/,/^\)/' "$MOD"
} >go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/docker/compose/v5/cmd"\n' >tools.go
go mod tidy
go build -ldflags "-X github.com/docker/compose/v5/internal.Version=$VERSION" -o docker-compose github.com/docker/compose/v5/cmd
cp docker-compose "$PLUGINS/docker-compose"
docker compose version
