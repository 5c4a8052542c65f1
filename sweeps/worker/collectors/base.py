"""The base class of metric collectors, and the parsing helpers they share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

Record = tuple[int | None, dict[str, float]]

# Katib's default StdOut filter: `name=value`, the value a plain or scientific number.
KATIB_REGEX = r"([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)"

# Step markers a custom regex does not capture itself: "epoch=3", "Epoch 3/10", "step: 500".
_STEP = re.compile(r"\b(epoch|step)\b\s*[=:]?\s*(\d+)", re.IGNORECASE)

STEP_KEYS = ("epoch", "step", "global_step")


def _number(text: Any) -> float | None:
    if isinstance(text, bool):
        return None
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _take_step(metrics: dict[str, float]) -> int | None:
    """Pops the step keys out of a record; `epoch` wins over `step` and `global_step`."""
    found = [metrics.pop(k) for k in STEP_KEYS if k in metrics]
    return int(found[0]) if found else None


@dataclass(frozen=True)
class Place:
    """Where a trial's collector reads: the objective's name (a bare value on stdout is the
    objective's), the trial's own folder, and cloudml-hypertune's metric file."""

    objective: str
    trial_dir: str
    hypertune_file: str


class Collector:
    """The base class of a metric collector: it is fed what a script prints and polled while the
    script runs, and hands back new records `(step | None, {name: value})`. A collector only
    overrides what its source needs; it never raises on half-written input (what cannot be
    parsed yet is read again on the next poll).

    To add one: a module in this package with a subclass that sets `kind` (the name users
    write in `trainer.metrics.collector`) and implements `from_settings`, and one line in
    `sweeps.common.names.COLLECTORS`.
    """

    kind = ""

    @classmethod
    def from_settings(cls, settings: dict[str, Any], place: Place) -> Collector:
        """The collector `trainer.metrics` (as a dict) asks for, reading at `place`."""
        raise NotImplementedError

    def feed(self, line: str) -> list[Record]:
        return []

    def feed_all(self, lines: list[str]) -> list[Record]:
        return [rec for line in lines for rec in self.feed(line)]

    def poll(self) -> list[Record]:
        return []

    def finish(self) -> list[Record]:
        return self.poll()

    def describe(self) -> str:
        return self.kind
