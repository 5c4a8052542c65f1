"""`wandb`: what the script logs with `wandb.log`, read from its run's transaction log.

The trial's script runs with `WANDB_DIR` set to the trial folder (`sweeps.worker.wandb_agent`),
so wandb writes `wandb/offline-run-*/run-<id>.wandb` (or `run-*/` when the user set
`WANDB_MODE=online`) there. Each history row (one `wandb.log` commit: W&B's implicit `_step`,
or `step=n`) is one record; numbers are kept, media and text are not. A row with the objective
is reported at the objective's iteration: the 1st, 2nd, ... time it was logged, which is what
W&B's hyperband counts (`min_iter`), not the row's `_step` (a script that logs a loss per batch
between epochs has `_step`s far apart). Other rows are seen, not reported.

A script that never starts a W&B run (no `wandb.init`) may print Katib's `name=value` lines
instead, as the `stdout` collector reads them; once a run's log appears, only `wandb.log` counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeps.worker.collectors.base import Collector, Place, Record, _number
from sweeps.worker.collectors.stdout import StdoutCollector
from sweeps.worker.collectors.wandb_log import INTERNAL_KEYS, LogReader, history_rows

RUN_GLOB = "wandb/*run-*/run-*.wandb"


class WandbCollector(Collector):
    """Rows of every run's transaction log under the trial folder, in the order they are found."""

    kind = "wandb"

    @classmethod
    def from_settings(cls, settings: dict[str, Any], place: Place) -> WandbCollector:
        return cls(place.trial_dir, place.objective)

    def __init__(self, wandb_dir: str | Path, objective: str = "") -> None:
        self.root = Path(wandb_dir)
        self.readers: dict[Path, LogReader] = {}
        self.objective = objective
        self.iteration = 0  # how many times the objective was logged
        self.lines = StdoutCollector(objective)

    def feed(self, line: str) -> list[Record]:
        return [] if self.readers else self.lines.feed(line)

    def poll(self) -> list[Record]:
        for path in sorted(self.root.glob(RUN_GLOB)):
            self.readers.setdefault(path, LogReader(path))
        out: list[Record] = []
        for reader in self.readers.values():
            records = reader.read()
            if not records:
                continue
            for _step, row in history_rows(records):
                metrics = {
                    k: n
                    for k, v in row.items()
                    if k not in INTERNAL_KEYS
                    and not isinstance(v, str)
                    and (n := _number(v)) is not None
                }
                if self.objective in metrics:
                    self.iteration += 1
                    out.append((self.iteration, metrics))
                elif metrics:
                    out.append((None, metrics))
        return out

    def describe(self) -> str:
        if self.readers:
            return "wandb.log (the W&B run under the trial dir)"
        return "wandb.log (no W&B run was started: wandb.init never ran) or name=value lines"
