#!/bin/bash
. /tests/lib.sh
reward test "$(cat "${DATA_FILE:-/app/data.txt}" 2>/dev/null)" = "one"
