"""`file`: a JSON object (re-read when it changes; lists of numbers are per-step histories), a JSON
array of objects, or JSON lines; `epoch`/`step`/`global_step` keys give the step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sweeps.worker.collectors.base import Collector, Place, Record, _number, _take_step


def _flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in obj.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        elif (n := _number(v)) is not None and not isinstance(v, str):
            out[f"{prefix}{k}"] = n
    return out


def _histories(obj: dict[str, Any]) -> dict[str, list[float]]:
    return {
        k: [float(x) for x in v]
        for k, v in obj.items()
        if isinstance(v, list) and v and all(_number(x) is not None for x in v)
    }


class FileCollector(Collector):
    kind = "file"

    @classmethod
    def from_settings(cls, settings: dict[str, Any], place: Place) -> FileCollector:
        return cls(Path(place.trial_dir) / (settings.get("path") or "metrics.json"))

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.stamp: tuple[float, int] | None = None
        self.snapshot: str | None = None  # the last JSON object read, canonical
        self.done = 0  # entries of a JSON array / history lists already handed out
        self.lines: set[tuple[int, str]] = set()

    def poll(self) -> list[Record]:
        return self._read(final=False)

    def finish(self) -> list[Record]:
        return self._read(final=True)

    def _read(self, final: bool) -> list[Record]:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime, st.st_size)
            if stamp == self.stamp and not final:
                return []
            text = self.path.read_text(errors="replace")
        except OSError:
            return []
        self.stamp = stamp
        try:
            doc = json.loads(text)
        except ValueError:
            return self._json_lines(text, final)
        if isinstance(doc, dict):
            return self._object(doc)
        if isinstance(doc, list):
            recs = [self._record(d) for d in doc[self.done :] if isinstance(d, dict)]
            self.done = max(self.done, len(doc))
            return [r for r in recs if r[1]]
        return []

    def _object(self, doc: dict[str, Any]) -> list[Record]:
        out: list[Record] = []
        hist = _histories(doc)
        n = max((len(v) for v in hist.values()), default=0)
        for i in range(self.done, n):
            out.append((i + 1, {k: v[i] for k, v in hist.items() if len(v) > i}))
        self.done = max(self.done, n)
        canon = json.dumps({k: v for k, v in doc.items() if k not in hist}, sort_keys=True)
        if canon != self.snapshot:
            self.snapshot = canon
            rec = self._record({k: v for k, v in doc.items() if k not in hist})
            if rec[1]:
                out.append(rec)
        return out

    def _json_lines(self, text: str, final: bool) -> list[Record]:
        lines = text.split("\n")
        if not final:
            lines = lines[:-1]  # the last line may still be being written
        out = []
        for i, line in enumerate(lines):
            key = (i, line)
            if not line.strip() or key in self.lines:
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                if i < len(lines) - 1 or final:
                    self.lines.add(key)  # a complete line that is not JSON: skip it for good
                continue
            self.lines.add(key)
            if isinstance(doc, dict):
                rec = self._record(doc)
                if rec[1]:
                    out.append(rec)
        return out

    @staticmethod
    def _record(doc: dict[str, Any]) -> Record:
        metrics = _flatten(doc)
        return _take_step(metrics), metrics

    def describe(self) -> str:
        return f"file {self.path.name}"
