#!/bin/bash
mkdir -p /logs/verifier
if [ "$APP_MODE" = "test" ] && [ "$(cat /app/mode.txt 2>/dev/null)" = "test:seed-7" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
