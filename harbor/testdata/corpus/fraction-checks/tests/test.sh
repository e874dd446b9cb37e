#!/bin/bash
# Four checks; the reward is the fraction that pass.
mkdir -p /logs/verifier
cd /app/project 2>/dev/null || { echo 0 > /logs/verifier/reward.txt; exit 0; }
pass=0
[ "$(head -n 1 README.md 2>/dev/null)" = "# Project" ] && pass=$((pass + 1))
[ -x src/main.sh ] && [ "$(./src/main.sh 2>/dev/null)" = "main" ] && pass=$((pass + 1))
grep -qx '\*\.log' .gitignore 2>/dev/null && pass=$((pass + 1))
[ -s LICENSE ] && pass=$((pass + 1))
case $pass in
  0) r=0 ;; 1) r=0.25 ;; 2) r=0.5 ;; 3) r=0.75 ;; 4) r=1 ;;
esac
echo "$r" > /logs/verifier/reward.txt
