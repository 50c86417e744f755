#!/bin/bash
mkdir -p /tmp/work && echo forty-two > /tmp/work/out.txt
