"""Search efficiency on digits: epochs trained until some trial reaches val accuracy 0.97,
TPE + median pruning vs random search without pruning; median over 5 seeds.

    .venv/bin/python bench/search_efficiency.py [--out bench/RESULTS.md]

The samplers and pruners are the ones sweeps builds from a spec (sweeps.samplers), driven by
an in-process ask/tell loop so the measure is the search itself, not the cluster.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET, MAX_EPOCHS, MAX_TRIALS, BATCH = 0.97, 10, 80, 64


def spec_for(sampler: str, pruner: str, seed: int):
    from sweeps.spec import spec_from_dict

    return spec_from_dict(
        {
            "name": "eff",
            "search_space": {
                "lr": {"type": "float", "low": 1e-4, "high": 3e-1, "log": True},
                "hidden": {"type": "int", "low": 8, "high": 256, "log": True},
                "dropout": {"type": "float", "low": 0.0, "high": 0.6},
            },
            "sampler": {
                "name": sampler,
                "seed": seed,
                **({"options": {"n_startup_trials": 5}} if sampler == "tpe" else {}),
            },
            "pruner": {
                "name": pruner,
                **(
                    {"options": {"n_startup_trials": 3, "n_warmup_steps": 1}}
                    if pruner == "median"
                    else {}
                ),
            },
        }
    )


def epochs_to_target(sampler: str, pruner: str, seed: int) -> int:
    import optuna
    import torch
    import torch.nn.functional as F  # noqa: N812

    from sweeps import space
    from sweeps.samplers import make_pruner, make_sampler
    from trainer.data import load_dataset
    from trainer.models import build_model

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = spec_for(sampler, pruner, seed)
    study = optuna.create_study(
        direction="maximize", sampler=make_sampler(spec), pruner=make_pruner(spec.pruner)
    )
    ds = load_dataset("digits", seed=0)
    total = 0
    for _ in range(MAX_TRIALS):
        trial = study.ask()
        p = space.suggest(trial, spec)
        torch.manual_seed(seed * 1000 + trial.number)
        model = build_model(
            "mlp", ds.input_shape, 10, hidden=p["hidden"], layers=2, dropout=p["dropout"]
        )
        opt = torch.optim.AdamW(model.parameters(), lr=p["lr"])
        acc, pruned = 0.0, False
        for epoch in range(MAX_EPOCHS):
            model.train()
            perm = torch.randperm(len(ds.x_train))
            for i in range(0, len(perm), BATCH):
                b = perm[i : i + BATCH]
                loss = F.cross_entropy(model(ds.x_train[b]), ds.y_train[b])
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                acc = (model(ds.x_val).argmax(1) == ds.y_val).float().mean().item()
            total += 1
            if acc >= TARGET:
                return total
            trial.report(acc, epoch + 1)
            if trial.should_prune():
                pruned = True
                break
        study.tell(
            trial,
            acc if not pruned else None,
            state=optuna.trial.TrialState.PRUNED if pruned else None,
        )
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    tpe = [epochs_to_target("tpe", "median", s) for s in range(args.seeds)]
    rnd = [epochs_to_target("random", "none", s) for s in range(args.seeds)]
    mt, mr = statistics.median(tpe), statistics.median(rnd)
    lines = [
        f"### search_efficiency ({time.strftime('%Y-%m-%d')}, digits, target val acc "
        f"{TARGET}, up to {MAX_EPOCHS} epochs/trial)",
        "",
        "| search | epochs to target per seed | median |",
        "|---|---|---|",
        f"| TPE + median pruning | {tpe} | {mt} |",
        f"| random, no pruning | {rnd} | {mr} |",
        "",
        f"- ratio TPE+pruning / random: **{mt / mr:.2f}** (target <= 0.5)",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        from bench.results import write_section

        write_section(args.out, "search_efficiency", text)


if __name__ == "__main__":
    main()
