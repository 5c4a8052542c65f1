"""Cost of a trial in money and GPU-hours, from the machine price table (conf/machines.yaml).

Pure functions: a worker is billed as one machine of its `machine_type` for the trial's wall
time; a worker holding a fraction of a GPU (0.25) pays that fraction of the machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

DEFAULT_TABLE = Path(__file__).resolve().parent.parent / "conf" / "machines.yaml"


@dataclass(frozen=True)
class Machine:
    name: str
    vcpus: int
    memory_gb: float
    price_per_hour: float
    gpu: str | None = None
    gpu_count: int = 0


@lru_cache(maxsize=8)
def _load(path: str) -> dict[str, Machine]:
    raw = yaml.safe_load(Path(path).read_text()) or {}
    out = {}
    for name, m in (raw.get("machines") or {}).items():
        out[name] = Machine(
            name=name,
            vcpus=int(m.get("vcpus", 1)),
            memory_gb=float(m.get("memory_gb", 0)),
            price_per_hour=float(m["price_per_hour"]),
            gpu=m.get("gpu"),
            gpu_count=int(m.get("gpu_count", 0)),
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


def worker_share(m: Machine, gpus_per_worker: float) -> float:
    """The part of a machine one worker pays for: a GPU fraction below one GPU, else all of it."""
    if m.gpu_count and 0 < gpus_per_worker < 1:
        return gpus_per_worker
    return 1.0


def trial_cost(
    m: Machine, *, workers: int, gpus_per_worker: float, seconds: float
) -> tuple[float, float]:
    """(cost_usd, gpu_hours) of `workers` workers running for `seconds` of wall time."""
    hours = max(seconds, 0.0) / 3600.0
    cost = m.price_per_hour * worker_share(m, gpus_per_worker) * workers * hours
    gpu_hours = gpus_per_worker * workers * hours
    return cost, gpu_hours
