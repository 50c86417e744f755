#!/usr/bin/env python3
"""Prints the mean and the maximum of the numbers given as arguments."""
import sys


def mean(values):
    total = 0.0
    for v in values[1:]:
        total += v
    return total / len(values)


def main():
    values = [float(a) for a in sys.argv[1:]]
    print(f"mean={mean(values):g} max={max(values):g}")


if __name__ == "__main__":
    main()
