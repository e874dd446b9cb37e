#!/bin/bash
# The evidence the agent phase left, for the integration test to read from this step's stdout.
echo "evidence: $(cat /app/evidence.txt 2>/dev/null || echo none)"
mkdir -p /logs/verifier
if [ "$(cat /app/work.txt 2>/dev/null)" = "done" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
