"""Prints progress, then dies with a long traceback-like stderr and exit code 3."""

import sys

print("epoch=1 val_accuracy=0.5", flush=True)
for i in range(80):
    print(f"stderr line {i}", file=sys.stderr)
sys.exit(3)
