"""`tensorboard`: scalar summaries of event files under the trial dir (tensorboard's reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweeps.common.extras import install_hint
from sweeps.worker.collectors.base import Collector, Place, Record


class TensorboardCollector(Collector):
    """Scalars of every event file under a folder; a run in a subfolder prefixes its tags."""

    kind = "tensorboard"

    @classmethod
    def from_settings(cls, settings: dict[str, Any], place: Place) -> TensorboardCollector:
        return cls(place.trial_dir)

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
                    + install_hint("tensorboard")
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
