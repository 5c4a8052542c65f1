"""Rank 1 crashes at once; rank 0 would train for minutes, waiting on it."""

import os
import sys
import time

if os.environ["RANK"] == "1":
    print("rank 1: out of memory", file=sys.stderr)
    sys.exit(5)
for epoch in range(1, 1000):
    print(f"epoch={epoch} val_accuracy=0.5", flush=True)
    time.sleep(0.2)
