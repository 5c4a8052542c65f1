"""PBT rows of bench/search_efficiency.py: sweeps' `search: pbt` against Ray Tune's
`PopulationBasedTraining` on the same task (digits MLP, hidden 64, AdamW, lr searched
log-uniform), the same population, interval, quantile, resample probability and perturbation
factors, the same parallelism (2 trials at once, one CPU each) and epoch budget (population x
MAX_EPOCHS). Both stop once a member reaches the target, as Ray's PBT examples do.

Counted from each system's reports: epochs trained (all members together) until the first epoch
at or above TARGET, and the wall time from the call that starts the search to that epoch (lanes
and Tune's trial actors start inside it). Ray is started once, before both.

The Ray Tune side is written the way Ray's `pbt_convnet_function_example.py` is (a function
trainable, `tune.get_checkpoint` / `tune.report(..., checkpoint=...)`, the optimizer made from the
config each time); it uses this repository's digits split and MLP (trainer/), nothing of sweeps.

    nice -n 19 .venv/bin/python bench/search_efficiency.py --pbt [--out bench/RESULTS.md]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET, MAX_EPOCHS, POPULATION, INTERVAL, PARALLEL = 0.97, 10, 8, 2, 2
LR = (1e-4, 0.3)


def train_digits(config: dict[str, Any]) -> None:
    """Ray Tune's function trainable: one epoch per report, a checkpoint with each."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from ray import tune
    from ray.tune import Checkpoint

    from trainer.data import load_dataset
    from trainer.models import build_model

    torch.set_num_threads(1)
    ds = load_dataset("digits", seed=0)
    model = build_model("mlp", ds.input_shape, 10, hidden=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    step = 0
    if tune.get_checkpoint():
        with tune.get_checkpoint().as_directory() as d:
            state = torch.load(os.path.join(d, "checkpoint.pt"))
            model.load_state_dict(state["model"])
            step = state["step"]
    while True:
        model.train()
        perm = torch.randperm(len(ds.x_train))
        for i in range(0, len(perm), 64):
            b = perm[i : i + 64]
            loss = F.cross_entropy(model(ds.x_train[b]), ds.y_train[b])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            acc = (model(ds.x_val).argmax(1) == ds.y_val).float().mean().item()
        step += 1
        with tempfile.TemporaryDirectory() as d:
            torch.save(
                {"step": step, "model": model.state_dict()}, os.path.join(d, "checkpoint.pt")
            )
            tune.report(
                {"val_accuracy": acc, "wall": time.time()}, checkpoint=Checkpoint.from_directory(d)
            )


def ray_tune_pbt(seed: int, storage: str, limit: bool) -> list[tuple[float, float]]:
    """(wall time, val accuracy) of every epoch Ray Tune's PBT trained. `limit`: at most
    PARALLEL trials exist at once (`max_concurrent_trials`); else all POPULATION do and the
    CPUs bound how many run (PBT then pauses a trial at its interval for a waiting one)."""
    import random

    import numpy as np
    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    random.seed(seed)
    np.random.seed(seed)

    class Stopper(tune.Stopper):  # as in Ray's example: all stop at the target
        def __init__(self) -> None:
            self.hit = False

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            self.hit = self.hit or result["val_accuracy"] >= TARGET
            return self.hit or result["training_iteration"] >= MAX_EPOCHS

        def stop_all(self) -> bool:
            return self.hit

    scheduler = PopulationBasedTraining(
        time_attr="training_iteration",
        perturbation_interval=INTERVAL,
        quantile_fraction=0.25,
        resample_probability=0.25,
        perturbation_factors=(1.2, 0.8),
        hyperparam_mutations={"lr": tune.loguniform(*LR)},
    )
    tuner = tune.Tuner(
        tune.with_resources(train_digits, {"cpu": 1}),
        param_space={"lr": tune.loguniform(*LR)},
        tune_config=tune.TuneConfig(
            metric="val_accuracy",
            mode="max",
            scheduler=scheduler,
            num_samples=POPULATION,
            max_concurrent_trials=PARALLEL if limit else None,
        ),
        run_config=tune.RunConfig(
            name=f"pbt{seed}{limit}",
            storage_path=storage,
            stop=Stopper(),
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=4),
        ),
    )
    grid = tuner.fit()
    rows: list[tuple[float, float]] = []
    for result in grid:
        df = result.metrics_dataframe
        if df is not None and "wall" in df:
            rows += list(zip(df["wall"], df["val_accuracy"], strict=True))
    return rows


