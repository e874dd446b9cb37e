#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/late.txt 2>/dev/null)" = "late" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
