"""Side-by-side: the same digits MLP sweep run four ways in one invocation.

    .venv/bin/python bench/compare_peers.py [--out bench/RESULTS.md]

Ways (same search space, TPE seed, 5 epochs, batch 64, parallel 2 where it applies):
  plain    in-process Optuna loop, no distribution (6 and 24 trials)
  raytune  Ray Tune + OptunaSearch, a Ray Train TorchTrainer per trial (6 trials; the Tune trial
           driver gets a 0.01 CPU share or two concurrent trials starve their own workers)
  isolated sweeps, one Ray Train run per trial (6 trials)
  lanes    sweeps, warm Ray Train worker groups (6 and 24 trials)
Ray is started once, as `sweeps run` starts it (`ensure_ray`: Ray Train's health check every
0.2 s, its preemption watcher and metrics off), and every way runs on it, Ray Tune's included.
Plain and lanes: marginal = seconds per extra trial in steady state, from one run's per-trial
timeline (issue 18: the difference of two sweeps' walls drowned in noise). For plain, the median
gap between consecutive trial starts; for lanes, the median gap between consecutive trial starts
on one lane (each lane's first trial left out) divided by the lanes running at once. Overhead =
gap minus the trial's own training time. Fixed = wall minus the trials' span (first assigned to
last ended).
Prints a table and the ratios; with --out, writes them into the results file (section replaced).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EPOCHS, BATCH, SEED = 5, 64, 42
SPACE = {"lr": (1e-3, 3e-2), "hidden": (32, 256)}


def _digits():
    from trainer.data import load_dataset

    return load_dataset("digits", val_fraction=0.2, seed=0)


def bare_train(lr: float, hidden: int, seed: int) -> tuple[float, float]:
    """A plain PyTorch loop on the same model and data: (val accuracy, train seconds)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    from trainer.models import build_model

    ds = _digits()
    torch.manual_seed(seed)
    model = build_model("mlp", ds.input_shape, 10, hidden=hidden, layers=2)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    t0 = time.perf_counter()
    acc = 0.0
    for epoch in range(EPOCHS):
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        perm = torch.randperm(len(ds.x_train), generator=g)
        model.train()
        for i in range(0, len(perm), BATCH):
            b = perm[i : i + BATCH]
            loss = F.cross_entropy(model(ds.x_train[b]), ds.y_train[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(ds.x_val).argmax(1) == ds.y_val).float().mean().item()
    return acc, time.perf_counter() - t0


def run_plain(n: int) -> dict:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    starts: list[float] = []
    trains: list[float] = []

    def objective(trial: optuna.Trial) -> float:
        starts.append(time.perf_counter())
        lr = trial.suggest_float("lr", *SPACE["lr"], log=True)
        hidden = trial.suggest_int("hidden", *SPACE["hidden"])
        acc, secs = bare_train(lr, hidden, trial.number)
        trains.append(secs)
        return acc

    t0 = time.perf_counter()
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=SEED))
    study.optimize(objective, n_trials=n)
    wall = time.perf_counter() - t0
    gaps = [b - a for a, b in zip(starts[1:], starts[2:], strict=False)]
    pairs = list(zip(gaps, trains[1:], strict=False))
    return {
        "wall": wall,
        "train": sum(trains),
        "best": study.best_value,
        "fixed": wall - (starts[-1] + trains[-1] - starts[0]),
        **_marginal(pairs, 1),
    }


def _marginal(pairs: list[tuple[float, float]], lanes: int) -> dict:
    """Median steady-state gap and overhead per trial; marginal = gap / trials running at once."""
    import statistics

    if not pairs:
        return {"marginal": float("nan"), "overhead": float("nan"), "gap": float("nan")}
    gap = statistics.median(g for g, _ in pairs)
    return {
        "gap": gap,
        "marginal": gap / lanes,
        "overhead": statistics.median(g - t for g, t in pairs),
    }


def run_raytune(n: int, storage: str) -> dict:
    import ray
    from ray import tune
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback
    from ray.tune.search.optuna import OptunaSearch

    def per_worker(config: dict) -> None:
        acc, secs = bare_train(config["lr"], int(config["hidden"]), int(config["seed"]))
        ray.train.report({"val_accuracy": acc, "train_seconds": secs})

    def trial_driver(config: dict) -> None:
        TorchTrainer(
            per_worker,
            train_loop_config={**config, "seed": abs(hash(str(config))) % 1000},
            scaling_config=ScalingConfig(num_workers=1),
            run_config=RunConfig(
                name=f"tune-{uuid.uuid4().hex[:8]}",
                storage_path=storage,
                callbacks=[TuneReportCallback()],
            ),
        ).fit()

    search = OptunaSearch(metric="val_accuracy", mode="max", seed=SEED)
    tuner = tune.Tuner(
        tune.with_resources(trial_driver, {"cpu": 0.01}),
        param_space={
            "lr": tune.loguniform(*SPACE["lr"]),
            "hidden": tune.randint(SPACE["hidden"][0], SPACE["hidden"][1] + 1),
        },
        tune_config=tune.TuneConfig(
            search_alg=search,
            num_samples=n,
            max_concurrent_trials=2,
            metric="val_accuracy",
            mode="max",
        ),
        run_config=tune.RunConfig(
            storage_path=storage, name=f"peer-{uuid.uuid4().hex[:6]}", verbose=0
        ),
    )
    t0 = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    df = grid.get_dataframe()
    return {
        "wall": wall,
        "train": float(df["train_seconds"].sum()),
        "best": float(df["val_accuracy"].max()),
    }


