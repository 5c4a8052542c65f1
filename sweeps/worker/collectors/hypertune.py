"""`hypertune`: what cloudml-hypertune writes to `CLOUD_ML_HP_METRIC_FILE`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sweeps.worker.collectors.base import Collector, Place, Record, _number


class HypertuneCollector(Collector):
    """cloudml-hypertune rewrites its file on every report, keeping the last 100 entries."""

    kind = "hypertune"

    @classmethod
    def from_settings(cls, settings: dict[str, Any], place: Place) -> HypertuneCollector:
        return cls(place.hypertune_file)

    SKIP = ("timestamp", "trial", "checkpoint_path")

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.seen: set[tuple[str, str]] = set()

    def poll(self) -> list[Record]:
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return []
        out: list[Record] = []
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # half-written: read again next time
            if not isinstance(rec, dict):
                continue
            key = (str(rec.get("timestamp")), str(rec.get("global_step")))
            if key in self.seen:
                continue
            self.seen.add(key)
            metrics = {
                k: v
                for k, raw in rec.items()
                if k not in self.SKIP and (v := _number(raw)) is not None
            }
            step = int(metrics.get("global_step", 0)) or None  # hypertune writes 0 for "none"
            out.append((step, metrics))
        return out

    def describe(self) -> str:
        return "cloudml-hypertune's metric file (CLOUD_ML_HP_METRIC_FILE)"
