#!/bin/bash
echo bonjour > /app/greeting.txt
chmod 644 /app/greeting.txt
