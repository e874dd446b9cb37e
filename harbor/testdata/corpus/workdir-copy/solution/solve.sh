#!/bin/bash
cd /srv/work
sum=0
while read -r n; do sum=$((sum + n)); done < data/numbers.txt
echo "$sum" > sum.txt
