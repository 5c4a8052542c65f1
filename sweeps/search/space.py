"""Search space: spec parameters to Optuna suggestions (define-by-run, so conditions just work).

Pure functions over a validated spec; the driver calls :func:`suggest` on each asked trial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweeps.common.errors import SpecError
from sweeps.spec import CategoricalParam, FloatParam, IntParam, Spec

if TYPE_CHECKING:
    import optuna


def order(space: dict[str, Any]) -> list[str]:
    """Parameters in dependency order: those a `when` names come first."""
    done: list[str] = []
    visiting: set[str] = set()

    def visit(n: str) -> None:
        if n in done:
            return
        if n in visiting:
            raise SpecError(f"search_space.{n}.when: circular condition")
        visiting.add(n)
        for dep in space[n].when or {}:
            visit(dep)
        visiting.discard(n)
        done.append(n)

    for name in space:
        visit(name)
    return done


def is_active(param: Any, values: dict[str, Any]) -> bool:
    """A parameter is active when every condition names a sampled, matching value."""
    for dep, wanted in (param.when or {}).items():
        if dep not in values:
            return False
        options = wanted if isinstance(wanted, list) else [wanted]
        if values[dep] not in options:
            return False
    return True


def suggest(trial: optuna.trial.BaseTrial, spec: Spec) -> dict[str, Any]:
    """Sample the trial's active parameters; inactive ones are never suggested."""
    values: dict[str, Any] = {}
    for name in order(spec.search_space):
        p = spec.search_space[name]
        if not is_active(p, values):
            continue
        if isinstance(p, FloatParam):
            values[name] = trial.suggest_float(name, p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, IntParam):
            values[name] = trial.suggest_int(name, p.low, p.high, log=p.log, step=p.step)
        elif isinstance(p, CategoricalParam):
            values[name] = trial.suggest_categorical(name, p.choices)
    return values


def grid(spec: Spec) -> dict[str, list[Any]]:
    """The grid the `grid` sampler walks: choices, int ranges, and floats that have a step."""
    out: dict[str, list[Any]] = {}
    for name, p in spec.search_space.items():
        if isinstance(p, CategoricalParam):
            out[name] = list(p.choices)
        elif isinstance(p, IntParam):
            out[name] = list(range(p.low, p.high + 1, p.step))
        elif isinstance(p, FloatParam) and p.step:
            n = int(round((p.high - p.low) / p.step))
            out[name] = [round(p.low + i * p.step, 12) for i in range(n + 1)]
        else:
            raise SpecError(
                f"search_space.{name}: the grid sampler needs choices, an int range or a float step"
            )
    if any(len(v) > 100_000 for v in out.values()):
        raise SpecError("search_space: grid too large")
    return out
