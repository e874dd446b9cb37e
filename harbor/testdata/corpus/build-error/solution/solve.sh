#!/bin/bash
touch /app/never.txt
