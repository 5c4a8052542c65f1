"""Warm start: seed a new study with the finished trials of earlier sweeps.

A trial is copied only if every one of its params exists in the new search space and lies in
its range (conditional params may be absent); the rest are skipped with a note. `top_k` also
enqueues the best configurations so they are re-run under the new settings.
"""

from __future__ import annotations

from typing import Any

from sweeps.common import names
from sweeps.common.words import plural
from sweeps.search.study import distribution_contains
from sweeps.spec import CategoricalParam, FloatParam, IntParam, Spec


def distributions(spec: Spec) -> dict[str, Any]:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, Any] = {}
    for name, p in spec.search_space.items():
        if isinstance(p, FloatParam):
            out[name] = FloatDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, IntParam):
            out[name] = IntDistribution(p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, CategoricalParam):
            out[name] = CategoricalDistribution(p.choices)
    return out


def compatible(params: dict[str, Any], dists: dict[str, Any]) -> str | None:
    """None if the params fit the new space, else the reason they do not."""
    for k, v in params.items():
        d = dists.get(k)
        if d is None:
            return f"parameter '{k}' is not in this search space"
        if not distribution_contains(d, v):
            return f"{k}={v!r} is outside this search space"
    return None


def warm_start(study: Any, spec: Spec, storage_url: str) -> list[str]:
    """Copy/enqueue earlier trials; returns notes (what was used and what was skipped)."""
    import optuna

    from sweeps.common.errors import NotFoundError
    from sweeps.search.study import load_study

    ws = spec.warm_start
    assert ws is not None
    dists = distributions(spec)
    notes: list[str] = []
    copied = 0
    for name in ws.from_:
        try:
            src = load_study(name, storage_url)
        except NotFoundError as e:
            notes.append(f"{name}: skipped ({e})")
            continue
        if [d.name for d in src.directions] != [d.name for d in study.directions]:
            notes.append(f"{name}: skipped (different objective directions)")
            continue
        done = [t for t in src.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
        used = 0
        for t in done:
            why = compatible(t.params, dists)
            if why:
                notes.append(f"{name}#{t.number}: skipped ({why})")
                continue
            if ws.copy_trials:
                study.add_trial(
                    optuna.trial.create_trial(
                        params=t.params,
                        distributions={k: dists[k] for k in t.params},
                        values=t.values,
                        state=optuna.trial.TrialState.COMPLETE,
                        user_attrs={
                            names.WARM_FROM: f"{name}#{t.number}",
                            "mlflow_run_id": t.user_attrs.get("mlflow_run_id"),
                        },
                    )
                )
                used += 1
        if ws.top_k and len(study.directions) == 1:
            maximize = study.directions[0].name == "MAXIMIZE"
            ranked = sorted(
                (t for t in done if not compatible(t.params, dists)),
                key=lambda t: t.value,
                reverse=maximize,
            )[: ws.top_k]
            for t in ranked:
                study.enqueue_trial(t.params, user_attrs={names.WARM_FROM: f"{name}#{t.number}"})
            notes.append(f"{name}: enqueued top {plural(len(ranked), 'configuration')}")
        copied += used
        notes.append(f"{name}: copied {used} of {len(done)} finished trials")
    if copied:
        study.set_user_attr(names.WARM_COUNT, copied)
    return notes