def run_sweeps(n: int, mode: str) -> dict:
    from sweeps import api
    from sweeps.spec import spec_from_dict

    name = f"bench-{mode}-{n}-{uuid.uuid4().hex[:4]}"
    spec = spec_from_dict(
        {
            "name": name,
            "search_space": {
                "lr": {"type": "float", "low": SPACE["lr"][0], "high": SPACE["lr"][1], "log": True},
                "hidden": {"type": "int", "low": SPACE["hidden"][0], "high": SPACE["hidden"][1]},
            },
            "sampler": {"name": "tpe", "seed": SEED},
            "pruner": {"name": "none"},
            "budget": {"trials": n, "parallel": 2},
            "execution": {"mode": mode},
            "trainer": {
                "model": "mlp",
                "dataset": "digits",
                "epochs": EPOCHS,
                "batch_size": BATCH,
                "params": {"optimizer": "adamw", "layers": 2},
            },
            "tracking": {"log_models": True},
        }
    )
    t0 = time.perf_counter()
    out = api.run(spec, install_signals=False)
    wall = time.perf_counter() - t0
    doc = api.show(name)
    import optuna

    from sweeps.common.timeline import breakdown, steady_state

    study = optuna.load_study(study_name=name, storage=out.storage_url)
    train = sum(t.user_attrs.get("train_seconds", 0.0) for t in study.trials)
    span = {label: took for label, _, took in breakdown(out.timeline)}
    trials_span = span["trials (first assigned to last ended)"]
    return {
        "wall": wall,
        "train": train,
        "best": doc["best"]["value"],
        "fixed": wall - trials_span,
        **_marginal(steady_state(out.timeline), 2),
    }


def cold_fit(storage: str) -> float:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    def noop(config: dict) -> None:
        import torch  # noqa: F401

    t0 = time.perf_counter()
    TorchTrainer(
        noop,
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(name=f"cold-{uuid.uuid4().hex[:6]}", storage_path=storage),
    ).fit()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-raytune", action="store_true")
    args = ap.parse_args()
    home = tempfile.mkdtemp(prefix="sweeps-bench-")
    os.environ["SWEEPS_HOME"] = home
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
    import ray

    from sweeps.execution.cluster import ensure_ray

    t0 = time.perf_counter()
    ensure_ray()  # Ray as `sweeps run` starts it, for every way (Ray Tune's runs included)
    init_s = time.perf_counter() - t0
    storage = os.path.join(home, "ray")
    rows = {}
    bare_train(0.01, 64, 0)  # warm up torch and the data once, so both plain runs start warm
    rows["plain-6"] = run_plain(6)
    rows["plain-24"] = run_plain(24)
    cold = cold_fit(storage)
    rows["lanes-6"] = run_sweeps(6, "lanes")
    rows["lanes-24"] = run_sweeps(24, "lanes")
    rows["isolated-6"] = run_sweeps(6, "isolated")
    if not args.skip_raytune:
        rows["raytune-6"] = run_raytune(6, storage)
    ray.shutdown()

    lines = [
        f"### compare_peers ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, no GPU; ray.init {init_s:.1f} s, one cold Ray Train fit "
        f"{cold:.1f} s)",
        "",
        "| way | trials | wall s | in-worker train s | fixed s | marginal s/trial "
        "| overhead s/trial | best acc |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, r in rows.items():
        way, n = key.rsplit("-", 1)
        if way in ("raytune", "isolated"):  # one Ray Train run per trial: wall / trials
            f, marg, over = "-", f"{r['wall'] / int(n):.2f}", "-"
        else:
            f, marg, over = f"{r['fixed']:.1f}", f"{r['marginal']:.3f}", f"{r['overhead']:.3f}"
        lines.append(
            f"| {way} | {n} | {r['wall']:.1f} | {r['train']:.1f} | {f} | {marg} | {over} "
            f"| {r['best']:.4f} |"
        )
    lm, pm = rows["lanes-24"]["marginal"], rows["plain-24"]["marginal"]
    lf = rows["lanes-6"]["fixed"]
    lines.append("")
    if "raytune-6" in rows:
        lines.append(
            f"- lanes / Ray Tune wall at 6 trials: "
            f"**{rows['lanes-6']['wall'] / rows['raytune-6']['wall']:.2f}** (target <= 0.2)"
        )
    lines.append(
        f"- lanes / isolated wall at 6 trials: "
        f"{rows['lanes-6']['wall'] / rows['isolated-6']['wall']:.2f}"
    )
    lines.append(
        f"- lanes marginal / plain marginal at 24 trials: **{lm / pm:.2f}** (target <= 1.2); "
        f"sweeps' own overhead per trial on a lane: {rows['lanes-24']['overhead'] * 1000:.0f} ms"
    )
    lines.append(f"- lanes fixed start-up / one cold fit: **{lf / cold:.2f}**")
    lines.append(
        f"- lanes / plain wall at 6 trials: {rows['lanes-6']['wall'] / rows['plain-6']['wall']:.2f}"
    )
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "compare_peers")


if __name__ == "__main__":
    main()
