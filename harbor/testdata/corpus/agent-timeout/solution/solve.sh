#!/bin/bash
# Sleeps past [agent].timeout_sec (2 s): the agent phase times out before the file appears.
sleep 10
echo late > /app/late.txt
