#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/secret.txt 2>/dev/null)" = "tulip-42" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
