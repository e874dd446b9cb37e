#!/bin/bash
echo one > /app/data.txt
