#!/bin/bash
# Deliberately broken: checks the file but writes neither reward.txt nor reward.json.
if [ "$(cat /app/marker.txt 2>/dev/null)" = "here" ]; then
  echo "marker found"
else
  echo "marker missing"
fi
exit 0
