"""Metric collectors: read a script's metrics from what it prints or writes, as it runs.

Each collector is fed incrementally and hands back new records `(step | None, {name: value})`:
`feed(line)` for every line the script prints (stdout and stderr), `poll()` now and then while it
runs, `finish()` once after it exited. A step of None means "the next one".

One module per collector (`stdout`, `file`, `hypertune`, `tensorboard`, `wandb`), each a
subclass of `base.Collector`; `sweeps.common.names.COLLECTORS` is the table of them, which the spec
validates `trainer.metrics.collector` against and `make` builds from.

Owns: `base` (Collector, Place, the parsing helpers), one module per collector, and `wandb_log`
(the W&B transaction-log reader: wandb's private names live there).
May import: `sweeps.common`; nothing else of sweeps (collectors are pure parsers).
"""

from __future__ import annotations

from typing import Any

from sweeps.common import names
from sweeps.worker.collectors.base import KATIB_REGEX, STEP_KEYS, Collector, Place, Record
from sweeps.worker.collectors.file import FileCollector
from sweeps.worker.collectors.hypertune import HypertuneCollector
from sweeps.worker.collectors.stdout import StdoutCollector
from sweeps.worker.collectors.tensorboard import TensorboardCollector
from sweeps.worker.collectors.wandb import WandbCollector

__all__ = [
    "KATIB_REGEX",
    "STEP_KEYS",
    "Collector",
    "FileCollector",
    "HypertuneCollector",
    "Place",
    "Record",
    "StdoutCollector",
    "TensorboardCollector",
    "WandbCollector",
    "collector_class",
    "make",
]


def collector_class(kind: str) -> type[Collector]:
    """The class registered for `kind` in the table."""
    cls: type[Collector] = names.load(names.COLLECTORS[kind])
    return cls


def make(
    settings: dict[str, Any], *, objective: str, trial_dir: str, hypertune_file: str
) -> Collector:
    """The collector `trainer.metrics` (as a dict) asks for."""
    kind = settings.get("collector", "stdout")
    if kind not in names.COLLECTORS:
        raise ValueError(f"unknown collector {kind!r}")
    place = Place(objective, str(trial_dir), str(hypertune_file))
    return collector_class(kind).from_settings(settings, place)
