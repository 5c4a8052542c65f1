"""`stdout`: Katib's default `name=value` format, or a custom regex; `epoch=`/`step=` on the same
line gives the step."""

from __future__ import annotations

import re
from typing import Any

from sweeps.worker.collectors.base import (
    _STEP,
    KATIB_REGEX,
    Collector,
    Place,
    Record,
    _number,
    _take_step,
)


class StdoutCollector(Collector):
    kind = "stdout"

    @classmethod
    def from_settings(cls, settings: dict[str, Any], place: Place) -> StdoutCollector:
        return cls(place.objective, settings.get("regex"))

    def __init__(self, objective: str, regex: str | None = None) -> None:
        self.objective = objective
        self.regex = regex or KATIB_REGEX
        self.rx = re.compile(self.regex)
        g = self.rx.groupindex
        self.value_group = g.get("value", 2 if self.rx.groups >= 2 else 1)
        self.name_group = g.get("name", 1 if self.rx.groups >= 2 and "value" not in g else None)
        self.step_group = g.get("step")

    def feed(self, line: str) -> list[Record]:
        out = []
        # Progress bars redraw with \r: every redraw is a line of its own.
        for part in line.split("\r"):
            rec = self._parse(part)
            if rec is not None:
                out.append(rec)
        return out

    def _parse(self, text: str) -> Record | None:
        metrics: dict[str, float] = {}
        step: int | None = None
        for m in self.rx.finditer(text):
            value = _number(m.group(self.value_group))
            if value is None:
                continue
            name = m.group(self.name_group) if self.name_group else self.objective
            metrics[name] = value
            if self.step_group and m.group(self.step_group) is not None:
                step = int(float(m.group(self.step_group)))
        if not metrics:
            return None
        marked = _take_step(metrics)
        if step is None:
            step = marked
        if step is None:
            s = _STEP.search(text)
            step = int(s.group(2)) if s else None
        return (step, metrics) if metrics else None

    def describe(self) -> str:
        return f"stdout lines matching {self.regex!r}"
