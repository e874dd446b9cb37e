#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/notes.txt 2>/dev/null)" = "start" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
