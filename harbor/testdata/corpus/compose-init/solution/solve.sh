#!/bin/bash
set -euo pipefail
psql -v ON_ERROR_STOP=1 -tAc "select value from settings where key = 'motto'" > /app/motto.txt
