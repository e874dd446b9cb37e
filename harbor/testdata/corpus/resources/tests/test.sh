#!/bin/bash
mkdir -p /logs/verifier
if [ "$(tr '\n' , < /app/output.txt 2>/dev/null)" = "delta,gamma,beta,alpha," ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
