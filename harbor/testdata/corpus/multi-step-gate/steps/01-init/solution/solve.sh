#!/bin/bash
echo start > /app/notes.txt
