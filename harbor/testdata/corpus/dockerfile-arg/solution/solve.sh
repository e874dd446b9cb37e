#!/bin/bash
tr '[:lower:]' '[:upper:]' < /etc/greeting > /app/out.txt
