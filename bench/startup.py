"""Start-up, side by side in one run: a 1-trial sweep (whole `sweeps run` process, full MLflow
record: params, per-epoch metrics, dataset, model, cost) against the same trial written by hand
as a cold Ray Train run (bench/handwritten.py, whole process), alternated, with the same Ray
tuning (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=0.2). Then a 6-trial sweep on one lane: its first
trial against the steady-state ones, from the sweep's own timeline.

    .venv/bin/python bench/startup.py [--rounds 3] [--epochs 15] [--out bench/RESULTS.md]
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

SPEC = """name: {name}
objective: {{metric: val_accuracy, direction: maximize}}
search_space:
  lr: {{type: categorical, choices: [0.005]}}
sampler: {{name: random, seed: 0}}
pruner: {{name: none}}
budget: {{trials: {trials}, parallel: 1}}
resources: {{workers: 1, cpus_per_worker: 1, machine_type: e2-standard-2}}
trainer: {{model: mlp, dataset: digits, epochs: {epochs},
          params: {{hidden: 128, layers: 2, dropout: 0.1, optimizer: adamw}}}}
"""


def _env(home: str) -> dict[str, str]:
    return {**os.environ, "SWEEPS_HOME": home, "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


def handwritten(epochs: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "handwritten.py"), str(epochs)],
        env=_env(tempfile.mkdtemp()),
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t0


def sweep(epochs: int, trials: int) -> tuple[float, list[dict]]:
    """Whole-process wall of `sweeps run`, and the sweep's timeline from its parent run."""
    home = tempfile.mkdtemp(prefix="sweeps-startup-")
    spec = Path(home) / "spec.yaml"
    spec.write_text(SPEC.format(name="startup", trials=trials, epochs=epochs))
    t0 = time.perf_counter()
    r = subprocess.run(
        [str(BIN / "sweeps"), "run", str(spec), "--json"],
        env=_env(home),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    from mlflow.tracking import MlflowClient

    doc = json.loads(r.stdout)
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    path = client.download_artifacts(doc["parent_run_id"], "timeline.json")
    return wall, json.loads(Path(path).read_text())


def trial_spans(events: list[dict]) -> list[float]:
    """Seconds from each trial's assignment to its end, in trial order."""
    start = {e["trial"]: e["t"] for e in events if e["event"] == "trial.assigned"}
    end = {e["trial"]: e["t"] for e in events if e["event"] == "trial.ended"}
    return [end[n] - start[n] for n in sorted(start) if n in end]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--out")
    args = ap.parse_args()
    ours, anchor, phases = [], [], []
    for _ in range(args.rounds):  # alternated, so a busy spell hits both
        anchor.append(handwritten(args.epochs))
        wall, events = sweep(args.epochs, 1)
        ours.append(wall)
        phases.append(events)
    _, events6 = sweep(args.epochs, 6)
    spans = trial_spans(events6)
    first, steady = spans[0], statistics.median(spans[1:])
    from sweeps.common.timeline import breakdown

    med = statistics.median
    lines = [
        f"### startup ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, digits MLP, "
        f"{args.epochs} epochs, {args.rounds} alternated rounds)",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| hand-written cold Ray Train run, whole process (median) | {med(anchor):.1f} s | |",
        f"| 1-trial sweep, whole `sweeps run` process (median) | {med(ours):.1f} s | |",
        f"| ratio sweep / hand-written | **{med(ours) / med(anchor):.2f}** | <= 1.0 |",
        f"| first trial in a lane (assigned to ended) | {first:.2f} s | |",
        f"| steady-state trial (median of trials 2-6) | {steady:.2f} s | |",
        f"| ratio first / steady | **{first / steady:.2f}** | <= 1.5 |",
        "",
        f"Rounds: hand-written {[round(x, 1) for x in anchor]}, "
        f"sweep {[round(x, 1) for x in ours]}",
        "",
        "Where the 1-trial sweep's time went (last round, from its timeline.json):",
        "",
        "| phase | from s | took s |",
        "|---|---|---|",
    ]
    for label, start, took in breakdown(phases[-1]):
        lines.append(f"| {label} | {start:.2f} | {took:.2f} |")
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "startup")


if __name__ == "__main__":
    main()
