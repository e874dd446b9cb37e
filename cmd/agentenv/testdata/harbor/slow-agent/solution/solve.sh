#!/bin/bash
sleep 60
echo "hello, harbor" > /app/hello.txt
