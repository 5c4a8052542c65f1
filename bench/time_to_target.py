"""Time to a good model, side by side: wall time and epochs until some trial first reaches a
target validation accuracy, for four ways of searching the same space on the same task, with
the same parallelism (2 trials at once) and the same budget (MAX_TRIALS x MAX_EPOCHS).

    .venv/bin/python bench/time_to_target.py [--seeds 5] [--out bench/RESULTS.md]
    .venv/bin/python bench/time_to_target.py --seeds 1 --quick     # smoke run

Ways (all maximize val_accuracy, sampler seed = the run's seed):
  sweeps      `sweeps.api.run` on a spec as a user writes it: TPE, successive-halving pruner, both
              with their shipped default options, budget.target, no tuned environment
  ray_tune    Ray Tune as its docs write it: a function trainable calling `tune.report` each
              epoch, `OptunaSearch` + `ASHAScheduler(max_t, grace_period=1, reduction_factor=3)`
  optuna      Optuna alone: `study.optimize(n_jobs=2)`, TPE + HyperbandPruner(1, max, 3) (its docs)
  random      Optuna's RandomSampler in the same plain loop, no pruner
Tasks: `digits` (sklearn's digits, trainer.data) and `tabular` (sklearn make_classification,
4 classes, 20 features; a task the tests do not use), both an MLP trained by the same function
in every way (a function objective for sweeps too, shipped with trainer.code_dir), so epochs
are the same work everywhere. Every epoch appends (time, accuracy) to the run's log file; the
first line at or above the target is the hit: wall = hit time - the way's start (Ray is
started once, before every way), epochs = log lines up to the hit, over all trials. After the
hit every trial ends at its next epoch (not measured). A run that never hits reports its whole
budget, marked `>`. Runs alternate ways within each seed, so a busy spell hits all of them.

Targets: per task, the 75th percentile over 40 random configurations of their best accuracy
within MAX_EPOCHS, rounded (measured 0.958 and 0.715, so digits 0.96, tabular 0.72;
`--calibrate` reprints them): about 1 random configuration in 4 reaches it, so every way
usually gets there within the budget, and random search needs a few trials rather than one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MAX_EPOCHS, MAX_TRIALS, QUICK_TRIALS, PARALLEL = 10, 30, 12, 2
TARGETS = {"digits": 0.96, "tabular": 0.72}
WAYS = ("sweeps", "ray_tune", "optuna", "random")
# One flat space (Ray Tune's OptunaSearch and a plain loop take it as is).
SPACE: dict[str, dict[str, Any]] = {
    "lr": {"type": "float", "low": 1e-4, "high": 0.3, "log": True},
    "hidden": {"type": "int", "low": 8, "high": 256, "log": True},
    "layers": {"type": "int", "low": 1, "high": 3},
    "dropout": {"type": "float", "low": 0.0, "high": 0.6},
    "batch_size": {"type": "categorical", "choices": [16, 64, 256]},
}


def task_data(task: str) -> tuple[Any, Any, Any, Any, tuple[int, ...], int]:
    """(x_train, y_train, x_val, y_val, input shape, classes), the same in every process. Not
    cached: Ray Tune ships the trainable by value from __main__, and a cache would go with it."""
    import torch

    from trainer.data import load_dataset, split_indices

    if task == "digits":
        ds = load_dataset("digits", seed=0)
        return ds.x_train, ds.y_train, ds.x_val, ds.y_val, ds.input_shape, 10
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=3000, n_features=20, n_informative=8, n_redundant=4, n_classes=4,
        class_sep=0.8, flip_y=0.02, random_state=0,
    )  # fmt: skip
    tr, va, _ = split_indices(len(x), seed=0, val_fraction=0.2)
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y)
    return xt[tr], yt[tr], xt[va], yt[va], (x.shape[1],), 4


def train(job: dict[str, Any], params: dict[str, Any], report: Any) -> float:
    """One trial, the same in every way: an MLP trained up to MAX_EPOCHS, `report(acc, epoch)`
    after each epoch (it may raise to prune). Ends at the target, or once any trial hit it."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    from trainer.loop import make_optimizer
    from trainer.models import build_model

    torch.set_num_threads(1)  # tiny model: one thread per trial, two trials on two CPUs
    xt, yt, xv, yv, shape, classes = task_data(job["task"])
    key = json.dumps({k: params[k] for k in SPACE}, sort_keys=True)
    seed = job["seed"] * 100_003 + zlib.crc32(key.encode())
    with job.get("seeding") or contextlib.nullcontext():  # see run_optuna
        torch.manual_seed(seed)
        model = build_model(
            "mlp", shape, classes, hidden=int(params["hidden"]), layers=int(params["layers"]),
            dropout=float(params["dropout"]),
        )  # fmt: skip
    order = torch.Generator().manual_seed(seed)
    opt = make_optimizer(model, {"optimizer": "adamw", "lr": float(params["lr"])})
    batch, acc = int(params["batch_size"]), 0.0
    for epoch in range(1, MAX_EPOCHS + 1):
        if os.path.exists(job["log"] + ".hit"):
            break
        model.train()
        perm = torch.randperm(len(xt), generator=order)
        for i in range(0, len(perm), batch):
            b = perm[i : i + batch]
            loss = F.cross_entropy(model(xt[b]), yt[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(xv).argmax(1) == yv).float().mean().item()
        acc = 0.0 if acc != acc else acc  # a diverged run is simply a bad one
        hit = acc >= job["target"]
        with open(job["log"], "a") as fh:  # one short line per append: lines never interleave
            fh.write(json.dumps({"t": time.time(), "acc": acc}) + "\n")
        if hit:
            Path(job["log"] + ".hit").touch()
        report(acc, epoch)
        if hit:
            break
    return acc


def sweeps_entry(config: dict[str, Any]) -> dict[str, float]:
    """The function objective sweeps runs (trainer.entrypoint "time_to_target:sweeps_entry")."""
    import sweeps

    acc = train(config, config, lambda a, _: sweeps.report({"val_accuracy": a}))
    return {"val_accuracy": acc}


def run_sweeps(job: dict[str, Any]) -> None:
    from sweeps import api
    from sweeps.spec import spec_from_dict

    name = f"ttt-{job['task']}-{job['seed']}-{uuid.uuid4().hex[:6]}"
    spec = spec_from_dict(
        {
            "name": name,
            "objective": {"metric": "val_accuracy", "direction": "maximize"},
            "search_space": SPACE,
            "sampler": {"name": "tpe", "seed": job["seed"]},
            "pruner": {"name": "successive_halving"},
            "budget": {"trials": job["trials"], "parallel": PARALLEL, "target": job["target"]},
            "trainer": {
                "entrypoint": "time_to_target:sweeps_entry",
                "code_dir": str(ROOT / "bench"),
                "epochs": MAX_EPOCHS,
                "params": {k: job[k] for k in ("task", "seed", "log", "target")},
            },
        }
    )
    api.run(spec, install_signals=False)


def run_ray_tune(job: dict[str, Any]) -> None:
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    def trainable(config: dict[str, Any], job: dict[str, Any]) -> None:
        train(job, config, lambda a, _: tune.report({"val_accuracy": a}))

    class HitStopper(tune.Stopper):
        """Ends the whole experiment once a trial reaches the target (Ray's Stopper API)."""

        def __init__(self) -> None:
            self.hit = False

        def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
            self.hit = self.hit or result.get("val_accuracy", 0.0) >= job["target"]
            return self.hit

        def stop_all(self) -> bool:
            return self.hit

    domains = {
        "float": lambda s: (tune.loguniform if s.get("log") else tune.uniform)(s["low"], s["high"]),
        "int": lambda s: (tune.lograndint if s.get("log") else tune.randint)(
            s["low"], s["high"] + 1
        ),
        "categorical": lambda s: tune.choice(s["choices"]),
    }
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(trainable, job=job), {"cpu": 1}),
        param_space={k: domains[s["type"]](s) for k, s in SPACE.items()},
        tune_config=tune.TuneConfig(
            metric="val_accuracy",
            mode="max",
            search_alg=OptunaSearch(seed=job["seed"]),
            scheduler=ASHAScheduler(max_t=MAX_EPOCHS, grace_period=1, reduction_factor=3),
            num_samples=job["trials"],
            max_concurrent_trials=PARALLEL,
        ),
        run_config=tune.RunConfig(
            name=f"ttt-{uuid.uuid4().hex[:6]}",
            storage_path=os.path.join(os.environ["SWEEPS_HOME"], "ray_results"),
            stop=HitStopper(),
            verbose=0,
        ),
    )
    tuner.fit()


