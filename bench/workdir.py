"""What a trial's own working directory costs (sweeps.worker.workdir): a view of a code dir
of 1,000 source files of 2 KB in 20 folders, plus one 200 MB data file (hard-linked), against
the trial it precedes. Prints milliseconds per view, median of 5.

    .venv/bin/python bench/workdir.py
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

from sweeps.worker import workdir


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-workdir-"))
    code = root / "code"
    for i in range(1000):
        p = code / f"pkg{i % 20}" / f"mod{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n" * 340)
    with open(code / "data.bin", "wb") as f:
        f.truncate(200 * 2**20)
    times = []
    for n in range(5):
        view = root / f"view{n}"
        view.mkdir()
        t0 = time.perf_counter()
        placed = workdir.make_view(code, view)
        times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        workdir.written(view, placed)
        scan = time.perf_counter() - t0
    shutil.rmtree(root)
    print(f"files in view: {len(placed)} (1000 copied, 1 of 200 MB hard-linked)")
    print(f"view of a 1,000-file code dir: {statistics.median(times) * 1000:.0f} ms (median of 5)")
    print(f"scan for what the trial wrote: {scan * 1000:.0f} ms")


if __name__ == "__main__":
    main()
