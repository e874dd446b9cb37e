#!/bin/bash
echo two >> /app/data.txt
