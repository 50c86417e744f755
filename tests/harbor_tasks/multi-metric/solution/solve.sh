#!/bin/bash
cat > /app/fib.py <<'PY'
def fib(n):
    """The n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
PY
