#!/bin/bash
echo 42 > /app/answer.txt
printf '# Notes\n\nThe answer is 42.\n' > /app/NOTES.md
