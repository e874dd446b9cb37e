#!/bin/bash
mkdir -p /logs/verifier
body=$(psql -h "${PGHOST:-db}" -tAc "select body from notes where id = 1" 2>/dev/null)
if [ "$body" = "hello from harbor" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
