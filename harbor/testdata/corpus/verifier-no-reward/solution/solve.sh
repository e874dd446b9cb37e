#!/bin/bash
echo here > /app/marker.txt
