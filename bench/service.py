"""The sweep service as a user meets it: `sweeps up`, then `sweeps submit conf/quickstart.yaml
--trials 4` (the quickstart as shipped: its `parallel`, its trainer), once cold and then again
on the warm service, under fresh names. The first trial is timed from the moment `submit`
starts to the trial's MLflow run start; every run's figures are printed, not only a median.

Headline row: the shipped spec as is. Second row (labelled "tuned", `--tuned`, on a service
of its own): the settings this bench used before (1 lane, 5 epochs, no pruner).

Each submitted sweep's driver timeline (timeline.json on its parent run) gives where the time
between `submit` and the first trial goes: the submit process, the driver's start (Ray Jobs'
supervisor and `python -m sweeps.jobs`, or the service's resident sweep host), its stores,
`ray.init`, the lanes claimed, the first assignment.

    .venv/bin/python bench/service.py [--warm 3] [--trials 4] [--tuned] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import glob
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
SWEEPS = [sys.executable, "-m", "sweeps.cli"]
QUICKSTART = str(ROOT / "conf/quickstart.yaml")
TUNED = ["--parallel", "1", "--set", "trainer.epochs=5", "--set", "pruner.name=none"]


def _cli(env: dict[str, str], *args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run([*SWEEPS, *args], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"sweeps {' '.join(args)}: {r.stderr[-2000:]}")
    return time.perf_counter() - t0, r.stdout


def _sweep(env: dict[str, str], home: str, name: str, trials: int, extra: list[str]) -> dict:
    import optuna
    from mlflow.tracking import MlflowClient

    submitted = time.time()
    latency, _ = _cli(
        env, "submit", QUICKSTART, "--name", name, "--json", "--trials", str(trials), *extra
    )
    storage = f"sqlite:///{home}/optuna.db"
    while True:
        study = optuna.load_study(study_name=name, storage=storage)
        state = study.user_attrs.get("sweeps.state")
        if state not in (None, "queued", "running"):
            break
        time.sleep(0.2)
    trials_ = study.get_trials(deepcopy=False)
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    starts = [
        client.get_run(t.user_attrs["mlflow_run_id"]).info.start_time / 1000
        for t in trials_
        if t.user_attrs.get("mlflow_run_id")
    ]
    done = max(t.datetime_complete.timestamp() for t in trials_ if t.datetime_complete)
    return {
        "name": name,
        "submit_s": latency,
        "first_trial_s": min(starts) - submitted if starts else None,
        "wall_s": done - submitted,
        "state": state,
        "lanes": sorted({str(t.user_attrs.get("sweeps.lane")) for t in trials_}),
        "trial_s": sum((t.duration.total_seconds() for t in trials_ if t.duration), 0.0),
        "driver": _driver_marks(home, study.user_attrs, submitted),
    }


def _driver_marks(home: str, attrs: dict, submitted: float) -> dict[str, float]:
    """The driver's own timeline, as seconds after `submit` began (its process start's wall
    time lines the two clocks up)."""
    run_id = attrs.get("sweeps.mlflow_parent_run_id")
    for path in glob.glob(f"{home}/artifacts/**/{run_id}/artifacts/timeline.json", recursive=True):
        with open(path) as f:
            events = json.load(f)
        wall = events[0].get("wall")
        if wall is None:
            return {}
        out: dict[str, float] = {}
        for e in events:
            if e["event"] not in out:
                out[e["event"]] = wall + e["t"] - submitted
        return out
    return {}


MARKS = (
    ("process.start", "driver start"),
    ("imports.done", "imports done"),
    ("stores.ready", "stores ready"),
    ("ray.ready", "ray.init done"),
    ("lanes.claimed", "lanes claimed"),
    ("trial.assigned", "first assigned"),
)


def _row(label: str, r: dict) -> str:
    d = r["driver"]
    marks = ", ".join(f"{short} {d[m]:.2f}" for m, short in MARKS if m in d)
    first = "?" if r["first_trial_s"] is None else f"{r['first_trial_s']:.2f} s"
    return (
        f"| {label} {r['name']} | {r['submit_s']:.2f} s | **{first}** | {r['wall_s']:.1f} s | "
        f"{r['trial_s']:.1f} s | {len(r['lanes'])} | {r['state']} | {marks} |"
    )


def _series(tag: str, trials: int, warm: int, extra: list[str]) -> tuple[dict, list[dict], float]:
    """A service of its own (`up`, the sweeps, `down`): its first sweep starts its lanes cold.
    Returns (cold, warms, `sweeps up` seconds)."""
    home = tempfile.mkdtemp(prefix="sweeps-svc-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWEEPS_", "MLFLOW_"))}
    env["SWEEPS_HOME"] = home
    up_s, _ = _cli(env, "up", "--json")
    try:
        cold = _sweep(env, home, f"{tag}-cold", trials, extra)
        warms = [_sweep(env, home, f"{tag}-warm{i}", trials, extra) for i in range(warm)]
    finally:
        _cli(env, "down")
    return cold, warms, up_s


def _table(label: str, cold: dict, warms: list[dict]) -> list[str]:
    """Every run's figures, then the warm ones against the target (each, and the median)."""
    firsts = [w["first_trial_s"] for w in warms if w["first_trial_s"] is not None]
    ratios = [w["wall_s"] / cold["wall_s"] for w in warms]
    return [
        f"{label}: warm first trial after submit {', '.join(f'{x:.2f}' for x in firsts)} s "
        f"(median {statistics.median(firsts):.2f}, target <= 1.0); warm/cold wall "
        f"{', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}, "
        "target <= 0.3)",
        "",
        "| run | `submit` process | first trial run start, after submit | wall (submit to "
        "last end) | trial time summed | lanes | state | driver timeline, s after submit |",
        "|---|---|---|---|---|---|---|---|",
        _row("cold", cold),
        *(_row("warm", w) for w in warms),
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--warm", type=int, default=3, help="warm sweeps after the cold one")
    ap.add_argument("--tuned", action="store_true", help="also the tuned (1 lane) row")
    ap.add_argument("--out")
    args = ap.parse_args()
    *head, up_s = _series("qs", args.trials, args.warm, [])
    tuned = _series("tuned", args.trials, args.warm, TUNED)[:2] if args.tuned else None
    lines = [
        f"### service ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, `sweeps submit "
        f"conf/quickstart.yaml --trials {args.trials}`, {args.warm} warm sweeps)",
        "",
        *_table("Headline (the quickstart as shipped)", *head),
    ]
    if tuned:
        lines += _table(f"Tuned (not the default: {' '.join(TUNED)})", *tuned)
    lines.append(f"`sweeps up` took {up_s:.1f} s.")
    from bench.results import publish

    publish("\n".join(lines), args.out, "service")


if __name__ == "__main__":
    main()
