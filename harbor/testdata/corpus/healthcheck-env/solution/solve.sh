#!/bin/bash
echo "$APP_MODE:$(cat "$APP_HOME/seed.txt")" > "$APP_HOME/mode.txt"
