#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /srv/work/sum.txt 2>/dev/null)" = "147" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
