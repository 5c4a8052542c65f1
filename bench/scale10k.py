"""10,000 tiny trials on 2 lanes, on SQLite and on a local PostgreSQL, side by side in one run.

Per store, in a fresh process (so one store's peak RSS is not the other's): the sweep's wall
(`api.run`, Ray already up), the driver's peak RSS, the driver's time blocked on MLflow per
trial, the sampler's cost per ask (TPE, the default sampler) at 100, 1k, 5k and 10k trials,
then `sweeps show NAME` and `sweeps ls` as whole CLI processes. Both stores hold Optuna and
MLflow: SQLite files under SWEEPS_HOME, or two databases of the PostgreSQL server.

    .venv/bin/python bench/scale10k.py [--trials 10000] [--stores sqlite,postgres]
        [--profile DIR] [--out bench/RESULTS.md]

`--profile DIR` writes a cProfile of each store's driver (`python -m pstats DIR/sqlite.prof`).
`--heap DIR` writes the driver's heap 50 trials before the end (tracemalloc, 3 frames; slows
the run): DIR/STORE.heap.txt, the 40 biggest allocation sites, with the RSS then.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = (100, 1000, 5000, 10000)
WINDOW = 50  # asks averaged around each size


def _spec(name: str, trials: int) -> Any:
    from sweeps.spec import spec_from_dict

    return spec_from_dict(
        {
            "name": name,
            "search_space": {
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "hidden": {"type": "int", "low": 32, "high": 256},
            },
            "sampler": {"seed": 0},  # the default sampler (TPE) and its default options
            "budget": {"trials": trials, "parallel": 2},
            "trainer": {"entrypoint": "tasks:tiny", "code_dir": str(ROOT / "bench"), "epochs": 1},
        }
    )


def _timed_asks(
    record: list[tuple[int, float]], rss: dict[str, float], heap_at: int = -1, heap_to: str = ""
) -> None:
    """Each `TrialBook.ask` (claim, sample, suggest): its duration, by trial number; the
    driver's RSS every 1,000 trials (what grows with the count); at trial `heap_at`, the heap
    written to `heap_to`."""
    import psutil

    from sweeps.driver.book import TrialBook

    inner = TrialBook.ask
    proc = psutil.Process()

    def ask(self: Any) -> Any:
        t0 = time.perf_counter()
        rec = inner(self)
        record.append((rec.number, time.perf_counter() - t0))
        if rec.number % 1000 == 0:
            rss[str(rec.number)] = round(proc.memory_info().rss / 2**20)
        if rec.number == heap_at:
            _write_heap(heap_to)
        return rec

    TrialBook.ask = ask  # type: ignore[method-assign]


def _write_heap(path: str) -> None:
    import tracemalloc

    import psutil

    snap = tracemalloc.take_snapshot()
    stats = snap.statistics("traceback")
    lines = [f"rss {psutil.Process().memory_info().rss / 2**20:.0f} MB, traced "
             f"{sum(s.size for s in stats) / 2**20:.0f} MB"]  # fmt: skip
    for st in stats[:40]:
        lines.append(f"{st.size / 2**20:8.1f} MB {st.count:9d} blocks")
        lines += [f"    {f.filename}:{f.lineno}" for f in st.traceback]
    Path(path).write_text("\n".join(lines) + "\n")


CPU_GROUPS = (  # a process's group: the first pattern its command line holds
    ("scale10k.py", "driver"),
    ("tracking", "MLflow writer"),
    ("RayTrainWorker", "Ray Train workers"),
    ("Broker", "broker"),
    ("ray", "rest of Ray"),
)


class CpuBook:
    """CPU seconds each group of processes spent while the sweep ran, sampled every 0.5 s (a
    process that ends between samples loses its last half second)."""

    def __init__(self) -> None:
        import psutil

        self.psutil, self.start, self.last = psutil, {}, {}
        for proc in psutil.process_iter(["pid"]):
            self.start[proc.pid] = self._cpu(proc) or 0.0

    def _cpu(self, proc: Any) -> float | None:
        try:
            t = proc.cpu_times()
            return t.user + t.system
        except self.psutil.Error:
            return None

    def sample(self) -> None:
        for proc in self.psutil.process_iter(["pid", "cmdline"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            group = next((g for pat, g in CPU_GROUPS if pat in cmd), None)
            cpu = self._cpu(proc)
            if group and cpu is not None:
                self.last[proc.pid] = (group, cpu - self.start.get(proc.pid, 0.0))

    def totals(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for group, cpu in self.last.values():
            out[group] = out.get(group, 0.0) + cpu
        return out


def _cli(*args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args], capture_output=True, text=True, timeout=300
    )
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"sweeps {' '.join(args)} failed: {r.stderr.strip()[-400:]}")
    return wall, r.stdout


def one(store: str, trials: int, profile: str | None, heap: str | None = None) -> dict[str, Any]:
    """One store's figures (run in a child process: SWEEPS_HOME and the URLs come in env)."""
    import psutil

    from sweeps import api
    from sweeps.execution.cluster import ensure_ray

    ensure_ray()
    asks: list[tuple[int, float]] = []
    rss: dict[str, float] = {}
    if heap:
        import tracemalloc

        tracemalloc.start(3)
        _timed_asks(asks, rss, max(0, trials - 50), os.path.join(heap, f"{store}.heap.txt"))
    else:
        _timed_asks(asks, rss)
    proc = psutil.Process()
    peak = [proc.memory_info().rss]
    done = threading.Event()
    cpu = CpuBook()

    def sample() -> None:
        while not done.is_set():
            peak.append(proc.memory_info().rss)
            cpu.sample()
            time.sleep(0.5)

    threading.Thread(target=sample, daemon=True).start()
    spec = _spec("scale", trials)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    out = api.run(spec, install_signals=False)
    wall = time.perf_counter() - t0
    if prof is not None:
        prof.disable()
        prof.dump_stats(os.path.join(profile, f"{store}.prof"))
    done.set()
    cpu.sample()
    show = [_cli("show", "scale")[0] for _ in range(3)]
    ls = [_cli("ls")[0] for _ in range(3)]
    by_number = dict(asks)
    ask_ms = {}
    for n in SIZES:
        near = [by_number[k] for k in range(max(0, n - WINDOW), n) if k in by_number]
        if near and n <= trials:
            ask_ms[str(n)] = statistics.median(near) * 1000
    return {
        "state": out.state,
        "wall_s": wall,
        "peak_mb": max(peak) / 2**20,
        "rss_mb_at_trial": rss,
        "blocking_ms": out.tracking_blocking_s / trials * 1000,
        "ask_ms": ask_ms,
        "ask_total_s": sum(d for _, d in asks),
        "show_s": statistics.median(show),
        "ls_s": statistics.median(ls),
        "cpu_ms_per_trial": {g: round(v / trials * 1000, 1) for g, v in cpu.totals().items()},
    }


