#!/bin/bash
sed -i '/^draft$/d' /app/notes.txt
