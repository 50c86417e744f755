#!/bin/bash
{ harbor-hello; python3 -c 'import harborcalc; print(harborcalc.add(20, 22))'; } > /app/answer.txt
