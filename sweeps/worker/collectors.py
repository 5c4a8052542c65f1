"""Metric collectors: read a script's metrics from what it prints or writes, as it runs.

Each collector is fed incrementally and hands back new records `(step | None, {name: value})`:
`feed(line)` for every line the script prints (stdout and stderr), `poll()` now and then while it
runs, `finish()` once after it exited. A step of None means "the next one". Collectors never
raise on half-written input: what cannot be parsed yet is read again on the next poll.

- `stdout`: Katib's default `name=value` format, or a custom regex; `epoch=`/`step=` on the same
  line gives the step.
- `file`: a JSON object (re-read when it changes; lists of numbers are per-step histories), a JSON
  array of objects, or JSON lines; `epoch`/`step`/`global_step` keys give the step.
- `hypertune`: what cloudml-hypertune writes to `CLOUD_ML_HP_METRIC_FILE`.
- `tensorboard`: scalar summaries of event files under the trial dir (tensorboard's reader).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
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


class Collector:
    """The interface; a collector only overrides what its source needs."""

    kind = ""

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


class StdoutCollector(Collector):
    kind = "stdout"

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


class HypertuneCollector(Collector):
    """cloudml-hypertune rewrites its file on every report, keeping the last 100 entries."""

    kind = "hypertune"
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


class TensorboardCollector(Collector):
    """Scalars of every event file under a folder; a run in a subfolder prefixes its tags."""

    kind = "tensorboard"

    def __init__(self, logdir: str | Path) -> None:
        self.logdir = str(logdir)
        self.last: dict[str, int] = {}
        self.mux: Any = None

    def poll(self) -> list[Record]:
        if not Path(self.logdir).is_dir():
            return []
        if self.mux is None:
            try:
                from tensorboard.backend.event_processing import plugin_event_multiplexer as pem
            except ImportError:
                raise RuntimeError(
                    "the tensorboard collector needs the tensorboard package: "
                    "pip install 'sweeps[tensorboard]'"
                ) from None
            # Legacy scalars (torch's SummaryWriter) and TF2 tensor scalars read alike.
            self.mux = pem.EventMultiplexer(tensor_size_guidance={"scalars": 0})
        from tensorboard.util import tensor_util

        self.mux.AddRunsFromDirectory(self.logdir)  # picks up runs created since
        self.mux.Reload()
        steps: dict[int, dict[str, float]] = {}
        for run, tags in self.mux.PluginRunToTagToContent("scalars").items():
            for tag in tags:
                name = tag if run == "." else f"{run}/{tag}"
                for ev in self.mux.Tensors(run, tag):
                    if ev.step <= self.last.get(name, -1):
                        continue
                    value = float(tensor_util.make_ndarray(ev.tensor_proto).item())
                    # float32 in the file: 0.6000000238 was written as 0.6.
                    steps.setdefault(ev.step, {})[name] = float(f"{value:.7g}")
                    self.last[name] = ev.step
        return sorted(steps.items())

    def describe(self) -> str:
        return "tensorboard scalars under the trial dir"


def make(
    settings: dict[str, Any], *, objective: str, trial_dir: str, hypertune_file: str
) -> Collector:
    """The collector `trainer.metrics` (as a dict) asks for."""
    kind = settings.get("collector", "stdout")
    if kind == "stdout":
        return StdoutCollector(objective, settings.get("regex"))
    if kind == "file":
        return FileCollector(Path(trial_dir) / (settings.get("path") or "metrics.json"))
    if kind == "hypertune":
        return HypertuneCollector(hypertune_file)
    if kind == "tensorboard":
        return TensorboardCollector(trial_dir)
    raise ValueError(f"unknown collector {kind!r}")
