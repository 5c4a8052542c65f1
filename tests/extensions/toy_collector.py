"""A metric collector as a newcomer writes one: `[epoch 3] acc 0.91` lines."""

import re
from typing import Any

from sweeps.worker.collectors.base import Collector, Place, Record

LINE = re.compile(r"^\[epoch (\d+)\] (\w+) ([\d.]+)$")


class BracketCollector(Collector):
    kind = "bracket"

    @classmethod
    def from_settings(cls, settings: dict[str, Any], place: Place) -> "BracketCollector":
        return cls()

    def feed(self, line: str) -> list[Record]:
        m = LINE.match(line.strip())
        return [(int(m.group(1)), {m.group(2): float(m.group(3))})] if m else []