def run_optuna(job: dict[str, Any], random: bool = False) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if random:
        sampler, pruner = (
            optuna.samplers.RandomSampler(seed=job["seed"]),
            optuna.pruners.NopPruner(),
        )
    else:
        sampler = optuna.samplers.TPESampler(seed=job["seed"])
        pruner = optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=MAX_EPOCHS, reduction_factor=3
        )
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=pruner)
    # n_jobs trials are threads of one process: they share torch's RNG while seeding the model.
    job = {**job, "seeding": threading.Lock()}

    def objective(trial: optuna.Trial) -> float:
        params = {k: suggest(trial, k, s) for k, s in SPACE.items()}

        def report(acc: float, epoch: int) -> None:
            trial.report(acc, epoch)
            if acc >= job["target"]:
                study.stop()
            elif trial.should_prune():
                raise optuna.TrialPruned()

        return train(job, params, report)

    study.optimize(objective, n_trials=job["trials"], n_jobs=PARALLEL)


def suggest(trial: Any, name: str, s: dict[str, Any]) -> Any:
    if s["type"] == "float":
        return trial.suggest_float(name, s["low"], s["high"], log=s.get("log", False))
    if s["type"] == "int":
        return trial.suggest_int(name, s["low"], s["high"], log=s.get("log", False))
    return trial.suggest_categorical(name, s["choices"])


