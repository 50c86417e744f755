#!/bin/bash
# Step setup: runs in the working directory before the step's agent phase.
echo seed > /app/seed.txt
