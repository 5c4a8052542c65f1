"""Outcome constraints: `constraints: ["param_count <= 2e5", "cost_usd <= 0.01"]`.

Each constraint is `NAME OP NUMBER` (OP one of <=, <, >=, >) over a trial's final reported
metrics, its params and its costs. It is read by a tiny parser, never evaluated as code, into a
violation value in Optuna's convention: a value <= 0 is feasible. The driver hands the values to
Optuna with `Trial.set_constraint` before the trial's tell: Optuna 5 deprecates the samplers'
`constraints_func` for it, and TPE, NSGA-II and GP read the values from the told trial
(`FrozenTrial.constraints`) the same way whichever set them. Other samplers sample blind to
them; the best trial is still the best feasible one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeps.common import names
from sweeps.common.errors import SpecError

if TYPE_CHECKING:
    from sweeps.spec import Spec

OPS = ("<=", "<", ">=", ">")
_EXPR = re.compile(
    r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|<|>)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)
# What the driver measures of every trial, whatever trains it (user attrs of the trial).
COSTS = ("cost_usd", "gpu_hours", "train_seconds", "duration_s")
# The Optuna samplers that learn the feasible region from the told constraint values.
_AWARE = ("TPESampler", "GPSampler", "NSGAIISampler", "NSGAIIISampler")


@dataclass(frozen=True)
class Constraint:
    name: str
    op: str
    bound: float

    @property
    def key(self) -> str:
        """The constraint as Optuna stores it (`constraints:<key>`) and `show` prints it."""
        return f"{self.name} {self.op} {self.bound:.15g}"

    def violation(self, value: float) -> float:
        """How far `value` is outside the bound; <= 0 when it satisfies it. A strict bound
        counts its own edge as a violation (by the next float past it), so `x < 1` at x = 1
        is infeasible, as Optuna's `<= 0` rule needs."""
        if self.op == "<=":
            return value - self.bound
        if self.op == ">=":
            return self.bound - value
        if self.op == "<":
            return value - math.nextafter(self.bound, -math.inf)
        return math.nextafter(self.bound, math.inf) - value


def parse(text: Any, where: str = "constraints") -> Constraint:
    """One `NAME OP NUMBER`; anything else is a SpecError that names it."""
    m = _EXPR.match(text) if isinstance(text, str) else None
    if m is None:
        raise SpecError(
            f"{where}: cannot read {text!r}; write NAME OP NUMBER with OP one of "
            f"{', '.join(OPS)} (e.g. 'param_count <= 2e5')"
        )
    bound = float(m.group(3))
    if not math.isfinite(bound):
        raise SpecError(f"{where}: {text!r}: the bound must be a finite number")
    return Constraint(m.group(1), m.group(2), bound)


def parse_all(texts: Iterable[Any]) -> list[Constraint]:
    """Every constraint; one said twice is an error (Optuna keeps a key's first value only)."""
    out: list[Constraint] = []
    for i, t in enumerate(texts):
        c = parse(t, f"constraints.{i}")
        if c in out:
            raise SpecError(f"constraints.{i}: repeats constraints.{out.index(c)} ({c.key})")
        out.append(c)
    return out


def check(spec: Spec) -> None:
    """`sweeps validate`: each constraint reads, names something a trial has where that is
    knowable (params, costs, and the built-in trainer's metrics), and a param it names is
    numeric."""
    # Here, not at import: `show` and `ls` read `violated` without the spec models (0.15 s).
    from sweeps.spec import COMPUTED_METRICS, TRAINER_METRICS, CategoricalParam

    cons = parse_all(spec.constraints)
    builtin = spec.trainer.entrypoint is None and spec.trainer.command_line is None
    metrics = (*TRAINER_METRICS, *COMPUTED_METRICS) if builtin else ()
    known = dict.fromkeys((*spec.search_space, *COSTS, *metrics))
    for i, c in enumerate(cons):
        p = spec.search_space.get(c.name)
        if isinstance(p, CategoricalParam) and not all(_number(v) for v in p.choices):
            raise SpecError(f"constraints.{i}: param '{c.name}' has choices that are not numbers")
        if builtin and c.name not in known:
            raise SpecError(
                f"constraints.{i}: '{c.name}' is not a param, a cost or a metric the built-in "
                f"trainer reports; known: {', '.join(known)}"
            )