def _child(store: str, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", store, "--trials", str(args.trials)]
    if args.profile:
        cmd += ["--profile", args.profile]
    if args.heap:
        cmd += ["--heap", args.heap]
    r = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{store}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"{store}: {json.dumps(got)}", file=sys.stderr, flush=True)  # a later store may not end
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--profile")
    ap.add_argument("--heap")
    ap.add_argument("--out")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.trials, args.profile, args.heap)))
        return
    stores = args.stores.split(",")
    for folder in (args.profile, args.heap):
        if folder:
            os.makedirs(folder, exist_ok=True)
    figures: dict[str, dict[str, Any]] = {}
    t0 = time.time()
    for store in stores:
        home = tempfile.mkdtemp(prefix=f"sweeps-10k-{store}-")
        env = {"SWEEPS_HOME": home}
        if store == "postgres":
            sys.path.insert(0, str(ROOT / "tests"))
            from services import postgres_server

            with postgres_server() as pg:
                env["SWEEPS_STORAGE"] = pg.create_database("optuna10k")
                env["MLFLOW_TRACKING_URI"] = pg.create_database("mlflow10k")
                figures[store] = _child(store, env, args)
        else:
            figures[store] = _child(store, env, args)
    _publish(figures, args, time.time() - t0)


def _publish(figures: dict[str, dict[str, Any]], args: argparse.Namespace, spent: float) -> None:
    stores = list(figures)
    n = args.trials

    def row(label: str, key: str, fmt: str, target: str = "") -> str:
        cells = " | ".join(fmt.format(figures[s][key]) for s in stores)
        return f"| {label} | {cells} | {target} |"

    ask_rows = [
        f"| TPE ask + suggest at {k:,} trials (median of the {WINDOW} before) | "
        + " | ".join(f"{figures[s]['ask_ms'].get(str(k), float('nan')):.1f} ms" for s in stores)
        + " | |"
        for k in SIZES
        if k <= n
    ]
    lines = [
        f"### scale10k ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, tiny trials, "
        f"2 lanes, TPE defaults, {spent:.0f} s in all)",
        "",
        f"| measure | {' | '.join(stores)} | target |",
        "|---|" + "---|" * len(stores) + "---|",
        row(f"{n:,}-trial sweep wall", "wall_s", "**{:.1f} s**", "<= 150 s"),
        row("sweep state", "state", "{}"),
        row("driver peak RSS", "peak_mb", "**{:.0f} MB**", "<= 600 MB"),
        row("driver blocked on MLflow, per trial", "blocking_ms", "**{:.2f} ms**", "<= 1 ms"),
        row("all asks (claim, sample, suggest)", "ask_total_s", "{:.1f} s"),
        *ask_rows,
        *(
            f"| CPU per trial: {g} | "
            + " | ".join(f"{figures[s]['cpu_ms_per_trial'].get(g, 0):.1f} ms" for s in stores)
            + " | |"
            for _, g in CPU_GROUPS
        ),
        row("`sweeps show scale` (median of 3)", "show_s", "**{:.2f} s**", "<= 2 s"),
        row("`sweeps ls` (median of 3)", "ls_s", "**{:.2f} s**", "<= 1 s"),
    ]
    from bench.results import publish

    publish("\n".join(lines), args.out, "scale10k")


if __name__ == "__main__":
    main()
