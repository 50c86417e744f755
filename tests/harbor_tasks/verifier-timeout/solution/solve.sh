#!/bin/bash
printf harbor | sha256sum | cut -d' ' -f1 > /app/digest.txt
