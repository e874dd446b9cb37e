#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/offline.txt 2>/dev/null)" = "offline" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
