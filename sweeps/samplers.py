"""Spec sampler/pruner sections to Optuna objects.

Options are passed through as keyword arguments; an unknown option is a spec error that names
it, rather than a TypeError deep inside Optuna.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from sweeps import space
from sweeps.errors import SpecError
from sweeps.spec import PrunerSpec, Spec

if TYPE_CHECKING:
    import optuna


def _build(cls: Any, where: str, options: dict[str, Any], **fixed: Any) -> Any:
    params = inspect.signature(cls).parameters
    for key in options:
        if key not in params or key in fixed:
            allowed = ", ".join(k for k in params if k not in fixed and not k.startswith("_"))
            raise SpecError(f"{where}.options.{key}: unknown option (allowed: {allowed})")
    try:
        return cls(**fixed, **options)
    except (TypeError, ValueError) as err:
        raise SpecError(f"{where}.options: {' '.join(str(err).split())}") from None


def make_sampler(spec: Spec) -> optuna.samplers.BaseSampler:
    import optuna

    s = spec.sampler
    seed = {"seed": s.seed}
    if s.name == "tpe":
        return _build(optuna.samplers.TPESampler, "sampler", s.options, **seed)
    if s.name == "random":
        return _build(optuna.samplers.RandomSampler, "sampler", s.options, **seed)
    if s.name == "grid":
        return _build(
            optuna.samplers.GridSampler, "sampler", s.options, search_space=space.grid(spec), **seed
        )
    if s.name == "cmaes":
        return _build(optuna.samplers.CmaEsSampler, "sampler", s.options, **seed)
    if s.name == "gp":
        return _build(optuna.samplers.GPSampler, "sampler", s.options, **seed)
    if s.name == "nsga2":
        return _build(optuna.samplers.NSGAIISampler, "sampler", s.options, **seed)
    if s.name == "qmc":
        return _build(optuna.samplers.QMCSampler, "sampler", s.options, **seed)
    raise SpecError(f"sampler.name: unknown sampler '{s.name}'")


def make_pruner(p: PrunerSpec, where: str = "pruner") -> optuna.pruners.BasePruner:
    import optuna

    table: dict[str, Any] = {
        "median": optuna.pruners.MedianPruner,
        "percentile": optuna.pruners.PercentilePruner,
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
        "hyperband": optuna.pruners.HyperbandPruner,
        "none": optuna.pruners.NopPruner,
    }
    if p.name == "patient":
        inner = make_pruner(p.wraps, f"{where}.wraps") if p.wraps else None
        if "patience" not in p.options:
            raise SpecError(f"{where}.options.patience: required for the patient pruner")
        return _build(optuna.pruners.PatientPruner, where, p.options, wrapped_pruner=inner)
    if p.name == "percentile" and "percentile" not in p.options:
        return _build(table[p.name], where, p.options, percentile=25.0)
    return _build(table[p.name], where, p.options)
