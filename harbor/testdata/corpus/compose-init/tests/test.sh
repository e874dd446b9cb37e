#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/motto.txt 2>/dev/null)" = "slow and steady" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
