"""`sweeps ls` and `sweeps show` on a 10,000-trial study, as whole CLI processes.

    .venv/bin/python bench/read_commands.py [--db PATH] [--trials 10000] [--rounds 5]
        [--baseline DIR] [--stores sqlite,postgres]

The study is written once through Optuna's own `add_trials` (`--db` keeps it between runs:
a few minutes to write): 4 params and a tiny trial's 8 user attrs per trial, all COMPLETE. Each
round times `sweeps ls` and `sweeps show scale` from process start to exit, stdout piped. With
`--baseline DIR` (another checkout of sweeps, for example a `git worktree` of an older commit)
the same commands run from DIR's package too, alternated with this one in each round, so the
two are measured side by side under the same load. `--stores postgres` writes the study to a
throwaway PostgreSQL on loopback (tests/services.py, Debian's binaries) and reads it there.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"ls": 1.0, "show": 2.0}


def write_study(url: str, trials: int) -> None:
    import optuna
    from optuna.distributions import FloatDistribution, IntDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="scale", storage=url, direction="maximize")
    dists = {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "wd": FloatDistribution(0.0, 0.1),
        "batch": IntDistribution(16, 128),
        "hidden": IntDistribution(16, 256),
    }
    rng, now, made = random.Random(0), datetime.datetime.now(), []
    for i in range(trials):
        params = {k: rng.uniform(d.low, d.high) for k, d in dists.items()}
        params = {k: int(v) if k in ("batch", "hidden") else v for k, v in params.items()}
        attrs = {
            "mlflow_run_id": f"{i:032x}",
            "sweeps.lane": "lane-0",
            "sweeps.driver": "driver-0",
            "sweeps.seed": i,
            "gpu_hours": 0.0,
            "train_seconds": 0.05,
            "cost_usd": 0.0,
            "duration_s": 0.06,
        }
        t = optuna.trial.create_trial(
            params=params, distributions=dists, value=rng.random(), user_attrs=attrs
        )
        t.datetime_start = t.datetime_complete = now
        made.append(t)
    study.add_trials(made)


def timed(tree: Path, url: str, cwd: Path, *args: str) -> float:
    """One command's wall, run from `tree`'s package. The working dir is the study's folder:
    `python -m` puts the working dir first on sys.path, before PYTHONPATH, so a run from a
    checkout's root would import that checkout's package whatever PYTHONPATH says."""
    env = {**os.environ, "SWEEPS_STORAGE": url, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "sweeps.cli", *args]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True, cwd=cwd)
    return time.perf_counter() - t0


def rounds(store: str, url: str, cwd: Path, trees: dict[str, Path], n: int) -> None:
    """`n` rounds of `ls` and `show` from each tree, alternated; one table row per pair."""
    got: dict[tuple[str, str], list[float]] = {}
    for _ in range(n):
        for label, tree in trees.items():
            for cmd in (("ls",), ("show", "scale")):
                got.setdefault((label, cmd[0]), []).append(timed(tree, url, cwd, *cmd))
    for (label, cmd), times in got.items():
        each = ", ".join(f"{x:.2f}" for x in times)
        med = statistics.median(times)
        print(
            f"| {store} | {label} | `sweeps {cmd}` | {each} | **{med:.2f}** "
            f"| <= {TARGETS[cmd]:g} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", type=Path)
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--stores", default="sqlite")
    args = ap.parse_args()
    trees = {"this checkout": ROOT}
    if args.baseline:
        trees[f"baseline: {args.baseline.name}"] = args.baseline.resolve()  # second, labelled
    print("| store | tree | command | each run, s | median | target |\n|---|---|---|---|---|---|")
    for store in args.stores.split(","):
        if store == "postgres":
            sys.path.insert(0, str(ROOT / "tests"))
            from services import postgres_server

            with postgres_server() as pg:
                url = pg.create_database("read10k")
                write_study(url, args.trials)
                rounds(store, url, Path(tempfile.gettempdir()), trees, args.rounds)
            continue
        db = args.db or Path(f"/tmp/sweeps-read-{args.trials}.db")
        if not db.exists():
            write_study(f"sqlite:///{db}", args.trials)
        rounds(store, f"sqlite:///{db}", db.parent, trees, args.rounds)
    load = os.getloadavg()[0]
    print(f"\n{args.trials} trials, {args.rounds} rounds, load average {load:.1f} at the end")


if __name__ == "__main__":
    main()
