#!/bin/bash
# reward.json with two metrics; the step's min_reward gates on "lines" alone.
mkdir -p /logs/verifier
lines=0; reward=0
[ "$(wc -l < /app/notes.txt 2>/dev/null)" = "3" ] && lines=1
[ "$(tr '\n' , < /app/notes.txt 2>/dev/null)" = "start,draft,end," ] && reward=1
echo "{\"reward\": $reward, \"lines\": $lines}" > /logs/verifier/reward.json
