#!/bin/sh
# postgres.sh makes sure a local PostgreSQL server from Debian is installed and running on
# 127.0.0.1:5432, with a role and database for the integration tests, then prints the DSN:
#
#	eval "$(.ci/postgres.sh)"
#	go test -tags integration ./ledger/...
#
# It is idempotent and needs root but not systemd (a fresh Debian 12 container or CI machine).
# Everything but the final export line goes to stderr, so the output can be eval'ed.
set -eu

ROLE=agentenv
PASSWORD=agentenv
DATABASE=agentenv_test
PORT=5432

log() { echo "postgres.sh: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
	log "must run as root (it installs and starts PostgreSQL)"
	exit 1
fi

if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
	log "installing postgresql from Debian"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update >&2
	apt-get install -y --no-install-recommends postgresql >&2
fi

VERSION=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if [ -z "$VERSION" ]; then
	log "no PostgreSQL found under /usr/lib/postgresql after install"
	exit 1
fi

if ! pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" { found = 1 } END { exit !found }'; then
	log "creating cluster $VERSION/main on port $PORT"
	pg_createcluster --port "$PORT" "$VERSION" main >&2
fi

CLUSTER_PORT=$(pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" { print $3 }')
if [ "$CLUSTER_PORT" != "$PORT" ]; then
	log "cluster $VERSION/main listens on port $CLUSTER_PORT, want $PORT; fix /etc/postgresql/$VERSION/main/postgresql.conf"
	exit 1
fi

if ! pg_lsclusters -h | awk -v v="$VERSION" '$1 == v && $2 == "main" && $4 ~ /^online/ { found = 1 } END { exit !found }'; then
	log "starting cluster $VERSION/main"
	pg_ctlcluster "$VERSION" main start >&2
fi

i=0
until pg_isready -q -h 127.0.0.1 -p "$PORT"; do
	i=$((i + 1))
	if [ "$i" -ge 60 ]; then
		log "server on 127.0.0.1:$PORT not ready after 30s; see /var/log/postgresql/postgresql-$VERSION-main.log"
		exit 1
	fi
	sleep 0.5
done

psql_admin() {
	(cd / && runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" "$@" >&2)
}

psql_admin <<SQL
DO \$\$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
		CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
	END IF;
END
\$\$;
ALTER ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
SELECT 'CREATE DATABASE $DATABASE OWNER $ROLE'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DATABASE')
\gexec
ALTER DATABASE $DATABASE OWNER TO $ROLE;
SQL

log "PostgreSQL $VERSION ready on 127.0.0.1:$PORT"
echo "export AGENTENV_TEST_POSTGRES_DSN=postgres://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DATABASE?sslmode=disable"
