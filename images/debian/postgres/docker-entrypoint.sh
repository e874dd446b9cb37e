#!/bin/sh
# Initialises PGDATA on first start, as the postgres:16 image does, then runs the command.
# POSTGRES_INITDB_ARGS are passed to initdb after our own flags, so that, as there,
# "--auth-local=scram-sha-256" makes logins on the socket ask for the password too.
set -eu
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
	user=${POSTGRES_USER:-postgres}
	db=${POSTGRES_DB:-$user}
	method=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
	if [ "$method" = trust ]; then
		# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of flags
		initdb -D "$PGDATA" -U "$user" --auth-local=trust --auth-host=trust ${POSTGRES_INITDB_ARGS:-} >/dev/null
	else
		: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required (or POSTGRES_HOST_AUTH_METHOD=trust)}"
		pw=$(mktemp)
		printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
		# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of flags
		initdb -D "$PGDATA" -U "$user" --pwfile="$pw" --auth-local=trust --auth-host="$method" ${POSTGRES_INITDB_ARGS:-} >/dev/null
		rm -f "$pw"
	fi
	echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
	echo "host all all all $method" >>"$PGDATA/pg_hba.conf"
	if [ "$db" != postgres ]; then
		pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
		PGPASSWORD=${POSTGRES_PASSWORD:-} createdb -U "$user" "$db"
		pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
	fi
fi
exec "$@"
