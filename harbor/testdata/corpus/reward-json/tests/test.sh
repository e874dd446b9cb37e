#!/bin/bash
mkdir -p /logs/verifier
correct=0; notes=0
[ "$(cat /app/answer.txt 2>/dev/null)" = "42" ] && correct=1
[ "$(head -n 1 /app/NOTES.md 2>/dev/null)" = "# Notes" ] && notes=1
if [ $correct = 1 ] && [ $notes = 1 ]; then reward=1; else reward=0; fi
printf '{"reward": %s, "correctness": %s, "notes": %s}\n' "$reward" "$correct" "$notes" > /logs/verifier/reward.json
