"""The spec's `search: {name: pbt, ...}`: population-based training (Ray Tune's
`PopulationBasedTraining`, whose names it maps to: `interval_epochs` is
`perturbation_interval` with `time_attr="training_iteration"`, `quantile` is
`quantile_fraction`, `perturb` is `hyperparam_mutations` with per-parameter
`perturbation_factors`, `resample_probability` and `synch` are Ray's own).

A member trains `interval_epochs` per segment; each segment is an Optuna trial of its own
(sweeps/driver/pbt_run.py), so the sweep's trial budget is `population` x segments.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator

from sweeps.spec.params import CategoricalParam, _Model


class PbtSpec(_Model):
    name: Literal["pbt"] = "pbt"
    population: int = Field(8, ge=2, le=10_000)
    interval_epochs: int = Field(4, ge=1, le=100_000)
    # Ray checks 0 <= quantile_fraction <= 0.5: the bottom and top groups never overlap.
    quantile: float = Field(0.25, ge=0, le=0.5)
    # A numeric parameter: the factors it is multiplied by (Ray's (1.2, 0.8) by default);
    # a categorical one: "shift", a move to a neighbouring choice (Ray's list mutation).
    perturb: dict[str, list[float] | Literal["shift"]] = Field(min_length=1)
    resample_probability: float = Field(0.25, ge=0, le=1)
    # False (Ray's default): a member is ranked as soon as its segment ends, against the
    # others' latest results; True: every member waits for the whole generation.
    synch: bool = False

    @field_validator("perturb")
    @classmethod
    def _factors(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, f in v.items():
            if isinstance(f, list) and (not f or any(not math.isfinite(x) or x <= 0 for x in f)):
                raise ValueError(f"{key}: factors must be positive numbers, e.g. [0.8, 1.2]")
        return v


def segments(epochs: int, interval: int) -> int:
    """Pure: how many segments a member trains to reach `epochs`."""
    return -(-epochs // interval)


def check_pbt(spec: Any) -> Any:
    """The Spec's check of `search`. Fields that PBT needs set a certain way and that the user
    left unset get those values here (the model is frozen: set on the instance); set otherwise,
    they are one line."""
    s = spec.search
    if s is None:
        return spec
    _check_space(spec, s)
    _check_trainer(spec, s)
    e, b = spec.execution, spec.budget
    if s.interval_epochs % max(e.checkpoint_every, 1) or not e.checkpoint_every:
        raise ValueError(
            f"execution.checkpoint_every ({e.checkpoint_every}) must divide "
            f"search.interval_epochs ({s.interval_epochs}): each segment ends on a checkpoint"
        )
    if "checkpoint_min_interval_s" in e.model_fields_set and e.checkpoint_min_interval_s > 0:
        raise ValueError(
            "execution.checkpoint_min_interval_s: must be 0 (or left out) with search pbt: "
            "every segment ends on a checkpoint its successor continues from"
        )
    for field, why in (
        ("evaluate", "a replicate would train a member's last params from scratch"),
        ("warm_start", "copied trials are no members of the population"),
    ):
        if getattr(spec, field) is not None:
            raise ValueError(f"{field}: not with search pbt ({why})")
    n = s.population * segments(spec.trainer.epochs, s.interval_epochs)
    if "trials" in b.model_fields_set and b.trials != n:
        raise ValueError(
            f"budget.trials: search pbt runs population x segments = {n} trials; "
            "leave budget.trials out"
        )
    if b.parallel > s.population:
        raise ValueError(f"budget.parallel: at most search.population ({s.population})")
    if "name" in spec.pruner.model_fields_set and spec.pruner.name != "none":
        raise ValueError("pruner: search pbt is its own scheduler; leave the pruner out")
    # Ray keeps every checkpoint PBT may clone; a lane run keeps all of a sweep's here.
    keep = max(e.keep_checkpoints, n * s.interval_epochs // max(e.checkpoint_every, 1))
    execution = e.model_copy(update={"checkpoint_min_interval_s": 0.0, "keep_checkpoints": keep})
    object.__setattr__(spec, "execution", execution)
    object.__setattr__(spec, "budget", b.model_copy(update={"trials": n}))
    object.__setattr__(spec, "pruner", spec.pruner.model_copy(update={"name": "none"}))
    return spec


def _check_space(spec: Any, s: PbtSpec) -> None:
    if spec.objectives:
        raise ValueError("search pbt: needs a single objective to rank members by")
    for key, how in s.perturb.items():
        p = spec.search_space.get(key)
        if p is None:
            raise ValueError(f"search.perturb.{key}: not a search_space parameter")
        if p.when:
            raise ValueError(f"search.perturb.{key}: a conditional parameter cannot be perturbed")
        if key.startswith("resources."):
            raise ValueError(f"search.perturb.{key}: resources cannot change between segments")
        if isinstance(p, CategoricalParam) != (how == "shift"):
            want = '"shift"' if isinstance(p, CategoricalParam) else "factors such as [0.8, 1.2]"
            raise ValueError(f"search.perturb.{key}: a {p.type} parameter takes {want}")


def _check_trainer(spec: Any, s: PbtSpec) -> None:
    t = spec.trainer
    if t.command_line is not None:
        raise ValueError(
            "search pbt: needs the built-in trainer or an entrypoint that resumes from its "
            "checkpoint (a program cannot)"
        )
    if s.interval_epochs >= t.epochs:
        raise ValueError(
            f"search.interval_epochs ({s.interval_epochs}) must be below trainer.epochs "
            f"({t.epochs}): members are ranked and perturbed between intervals"
        )
    schedule = t.params.get("schedule", "none")
    searched = spec.search_space.get("schedule")
    if t.entrypoint is None and (schedule not in (None, "none") or searched is not None):
        raise ValueError(
            "search pbt: the built-in trainer's lr schedule would override perturbed learning "
            "rates; use schedule none"
        )
