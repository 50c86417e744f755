#!/bin/bash
echo healthy > /app/state.txt
