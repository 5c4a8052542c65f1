"""The Optuna work the driver does for each trial, two ways side by side in one run, on SQLite.

Per trial: ask (claimed by a `sweeps.driver` attr), sample four params, write the four attrs of
a trial's end, tell. "Optuna's API": `study.ask()`, `set_user_attr`, Optuna's upsert attr by
attr (one transaction), `study.tell`. "Adapter": `sweeps.search.study.ask` (no scan of WAITING
trials when there are none; the claim in the trial's template) and `set_trial_attrs` (one upsert
statement). The two studies grow side by side and the ways alternate trial by trial, so a busy
machine slows both alike.

    .venv/bin/python bench/driver_ops.py [--trials 1000] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

END_ATTRS = {"duration_s": 0.5, "cost_usd": 1e-6, "gpu_hours": 0.0, "train_seconds": 0.4}


def _params(trial: Any) -> None:
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    trial.suggest_int("hidden", 32, 256)
    trial.suggest_float("dropout", 0.0, 0.5)
    trial.suggest_categorical("batch_size", [32, 64, 128])


def optuna_api(study: Any) -> None:
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    from sweeps.search import study as st

    trial = study.ask()
    trial.set_user_attr("sweeps.driver", "bench")
    _params(trial)
    backend = study._storage._backend
    with _create_scoped_session(backend.scoped_session, True) as session:
        for k, v in END_ATTRS.items():
            backend._set_trial_attr_without_commit(
                session, models.TrialUserAttributeModel, st.trial_id(trial), k, v
            )
    study.tell(trial, 0.5)


def adapter(study: Any) -> None:
    from sweeps.search import study as st

    trial = st.ask(study, {"sweeps.driver": "bench"})
    _params(trial)
    st.set_trial_attrs(study, st.trial_id(trial), END_ATTRS)
    study.tell(trial, 0.5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--out")
    args = ap.parse_args()
    import optuna

    from sweeps.search import study as st

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder = tempfile.mkdtemp(prefix="sweeps-driver-ops-")
    ways = {"Optuna's API": optuna_api, "adapter": adapter}
    studies = {
        name: optuna.create_study(
            study_name=name,
            storage=st.open_storage(f"sqlite:///{folder}/{i}.db"),
            sampler=optuna.samplers.RandomSampler(seed=0),
        )
        for i, name in enumerate(ways)
    }
    spent = dict.fromkeys(ways, 0.0)
    for _ in range(args.trials):
        for name, way in ways.items():
            t0 = time.perf_counter()
            way(studies[name])
            spent[name] += time.perf_counter() - t0
    per = {name: spent[name] / args.trials * 1000 for name in ways}
    ratio = per["adapter"] / per["Optuna's API"]
    lines = [
        f"### driver_ops ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, SQLite, "
        f"{args.trials} trials each, alternating)",
        "",
        "| per trial: ask, 4 params, 4 end attrs, tell | ms |",
        "|---|---|",
        *(f"| {name} | {per[name]:.2f} |" for name in ways),
        f"| ratio adapter / Optuna's API | **{ratio:.2f}** |",
    ]
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "driver_ops")


if __name__ == "__main__":
    main()
