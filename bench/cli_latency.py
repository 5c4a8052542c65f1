"""CLI latency: `sweeps --help`, `ls`, `validate`, and `show` on a 1,000-trial study.

.venv/bin/python bench/cli_latency.py [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(args: list[str], env: dict, n: int = 5) -> float:
    runs = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "sweeps.cli", *args], env=env, capture_output=True, text=True
        )
        runs.append(time.perf_counter() - t0)
        assert r.returncode == 0, r.stderr
    return statistics.median(runs)


def make_study(storage: str, n: int) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="big", storage=storage, direction="maximize")
    study.set_user_attr("sweeps.objective", "val_accuracy")
    dist = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)}
    trials = [
        optuna.trial.create_trial(
            params={"lr": 10 ** (-1 - 3 * i / n)},
            distributions=dist,
            value=i / n,
            user_attrs={"mlflow_run_id": f"{i:032x}", "duration_s": 1.0},
        )
        for i in range(n)
    ]
    study.add_trials(trials)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="sweeps-cli-")
    env = {**os.environ, "SWEEPS_HOME": home}
    storage = f"sqlite:///{home}/optuna.db"
    make_study(storage, 1000)
    heavy = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sweeps.cli; "
            "print(','.join(m for m in ('torch', 'ray', 'mlflow') if m in sys.modules) or 'none')",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    rows = [
        ("sweeps --help", timed(["--help"], env), 0.5),
        (
            "sweeps validate conf/quickstart.yaml",
            timed(["validate", str(ROOT / "conf/quickstart.yaml")], env),
            None,
        ),
        ("sweeps ls (1 study, 1,000 trials)", timed(["ls"], env, 3), None),
        ("sweeps show big (1,000 trials)", timed(["show", "big", "--json"], env, 3), 2.0),
    ]
    lines = [
        f"### cli_latency ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs)",
        "",
        f"Heavy modules imported by `import sweeps.cli`: {heavy}",
        "",
        "| command | median s | target s |",
        "|---|---|---|",
    ]
    for name, secs, target in rows:
        lines.append(f"| `{name}` | {secs:.2f} | {target if target else '-'} |")
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "cli_latency")


if __name__ == "__main__":
    main()
