#!/bin/bash
id -un > /app/whoami.txt