def sampler_aware(spec: Spec) -> bool:
    """Whether the spec's sampler reads the constraint values while it samples."""
    import optuna.samplers as samplers

    cls = names.load(names.SAMPLERS[spec.sampler.name])
    aware = tuple(getattr(samplers, n) for n in _AWARE if hasattr(samplers, n))
    return isinstance(cls, type) and issubclass(cls, aware)


def sampler_note(spec: Spec) -> str | None:
    """`validate`'s line for constraints a sampler does not learn from, else None."""
    if not spec.constraints or sampler_aware(spec):
        return None
    return (
        f"note: sampler '{spec.sampler.name}' does not use constraints while it samples; "
        "they are checked after the fact only (the best trial is the best feasible one)"
    )


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def violations(
    cons: Sequence[Constraint],
    params: dict[str, Any],
    metrics: dict[str, Any],
    costs: dict[str, Any],
    space: Iterable[str] = (),
) -> dict[str, float] | str:
    """Pure: each constraint's violation for a trial that ended, or the error when a name it
    needs is missing or not a number. A search-space param the trial does not have (a
    conditional one) satisfies its constraint: 0.0, so every trial has every key, as GP needs.
    """
    space = set(space)
    out: dict[str, float] = {}
    for c in cons:
        v = metrics.get(c.name, costs.get(c.name, params.get(c.name)))
        if v is None and c.name in space and c.name not in params:
            out[c.key] = 0.0
            continue
        if isinstance(v, bool) or not _number(v):
            got = ", ".join(sorted(metrics)) or "none"
            return f"constraint '{c.key}': '{c.name}' is not a reported number (metrics: {got})"
        out[c.key] = float(c.violation(float(v)))
    return out


def violated(trial: Any) -> list[str]:
    """The constraints a finished (Frozen)Trial breaks, as stored in Optuna."""
    return [k for k, v in trial.constraints.items() if v > 0]


def rankable(t: Any) -> bool:
    """Pure: whether a trial competes for the sweep's best (and `extend --top`): COMPLETE,
    one objective value, no constraint broken, and (pbt) a member's last segment."""
    return (
        t.state.name == "COMPLETE"
        and bool(t.values)
        and len(t.values) == 1
        and not violated(t)
        and bool(t.user_attrs.get(names.PBT_FINAL, True))
    )


def best_feasible(trials: Iterable[Any], maximize: bool) -> Any:
    """Pure: the best COMPLETE single-objective trial that breaks no constraint, or None. Ties
    go to the earliest trial, as with Optuna's `best_trial`."""
    pool = [t for t in trials if rankable(t)]
    if not pool:
        return None
    pool.sort(key=lambda t: t.number)
    return (max if maximize else min)(pool, key=lambda t: t.values[0])


def none_feasible(trials: Iterable[Any]) -> str | None:
    """Pure: why a sweep has no feasible trial (the one line it ends with), or None when one
    is feasible, none completed, or none was constrained."""
    done = [t for t in trials if t.state.name == "COMPLETE"]
    if not done or not any(t.constraints for t in done):
        return None
    broken: dict[str, int] = {}
    for t in done:
        bad = violated(t)
        if not bad:
            return None
        for k in bad:
            broken[k] = broken.get(k, 0) + 1
    which = ", ".join(f"'{k}' by {n}" for k, n in sorted(broken.items(), key=lambda p: -p[1]))
    every = "the only complete trial" if len(done) == 1 else f"all {len(done)} complete trials"
    return f"no feasible trial: {every} broke a constraint ({which})"
