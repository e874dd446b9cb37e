#!/bin/bash
mkdir -p /app
echo "hello, harbor" > /app/hello.txt
