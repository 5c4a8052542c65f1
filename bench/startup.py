"""Start-up, side by side in one run, on the shipped quickstart: a 1-trial sweep (the whole
`sweeps run conf/quickstart.yaml --trials 1` process, as shipped: full MLflow record, params,
per-epoch metrics, dataset, model, cost) against the same trial (same params, epochs, model and
data) written by hand as a cold Ray Train run (bench/handwritten.py, whole process),
alternated. The headline row runs both as shipped; a second row, labelled, runs both with
Ray's health check tuned (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=0.2). Then the quickstart with
`--trials 6`: its first trial against the steady-state ones, from the sweep's own timeline.

    .venv/bin/python bench/startup.py [--rounds 3] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
QUICKSTART = ROOT / "conf" / "quickstart.yaml"
TUNED = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


def _env(home: str, extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, "SWEEPS_HOME": home, **extra}
    env.pop("RAY_ADDRESS", None)
    return env


def handwritten(epochs: int, params: dict, extra: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "handwritten.py"), str(epochs), json.dumps(params)],
        env=_env(tempfile.mkdtemp(), extra),
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t0


def sweep(trials: int, extra: dict[str, str]) -> tuple[float, list[dict], dict]:
    """Whole-process wall of `sweeps run conf/quickstart.yaml --trials N`, the sweep's timeline
    from its parent run, and its best trial's params."""
    home = tempfile.mkdtemp(prefix="sweeps-startup-")
    t0 = time.perf_counter()
    r = subprocess.run(
        [str(BIN / "sweeps"), "run", str(QUICKSTART), "--trials", str(trials), "--json"],
        env=_env(home, extra),
        capture_output=True,
        text=True,
        cwd=home,
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    from mlflow.tracking import MlflowClient

    doc = json.loads(r.stdout)
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    path = client.download_artifacts(doc["parent_run_id"], "timeline.json")
    return wall, json.loads(Path(path).read_text()), doc["best"]["params"]


def trial_spans(events: list[dict]) -> list[float]:
    """Seconds from each trial's assignment to its end, in trial order."""
    start = {e["trial"]: e["t"] for e in events if e["event"] == "trial.assigned"}
    end = {e["trial"]: e["t"] for e in events if e["event"] == "trial.ended"}
    return [end[n] - start[n] for n in sorted(start) if n in end]


def _epochs() -> int:
    import yaml

    return int(yaml.safe_load(QUICKSTART.read_text())["trainer"]["epochs"])


def _pair(rounds: int, extra: dict[str, str]) -> tuple[list[float], list[float], list[dict]]:
    """Alternated rounds (a busy spell hits both): the sweep first, then the same trial by hand."""
    ours, anchor, phases = [], [], []
    for _ in range(rounds):
        wall, events, params = sweep(1, extra)
        ours.append(wall)
        phases.append(events)
        anchor.append(handwritten(_epochs(), params, extra))
    return ours, anchor, phases


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    shipped = _pair(args.rounds, {})
    tuned = _pair(args.rounds, TUNED)
    _, events6, _ = sweep(6, {})
    spans = trial_spans(events6)
    first, steady = spans[0], statistics.median(spans[1:])
    from sweeps.common.timeline import breakdown

    med = statistics.median

    def row(label: str, got: tuple[list[float], list[float], list[dict]]) -> str:
        ours, anchor, _ = got
        each = f"{[round(x, 1) for x in ours]} / {[round(x, 1) for x in anchor]}"
        return f"| {label} | {each} | **{med(ours) / med(anchor):.2f}** | <= 0.5 |"

    lines = [
        f"### startup ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, conf/quickstart.yaml "
        f"as shipped: digits MLP, {_epochs()} epochs; {args.rounds} alternated rounds)",
        "",
        "| variant | each run, s: 1-trial sweep / hand-written | median ratio | target |",
        "|---|---|---|---|",
        row("**shipped quickstart** (`sweeps run conf/quickstart.yaml --trials 1`)", shipped),
        row("tuned, both sides: RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=0.2", tuned),
        "",
        "| quickstart `--trials 6` | value | target |",
        "|---|---|---|",
        f"| first trial in a lane (assigned to ended) | {first:.2f} s | |",
        f"| steady-state trial (median of trials 2-6) | {steady:.2f} s | |",
        f"| ratio first / steady | **{first / steady:.2f}** | <= 1.5 |",
        "",
        "Where the shipped 1-trial sweep's time went (last round, from its timeline.json):",
        "",
        "| phase | from s | took s |",
        "|---|---|---|",
    ]
    for label, start, took in breakdown(shipped[2][-1]):
        lines.append(f"| {label} | {start:.2f} | {took:.2f} |")
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "startup")


if __name__ == "__main__":
    main()
