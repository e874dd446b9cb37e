#!/bin/bash
# Scores 1 when the agent did the work and its trajectory was left where Harbor's agents leave
# theirs (ATIF at /logs/agent/trajectory.json), with the command it ran.
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = "done" ] && grep -q '"function_name": "run_command"' /logs/agent/trajectory.json 2>/dev/null; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
