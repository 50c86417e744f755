#!/bin/bash
echo 42 > /app/answer.txt
mkdir -p /app/notes && echo "six times seven" > /app/notes/how.txt
