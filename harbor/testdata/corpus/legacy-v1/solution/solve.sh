#!/bin/bash
wc -w < /app/text.txt > /app/count.txt
