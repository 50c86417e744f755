#!/bin/bash
echo teal > /app/color.txt
