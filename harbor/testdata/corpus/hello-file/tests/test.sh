#!/bin/bash
mkdir -p /logs/verifier /logs/artifacts
echo "checked $(date -u +%FT%TZ)" > /logs/artifacts/checked.txt
if [ "$(cat /app/hello.txt 2>/dev/null)" = "hello, harbor" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
