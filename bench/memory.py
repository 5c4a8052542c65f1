"""Memory: a lane worker's RSS after 10 vs 100 trials (no leak across trials), and the
driver's peak RSS during a 1,000-trial sweep. Also the tracking overhead per trial.

    .venv/bin/python bench/memory.py [--out bench/RESULTS.md] [--trials 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def lane_rss(n: int) -> tuple[float, float]:
    from mlflow.tracking import MlflowClient

    from sweeps import api
    from sweeps.spec import spec_from_dict

    spec = spec_from_dict(
        {
            "name": "mem-lane",
            "search_space": {
                "lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
                "hidden": {"type": "int", "low": 32, "high": 256},
            },
            "sampler": {"name": "random", "seed": 0},
            "pruner": {"name": "none"},
            "budget": {"trials": n, "parallel": 1},
            "execution": {"recycle_rss_growth": 0},  # measure, do not cure
            "trainer": {"model": "mlp", "dataset": "digits", "epochs": 1},
            "tracking": {"log_models": False},
        }
    )
    out = api.run(spec, install_signals=False)
    client = MlflowClient(out.tracking_uri)
    by_number = {t["number"]: t["mlflow_run_id"] for t in api.show("mem-lane")["trials"]}
    rss = {
        k: client.get_run(r).data.metrics.get("worker_rss_mb", 0.0)
        for k, r in by_number.items()
        if k in (9, n - 1)
    }
    return rss[9], rss[n - 1]


def driver_peak(n: int) -> tuple[float, float, float, float, float]:
    import psutil

    from sweeps import api
    from sweeps.spec import spec_from_dict

    spec = spec_from_dict(
        {
            "name": "mem-driver",
            "search_space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1}},
            "sampler": {"name": "random", "seed": 0},
            "pruner": {"name": "none"},
            "budget": {"trials": n, "parallel": 2},
            "trainer": {"entrypoint": "tasks:tiny", "code_dir": str(ROOT / "bench"), "epochs": 1},
        }
    )
    proc = psutil.Process()
    peak = [proc.memory_info().rss]
    writer_peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak.append(proc.memory_info().rss)
            for child in proc.children():  # the tracker's writer process (tracking.writer_proc)
                try:
                    if "writer_proc" in " ".join(child.cmdline()):
                        writer_peak.append(child.memory_info().rss)
                except psutil.Error:
                    pass
            time.sleep(0.5)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    out = api.run(spec, install_signals=False)
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    import optuna

    study = optuna.load_study(study_name="mem-driver", storage=out.storage_url)
    durations = [t.user_attrs.get("duration_s", 0.0) for t in study.trials]
    per_trial = sum(durations) / len(durations)
    mb = 2**20
    return max(peak) / mb, max(writer_peak) / mb, wall, per_trial, out.tracking_blocking_s / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--lane-trials", type=int, default=100)
    args = ap.parse_args()
    os.environ["SWEEPS_HOME"] = tempfile.mkdtemp(prefix="sweeps-mem-")
    import ray

    from sweeps.execution.cluster import ensure_ray

    ensure_ray()  # the Ray `sweeps run` starts (and its settings), shared by both sweeps
    r10, r100 = lane_rss(args.lane_trials)
    peak, writer, wall, per_trial, blocking = driver_peak(args.trials)
    ray.shutdown()
    lines = [
        f"### memory ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, CPU only)",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| lane worker RSS after 10 trials | {r10:.0f} MB | |",
        f"| lane worker RSS after {args.lane_trials} trials | {r100:.0f} MB | |",
        f"| ratio | **{r100 / r10:.3f}** | <= 1.1 |",
        f"| driver peak RSS, {args.trials}-trial sweep | **{peak:.0f} MB** | <= 600 MB |",
        f"| its MLflow writer process, peak RSS | {writer:.0f} MB | |",
        f"| {args.trials}-trial sweep wall (tiny trials, 2 lanes) | **{wall:.1f} s** | <= 40 s |",
        f"| driver time blocked on MLflow per trial | **{blocking * 1000:.2f} ms** | <= 1 ms |",
        f"| mean trial duration (assignment to result) | {per_trial * 1000:.0f} ms | |",
    ]
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "memory")


if __name__ == "__main__":
    main()