def sweeps_pbt(seed: int) -> list[tuple[float, float]]:
    """(wall time, val accuracy) of every epoch sweeps' PBT trained (its MLflow histories)."""
    from mlflow.tracking import MlflowClient

    from sweeps import api
    from sweeps.spec import spec_from_dict

    spec = spec_from_dict(
        {
            "name": f"pbt{seed}",
            "search_space": {"lr": {"type": "float", "low": LR[0], "high": LR[1], "log": True}},
            "sampler": {"name": "random", "seed": seed},
            "search": {
                "name": "pbt",
                "population": POPULATION,
                "interval_epochs": INTERVAL,
                "quantile": 0.25,
                "perturb": {"lr": [1.2, 0.8]},
                "resample_probability": 0.25,
            },
            "budget": {"parallel": PARALLEL, "target": TARGET},
            "trainer": {"epochs": MAX_EPOCHS, "params": {"hidden": 64}},
            "tracking": {"log_models": False},
        }
    )
    out = api.run(spec, install_signals=False)
    client = MlflowClient(out.tracking_uri)
    runs = client.search_runs([out.experiment_id], max_results=1000)
    rows = []
    for run in runs:
        for m in client.get_metric_history(run.info.run_id, "val_accuracy"):
            rows.append((m.timestamp / 1000, m.value))
    return rows


def to_target(rows: list[tuple[float, float]], t0: float) -> tuple[int | None, float | None]:
    """Epochs (all members) and seconds until the first epoch at or above TARGET."""
    rows = sorted(rows)
    for i, (wall, acc) in enumerate(rows):
        if acc >= TARGET:
            return i + 1, wall - t0
    return None, None


SYSTEMS = (
    # Ray's documented PBT: every trial is a member, time-multiplexed when the population
    # exceeds the cluster ("If the number of trials exceeds the cluster capacity, they will be
    # time-multiplexed as to balance training progress across the population").
    ("Ray Tune PBT, population 8 on 2 CPUs", "all"),
    # With max_concurrent_trials=2 only 2 trials exist at a time: 4 populations of 2, in turn.
    ("Ray Tune PBT, max_concurrent_trials=2", "limit"),
)


NOTES = (
    "- The goal is judged against the first Ray row: Ray's PBT counts every trial of the run "
    "as a member and time-multiplexes them when they exceed the cluster, as sweeps does. With "
    "`max_concurrent_trials=2` only two trials exist at once: four populations of two in turn, "
    "each trained deep, so two lucky draws reach the target in a few epochs and an unlucky pair "
    "never does.",
    "- sweeps' seconds include its lanes' cold start (about 13 s of them).",
)


def main(out: str | None, seeds: int = 1) -> None:
    import math
    import statistics

    import ray

    home = tempfile.mkdtemp(prefix="pbt-bench-")
    os.environ["SWEEPS_HOME"] = home
    ray.init(num_cpus=PARALLEL, include_dashboard=False, log_to_driver=False)
    lines: list[str] = []
    got: dict[str, list[tuple[float, float]]] = {}
    for seed in range(seeds):
        runs = [("**sweeps** `search: pbt` (as shipped)", lambda s=seed: sweeps_pbt(s))]
        runs += [(n, lambda s=seed, k=k: ray_tune_pbt(s, home, k == "limit")) for n, k in SYSTEMS]
        for name, fn in runs:
            t0 = time.time()
            rows = fn()
            total = time.time() - t0
            epochs, wall = to_target(rows, t0)
            got.setdefault(name, []).append(
                (math.inf if epochs is None else epochs, math.inf if wall is None else wall)
            )
            wall_s = "not reached" if wall is None else f"{wall:.1f}"
            lines.append(f"| {name} | {seed} | {epochs} | {wall_s} | {len(rows)} | {total:.1f} |")
            print(lines[-1], flush=True)
    med = {
        n: (statistics.median(e for e, _ in v), statistics.median(w for _, w in v))
        for n, v in got.items()
    }
    head = next(iter(med))
    summary = [
        f"- median over {seeds} seeds: "
        + "; ".join(f"{n}: {e:g} epochs, {w:.1f} s" for n, (e, w) in med.items())
    ]
    for name, _ in SYSTEMS:
        summary.append(
            f"- sweeps / {name}: wall {med[head][1] / med[name][1]:.2f} (goal <= 0.5), "
            f"epochs {med[head][0] / med[name][0]:.2f} (goal <= 1); a run that never reaches "
            "the target counts as infinite"
        )
    text = "\n".join(
        [
            f"### pbt_efficiency ({time.strftime('%Y-%m-%d')}, digits MLP, population "
            f"{POPULATION}, interval {INTERVAL} epochs, up to {MAX_EPOCHS} epochs/member, "
            f"{PARALLEL} at once, target val acc {TARGET}, seeds 0..{seeds - 1})",
            "",
            "| search | seed | epochs to target | s to target | epochs trained | s in all |",
            "|---|---|---|---|---|---|",
            *lines,
            "",
            *summary,
            *NOTES,
        ]
    )
    from bench.results import publish

    publish(text, out, "pbt_efficiency")
