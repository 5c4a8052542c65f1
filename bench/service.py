"""The sweep service, measured side by side in one run: `sweeps up`, then the same sweep submitted
under several names; the first starts its lanes cold, the others (`--warm`, 3) run on the
first's warm lanes, one after another. Reports submit latency (the whole `sweeps submit`
process), each sweep's first trial start after its submit, and each sweep's wall time (submit
to finished); the warm column is the median warm sweep by its first trial's start.

    .venv/bin/python bench/service.py [--trials 6] [--epochs 5] [--warm 3] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SWEEPS = [sys.executable, "-m", "sweeps.cli"]


def _cli(env: dict[str, str], *args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run([*SWEEPS, *args], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"sweeps {' '.join(args)}: {r.stderr[-2000:]}")
    return time.perf_counter() - t0, r.stdout


def _sweep(env: dict[str, str], home: str, name: str, trials: int, epochs: int) -> dict:
    import optuna

    submitted = time.time()
    latency, out = _cli(
        env,
        "submit",
        str(ROOT / "conf/quickstart.yaml"),
        "--name",
        name,
        "--json",
        "--trials",
        str(trials),
        "--parallel",
        "1",
        "--set",
        f"trainer.epochs={epochs}",
        "--set",
        "pruner.name=none",  # the median's options are dropped with a note
    )
    storage = f"sqlite:///{home}/optuna.db"
    first = None
    while True:
        study = optuna.load_study(study_name=name, storage=storage)
        trials_ = study.get_trials(deepcopy=False)
        if first is None and trials_ and trials_[0].datetime_start:
            first = trials_[0].datetime_start.timestamp() - submitted
        state = study.user_attrs.get("sweeps.state")
        if state not in (None, "queued", "running"):
            break
        time.sleep(0.2)
    done = max(t.datetime_complete.timestamp() for t in trials_ if t.datetime_complete)
    return {
        "submit_s": latency,
        "first_trial_s": first,
        "wall_s": done - submitted,
        "state": state,
        "lanes": sorted({t.user_attrs.get("sweeps.lane") for t in trials_}),
        "driver_first_s": _driver_first_assignment(home, study.user_attrs),
    }


def _driver_first_assignment(home: str, attrs: dict) -> float | None:
    """From the driver's own timeline (timeline.json on the parent run): its process start to
    its first trial's assignment."""
    import glob
    import json

    run_id = attrs.get("sweeps.mlflow_parent_run_id")
    for path in glob.glob(f"{home}/artifacts/**/{run_id}/artifacts/timeline.json", recursive=True):
        with open(path) as f:
            events = json.load(f)
        return next((e["t"] for e in events if e["event"] == "trial.assigned"), None)
    return None


def _s(v: float | None) -> str:
    return "?" if v is None else f"{v:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--warm", type=int, default=3, help="warm sweeps after the cold one")
    ap.add_argument("--out")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="sweeps-svc-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWEEPS_", "MLFLOW_"))}
    env["SWEEPS_HOME"] = home
    up_s, _ = _cli(env, "up", "--json")
    try:
        cold = _sweep(env, home, "cold", args.trials, args.epochs)
        warms = [_sweep(env, home, f"warm{i}", args.trials, args.epochs) for i in range(args.warm)]
    finally:
        _cli(env, "down")
    # The median warm sweep by its first trial's start (Ray's own job start varies by ~0.5 s).
    warm = sorted(warms, key=lambda w: w["first_trial_s"])[len(warms) // 2]
    firsts = ", ".join(f"{w['first_trial_s']:.2f}" for w in warms)
    same = all(w["lanes"] == cold["lanes"] for w in warms)
    lines = [
        f"### service ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, quickstart digits MLP, "
        f"{args.trials} trials x {args.epochs} epochs, 1 lane, {args.warm} warm sweeps)",
        "",
        "| measure | cold sweep | warm sweep (the median one) | target |",
        "|---|---|---|---|",
        f"| `sweeps submit` process (submit latency) | {cold['submit_s']:.2f} s | "
        f"{warm['submit_s']:.2f} s | <= 5 s |",
        f"| first trial started, after submit | {cold['first_trial_s']:.2f} s | "
        f"**{warm['first_trial_s']:.2f} s** | warm <= 3 s |",
        f"| ... after the `sweeps submit` process ended | "
        f"{cold['first_trial_s'] - cold['submit_s']:.2f} s | "
        f"{warm['first_trial_s'] - warm['submit_s']:.2f} s | |",
        f"| driver process start to its first assignment | {_s(cold['driver_first_s'])} | "
        f"{_s(warm['driver_first_s'])} | |",
        f"| sweep wall, submit to last trial's end | {cold['wall_s']:.1f} s | "
        f"{warm['wall_s']:.1f} s | |",
        f"| ratio warm / cold wall | | **{warm['wall_s'] / cold['wall_s']:.2f}** | <= 0.5 |",
        "",
        f"`sweeps up` took {up_s:.1f} s. {len(warms)} warm sweeps, first trial after submit: "
        f"{firsts} s. Every warm sweep ran on the cold one's lane: {same} "
        f"({', '.join(warm['lanes'])}).",
    ]
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "service")


if __name__ == "__main__":
    main()
