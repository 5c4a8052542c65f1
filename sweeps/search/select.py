"""Selection rules over finished trials, e.g. `val_accuracy max; cost_usd <= 0.05`.

Used by `promote --select` on multi-objective sweeps (pick from the Pareto set). Pure logic over
the trials' values (by objective name) and recorded attributes (cost_usd, gpu_hours, duration_s).
"""

from __future__ import annotations

import operator
import re
from typing import Any

from sweeps.common import names
from sweeps.common.errors import NotFoundError, SpecError
from sweeps.search.constraints import best_feasible, violated
from sweeps.search.replicated import best_by_replicates

_OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq}
_COND = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|==|<|>)\s*([-+0-9.eE]+)\s*$")
_GOAL = re.compile(r"^\s*([A-Za-z_][\w.]*)\s+(max|min)\s*$")


def trial_metrics(study: Any, t: Any) -> dict[str, float]:
    metrics = study.user_attrs.get(names.OBJECTIVES) or [study.user_attrs.get(names.OBJECTIVE)]
    out: dict[str, float] = {}
    for name, v in zip(metrics, t.values or [], strict=False):
        if name:
            out[name] = float(v)
    for k in ("cost_usd", "gpu_hours", "duration_s", "train_seconds", "param_count"):
        if isinstance(t.user_attrs.get(k), int | float):
            out.setdefault(k, float(t.user_attrs[k]))
    return out


def parse(rule: str) -> tuple[tuple[str, str], list[tuple[str, Any, float]]]:
    goal: tuple[str, str] | None = None
    conds: list[tuple[str, Any, float]] = []
    for part in filter(None, (p.strip() for p in rule.split(";"))):
        if m := _GOAL.match(part):
            goal = (m.group(1), m.group(2))
        elif m := _COND.match(part):
            conds.append((m.group(1), _OPS[m.group(2)], float(m.group(3))))
        else:
            raise SpecError(f"--select: cannot read '{part}' (use 'metric max|min; metric <= X')")
    if goal is None:
        raise SpecError("--select: needs a goal such as 'val_accuracy max'")
    return goal, conds


def select_trial(study: Any, trials: list[Any], rule: str) -> Any:
    (metric, way), conds = parse(rule)
    pool = list(study.best_trials) if len(study.directions) > 1 else trials
    scored = []
    for t in (t for t in pool if not violated(t)):  # only feasible trials are chosen
        m = trial_metrics(study, t)
        if metric not in m:
            raise SpecError(f"--select: metric '{metric}' unknown (have: {', '.join(sorted(m))})")
        if all(c in m and op(m[c], x) for c, op, x in conds):
            scored.append((m[metric], t))
    if not scored:
        raise NotFoundError(f"--select: no trial satisfies '{rule}'")
    scored.sort(key=lambda p: p[0], reverse=(way == "max"))
    return scored[0][1]


def pick_trial(study: Any, trial: int | None, select: str | None) -> Any:
    """The trial to promote: the one named, the one a rule selects, or the best."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not done:
        raise NotFoundError(f"sweep '{study.study_name}' has no completed trial to promote")
    if trial is not None:
        match = [t for t in done if t.number == trial]
        if not match:
            raise NotFoundError(f"sweep '{study.study_name}' has no completed trial {trial}")
        return match[0]
    if select:
        return select_trial(study, done, select)
    if len(study.directions) > 1:
        raise SpecError(
            "multi-objective sweep: choose with --select (e.g. 'val_accuracy max; "
            "cost_usd <= 0.05') or --trial N"
        )
    maximize = study.direction.name == "MAXIMIZE"
    best = best_by_replicates(study.user_attrs, done, maximize) or best_feasible(done, maximize)
    if best is None:
        raise NotFoundError(f"sweep '{study.study_name}' has no feasible trial to promote")
    return best
