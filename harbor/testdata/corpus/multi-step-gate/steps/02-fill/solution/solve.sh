#!/bin/bash
printf 'draft\nend\n' >> /app/notes.txt