RUNNERS = {
    "sweeps": run_sweeps,
    "ray_tune": run_ray_tune,
    "optuna": run_optuna,
    "random": lambda job: run_optuna(job, random=True),
}


def measure(way: str, task: str, seed: int, trials: int) -> dict[str, Any]:
    """One run of one way: wall and epochs to the first hit (or the whole budget, censored)."""
    log = os.path.join(tempfile.mkdtemp(prefix="ttt-"), "epochs.jsonl")
    job = {"task": task, "seed": seed, "log": log, "target": TARGETS[task], "trials": trials}
    t0 = time.time()
    RUNNERS[way](job)
    end = time.time()
    lines = (
        [json.loads(x) for x in Path(log).read_text().splitlines()] if Path(log).exists() else []
    )
    lines.sort(key=lambda r: r["t"])
    hits = [i for i, r in enumerate(lines) if r["acc"] >= job["target"]]
    if not hits:
        return {"wall": end - t0, "epochs": len(lines), "hit": False}
    return {"wall": lines[hits[0]]["t"] - t0, "epochs": hits[0] + 1, "hit": True}


def calibrate(n: int = 40) -> None:
    """Best accuracy within MAX_EPOCHS of n random configurations per task, and its quartiles."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for task in TARGETS:
        best: list[float] = []
        sampler = optuna.samplers.RandomSampler(seed=123)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for _ in range(n):
            trial = study.ask()
            params = {k: suggest(trial, k, s) for k, s in SPACE.items()}
            accs: list[float] = []
            keep = accs.append
            log = os.path.join(tempfile.mkdtemp(prefix="ttt-cal-"), "epochs.jsonl")
            job = {"task": task, "seed": 0, "log": log, "target": 2.0}
            train(job, params, lambda a, _, keep=keep: keep(a))
            best.append(max(accs))
            study.tell(trial, best[-1])
        q = statistics.quantiles(best, n=4)
        print(f"{task}: best-in-{MAX_EPOCHS}-epochs quartiles {[round(v, 4) for v in q]}")


def summarize(done: dict[tuple[str, str, int], dict], seeds: int, budget: str) -> str:
    med = statistics.median
    lines = [
        f"### time_to_target ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs; {PARALLEL} "
        f"trials at once, {budget}; median over seeds 0..{seeds - 1}, ways alternated per seed)",
        "",
        "| task (target) | way | wall s per seed | median wall s | epochs per seed "
        "| median epochs |",
        "|---|---|---|---|---|---|",
    ]
    ratios = []
    for task, target in TARGETS.items():
        got = {w: [done[(w, t, s)] for s in range(seeds)] for w, t, _ in done if t == task}
        for way, runs in got.items():
            walls = [("" if r["hit"] else ">") + f"{r['wall']:.1f}" for r in runs]
            eps = [("" if r["hit"] else ">") + str(r["epochs"]) for r in runs]
            label = "**sweeps** (shipped defaults)" if way == "sweeps" else way
            lines.append(
                f"| {task} ({target}) | {label} | {', '.join(walls)} "
                f"| {med(r['wall'] for r in runs):.1f} | {', '.join(eps)} "
                f"| {med(r['epochs'] for r in runs):g} |"
            )
        m = {w: {k: med(r[k] for r in runs) for k in ("wall", "epochs")} for w, runs in got.items()}
        if {"sweeps", "ray_tune"} <= set(m):
            wall = m["sweeps"]["wall"] / m["ray_tune"]["wall"]
            ratios.append(f"- {task}: sweeps / Ray Tune wall **{wall:.2f}** (goal <= 0.5)")
        if {"sweeps", "optuna"} <= set(m):
            eps = m["sweeps"]["epochs"] / m["optuna"]["epochs"]
            ratios.append(f"- {task}: sweeps / Optuna-alone epochs **{eps:.2f}** (goal <= 1.0)")
    note = "- `>`: the run used its whole budget without reaching the target (its total shown)."
    return "\n".join([*lines, "", *ratios, note, "- random = Optuna's RandomSampler, no pruner."])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_TRIALS} trials per run")
    ap.add_argument("--calibrate", action="store_true", help="reprint the targets' evidence")
    ap.add_argument("--ways", default=",".join(WAYS), help="a subset, for a partial run")
    ap.add_argument("--tasks", default=",".join(TARGETS), help="a subset, for a partial run")
    ap.add_argument("--out")
    args = ap.parse_args()
    ways, tasks = args.ways.split(","), args.tasks.split(",")
    if not set(ways) <= set(WAYS) or not set(tasks) <= set(TARGETS):
        ap.error(f"--ways from {','.join(WAYS)}, --tasks from {','.join(TARGETS)}")
    if args.out and (len(ways) < len(WAYS) or len(tasks) < len(TARGETS)):
        ap.error("--out publishes whole runs only: drop --ways/--tasks")
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    if args.calibrate:
        calibrate()
        return
    os.environ["SWEEPS_HOME"] = tempfile.mkdtemp(prefix="sweeps-ttt-")
    if {"sweeps", "ray_tune"} & set(ways):
        from sweeps.execution.cluster import ensure_ray

        ensure_ray()  # Ray as `sweeps run` starts it, once, for every way (Ray Tune's included)
    trials = QUICK_TRIALS if args.quick else MAX_TRIALS
    done = {}
    for seed in range(args.seeds):
        for task in tasks:
            for way in ways:
                done[(way, task, seed)] = r = measure(way, task, seed, trials)
                print(f"seed {seed} {task} {way}: {r}", flush=True)
    budget = f"up to {trials} trials x {MAX_EPOCHS} epochs"
    from bench.results import publish

    publish(summarize(done, args.seeds, budget), args.out, "time_to_target")


if __name__ == "__main__":
    main()
