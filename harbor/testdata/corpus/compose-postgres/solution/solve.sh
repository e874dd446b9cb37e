#!/bin/bash
set -e
psql -v ON_ERROR_STOP=1 -c "create table notes (id integer primary key, body text)"
psql -v ON_ERROR_STOP=1 -c "insert into notes values (1, 'hello from harbor')"
