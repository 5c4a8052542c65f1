"""Cost of a trial in money and GPU-hours, from the machine price table (conf/machines.yaml).

Pure functions. The billing rule, for a trial of W workers on machine type M for T hours:

* A worker reserves a share ``s`` of one machine of type M: on a GPU type (``gpu_count > 0``)
  the larger of ``gpus_per_worker / gpu_count`` and ``cpus_per_worker / vcpus``; on a CPU type
  ``cpus_per_worker / vcpus``. (The larger of the two because whatever runs out first decides
  what else still fits beside the worker.)
* If the trial's workers fit on one machine (``W * s <= 1``) the trial pays that fraction of
  the machine, ``W * s``: the rest of the machine is free for other lanes, as Ray packs them.
* Otherwise the trial pays whole machines. A worker cannot straddle machines, so a machine
  holds ``k = floor(1 / s)`` workers and the trial takes ``ceil(W / k)`` machines (with
  ``s > 1``, a worker that needs more than one machine, ``W * ceil(s)``).
* cost = machines × hourly price × T, where the hourly price is the table's on-demand price,
  or its spot price when ``resources.preemptible`` is true (no spot price: an error).
* GPU-hours = W × gpus_per_worker × T, whatever the machine.
* With ``resources.whole_machines`` (AI Platform's replicas, each a VM of its own) every worker
  pays whole machines, ``W * max(1, ceil(s))``, however little of one it reserves.

So 8 one-GPU workers on an 8-GPU ``a2-highgpu-8g`` pay one machine ($29.387/h), 12 pay two,
and a 0.25-GPU worker pays 1/32 of it ($0.918/h), the same as 0.25 of an ``a2-highgpu-1g``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from sweeps.common.errors import SpecError, one_line
from sweeps.common.words import plural

if TYPE_CHECKING:
    from sweeps.spec import Spec

# Shipped with the package (package data); conf/machines.yaml in the source tree links here.
DEFAULT_TABLE = Path(__file__).resolve().parent / "machines.yaml"
_EPS = 1e-9  # shares are ratios of small numbers: 3/8 * 8/3 must count as one machine


@dataclass(frozen=True)
class Machine:
    name: str
    vcpus: int
    memory_gb: float
    price_per_hour: float
    gpu: str | None = None
    gpu_count: int = 0
    spot_price_per_hour: float | None = None


@lru_cache(maxsize=8)
def _load(path: str) -> dict[str, Machine]:
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"price table {path}: {one_line(e)}") from e
    table = raw.get("machines") if isinstance(raw, dict) else None
    if not isinstance(table, dict) or not all(isinstance(m, dict) for m in table.values()):
        raise SpecError(
            f"price table {path}: not a price table (a mapping `machines: {{NAME: {{vcpus, "
            "memory_gb, price_per_hour, ...}}}}`, like conf/machines.yaml)"
        )
    out = {}
    for name, m in table.items():
        spot = m.get("spot_price_per_hour")
        out[name] = Machine(
            name=name,
            vcpus=int(m.get("vcpus", 1)),
            memory_gb=float(m.get("memory_gb", 0)),
            price_per_hour=float(m["price_per_hour"]),
            gpu=m.get("gpu"),
            gpu_count=int(m.get("gpu_count", 0)),
            spot_price_per_hour=None if spot is None else float(spot),
        )
    return out


def machines(path: str | None = None) -> dict[str, Machine]:
    """The price table: $SWEEPS_MACHINES or the shipped conf/machines.yaml."""
    return _load(str(path or os.environ.get("SWEEPS_MACHINES") or DEFAULT_TABLE))


def machine(name: str, path: str | None = None) -> Machine:
    table = machines(path)
    if name not in table:
        raise KeyError(
            f"resources.machine_type: unknown machine '{name}' (known: {', '.join(sorted(table))})"
        )
    return table[name]


def hourly_price(m: Machine, preemptible: bool = False) -> float:
    """On-demand price, or the spot price for a preemptible worker (KeyError if none)."""
    if not preemptible:
        return m.price_per_hour
    if m.spot_price_per_hour is None:
        raise KeyError(f"machine '{m.name}' has no spot price in the price table")
    return m.spot_price_per_hour


def worker_share(m: Machine, gpus_per_worker: float, cpus_per_worker: float = 1.0) -> float:
    """The share of one machine a worker reserves (see the module docstring)."""
    cpu = max(cpus_per_worker, 0.0) / max(m.vcpus, 1)
    if m.gpu_count:
        return max(max(gpus_per_worker, 0.0) / m.gpu_count, cpu)
    return cpu


def machines_billed(
    m: Machine,
    *,
    workers: int,
    gpus_per_worker: float,
    cpus_per_worker: float = 1.0,
    whole_machines: bool = False,
) -> float:
    """How many machines of type `m` a trial pays for: a fraction when its workers fit on one,
    else whole machines, packing `floor(1 / share)` workers on each; with `whole_machines`, a
    machine (or more) for each worker."""
    share = worker_share(m, gpus_per_worker, cpus_per_worker)
    workers = max(int(workers), 0)
    if whole_machines:
        return float(workers * max(1, math.ceil(share - _EPS)))
    if workers * share <= 1 + _EPS:
        return workers * share
    if share > 1 + _EPS:
        return float(workers * math.ceil(share - _EPS))
    per_machine = math.floor(1 / share + _EPS)
    return float(math.ceil(workers / per_machine))


def trial_cost(
    m: Machine,
    *,
    workers: int,
    gpus_per_worker: float,
    seconds: float,
    cpus_per_worker: float = 1.0,
    preemptible: bool = False,
    whole_machines: bool = False,
) -> tuple[float, float]:
    """(cost_usd, gpu_hours) of `workers` workers running for `seconds` of wall time."""
    hours = max(seconds, 0.0) / 3600.0
    n = machines_billed(
        m,
        workers=workers,
        gpus_per_worker=gpus_per_worker,
        cpus_per_worker=cpus_per_worker,
        whole_machines=whole_machines,
    )
    cost = hourly_price(m, preemptible) * n * hours
    gpu_hours = gpus_per_worker * workers * hours
    return cost, gpu_hours


def resources_cost(r: Any, seconds: float) -> tuple[float, float]:
    """`trial_cost` of a trial's resources (machine_type, workers, cpus_per_worker,
    gpus_per_worker, preemptible); (0, 0) for a machine not in the table (validation checked
    the spec's machines and spot prices: a miss here costs nothing)."""
    try:
        return trial_cost(
            machine(r.machine_type),
            workers=r.workers,
            gpus_per_worker=r.gpus_per_worker,
            cpus_per_worker=r.cpus_per_worker,
            preemptible=r.preemptible,
            whole_machines=bool(getattr(r, "whole_machines", False)),
            seconds=seconds,
        )
    except KeyError:
        return 0.0, 0.0


# ----- facts about a spec, before it runs -------------------------------------------------------


def _searched_values(spec: Spec, key: str, default: Any) -> list[Any]:
    """The values a searched resource can take that matter for a worst case: every choice of a
    categorical, the upper bound of a range (cost only grows with workers and GPUs)."""
    p = spec.search_space.get(key)
    if p is None:
        return [default]
    choices = getattr(p, "choices", None)
    if choices is not None:
        return [c for c in choices if c is not None] or [default]
    return [p.high]  # type: ignore[union-attr]


def _machine_names(spec: Spec) -> list[str]:
    return [str(v) for v in _searched_values(spec, "resources.machine_type", None) if v] or [
        spec.resources.machine_type
    ]


def check_spec_prices(spec: Spec) -> None:
    """Every machine type the spec can use is in the price table, with a spot price when
    `resources.preemptible` is true; else a one-line SpecError naming the field."""
    from sweeps.common.errors import SpecError

    for name in _machine_names(spec):
        try:
            m = machine(name)
        except KeyError as e:
            raise SpecError(str(e).strip("'\"")) from None
        if spec.resources.preemptible and m.spot_price_per_hour is None:
            spot = sorted(k for k, v in machines().items() if v.spot_price_per_hour is not None)
            raise SpecError(
                f"resources.preemptible: machine type '{name}' has no spot price in the price "
                f"table (spot prices: {', '.join(spot) or 'none'}); add spot_price_per_hour "
                "to it or set preemptible: false"
            )


def spec_cost_facts(spec: Spec) -> dict[str, Any]:
    """What one trial costs per hour and what the whole budget can cost at worst.

    A trial's duration has no limit of its own: `budget.timeout_s` stops launching but lets
    running trials finish. So the worst case is bounded in one of three ways, the tightest
    that applies: `budget.max_cost_usd` with `hard: true` (running trials are cancelled once
    spend crosses it); `budget.timeout_s` taken as the longest a trial runs (an assumption,
    said so in `worst_case_basis`), times `budget.trials`, capped by `max_cost_usd` plus the
    `parallel` trials that may be running when it is crossed; else unknown (None).
    """
    r = spec.resources
    names = _machine_names(spec)
    searched = any(
        k in spec.search_space
        for k in ("resources.workers", "resources.gpus_per_worker", "resources.machine_type")
    )
    workers = max(int(w) for w in _searched_values(spec, "resources.workers", r.workers))
    gpus = max(
        float(g) for g in _searched_values(spec, "resources.gpus_per_worker", r.gpus_per_worker)
    )
    best: tuple[float, float, float, str] | None = None  # (cost/h, machines, price, name)
    for name in names:
        m = machine(name)
        price = hourly_price(m, r.preemptible)
        n = machines_billed(
            m,
            workers=workers,
            gpus_per_worker=gpus,
            cpus_per_worker=r.cpus_per_worker,
            whole_machines=r.whole_machines,
        )
        if best is None or price * n > best[0]:
            best = (price * n, n, price, name)
    assert best is not None
    per_hour, n_machines, price, dearest = best

    worst, basis, hours = _worst_case(spec, per_hour)
    return {
        "machine_type": names if "resources.machine_type" in spec.search_space else names[0],
        "price": "spot" if r.preemptible else "on-demand",
        "spot": bool(r.preemptible),
        "price_per_machine_hour_usd": price,
        "machines_per_trial": n_machines,
        "cost_per_hour_usd": per_hour,
        "searched_resources": searched,
        "dearest_machine_type": dearest,
        "trial_hours_bound": hours,
        "worst_case_cost_usd": worst,
        "worst_case_basis": basis,
    }


def _worst_case(spec: Spec, per_hour: float) -> tuple[float | None, str, float | None]:
    """The budget's worst-case cost, what it rests on, and the bound on a trial's hours."""
    b = spec.budget
    hours = b.timeout_s / 3600.0 if b.timeout_s else None
    worst: float | None = None
    if b.max_cost_usd is not None and b.hard:
        worst = b.max_cost_usd
        basis = (
            f"budget.max_cost_usd ${b.max_cost_usd:g} with hard: true (running trials are "
            "cancelled once spend crosses it)"
        )
    elif b.trial_timeout_s is not None:
        # Each attempt ends at its first report past the limit; retries add attempts.
        hours = b.trial_timeout_s / 3600.0
        attempts = b.trials * (1 + spec.retries.max)
        worst = attempts * per_hour * hours
        basis = (
            f"{plural(attempts, 'trial attempt')} × ${per_hour:.4g}/h × {hours:.4g} h: "
            f"budget.trial_timeout_s {b.trial_timeout_s:g} s each, retries.max "
            f"{spec.retries.max}; assuming each attempt reports again soon after its limit, "
            "where it ends"
        )
        worst, basis = _capped(spec, per_hour, hours, worst, basis)
    elif hours is not None:
        worst = b.trials * per_hour * hours
        basis = (
            f"{plural(b.trials, 'trial')} × ${per_hour:.4g}/h × {hours:.4g} h, assuming no trial "
            f"runs longer than budget.timeout_s ({b.timeout_s:g} s; the timeout stops launching, "
            "it does not cut a running trial)"
        )
        worst, basis = _capped(spec, per_hour, hours, worst, basis)
    else:
        basis = (
            "unknown: no bound on a trial's duration (set budget.trial_timeout_s, "
            "budget.timeout_s, or budget.max_cost_usd with hard: true)"
        )
    return worst, basis, hours


def _capped(
    spec: Spec, per_hour: float, hours: float, worst: float, basis: str
) -> tuple[float, str]:
    """The worst case capped by a soft `budget.max_cost_usd`: it plus the trials that may be
    running when spend crosses it."""
    b = spec.budget
    if b.max_cost_usd is None:
        return worst, basis
    capped = b.max_cost_usd + min(b.parallel, b.trials) * per_hour * hours
    if capped >= worst:
        return worst, basis
    return capped, basis + (
        f"; capped by budget.max_cost_usd ${b.max_cost_usd:g} plus the "
        f"{min(b.parallel, b.trials)} trial(s) that may be running when it is crossed"
    )


def cost_line(facts: dict[str, Any]) -> str:
    """The facts in one line, for `sweeps validate` without --json."""
    mt = facts["machine_type"]
    where = (
        mt
        if isinstance(mt, str)
        else f"dearest of {', '.join(mt)}: {facts['dearest_machine_type']}"
    )
    trial = (
        f"cost: ${facts['cost_per_hour_usd']:.4g}/h per trial ({where}, {facts['price']} "
        f"${facts['price_per_machine_hour_usd']:.4g}/h × {facts['machines_per_trial']:.4g} "
        f"machine{'s' if facts['machines_per_trial'] > 1 else ''})"
    )
    worst = facts["worst_case_cost_usd"]
    if worst is None:
        return f"{trial}; worst case {facts['worst_case_basis']}"
    return f"{trial}; worst case ${worst:.4g} ({facts['worst_case_basis']})"
