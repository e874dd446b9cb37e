#!/bin/bash
set -euo pipefail
cp /shared/note.txt /app/answer.txt
