#!/bin/bash
# The note is read from the volume the writer service shared, so a task whose volume did not
# reach main scores 0 whatever the agent did.
mkdir -p /logs/verifier
note="$(cat /shared/note.txt 2>/dev/null)"
if [ "$note" = "the tide turns at noon" ] && [ "$(cat /app/answer.txt 2>/dev/null)" = "$note" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
