"""Fakes for stepping the driver without Ray (as Ray Train's test_controller.py does with a dummy
worker group): an in-memory Optuna study, a channel the test feeds events into, a launcher whose
lanes end when the test says so, and a tracker that records what it was told."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import optuna
from conftest import make_spec

from sweeps.contracts.observers import ObserverManager
from sweeps.contracts.protocol import (
    Assignment,
    Decision,
    Finished,
    NextTrial,
    Report,
    TrialResult,
    check_answer,
    next_key,
    step_key,
)
from sweeps.contracts.records import TrialEnd
from sweeps.driver.loop import Driver
from sweeps.execution.lane import Lane, LaneShape
from sweeps.execution.pool import LanePool, RecyclePolicy, StartPolicy
from sweeps.search.study import open_study


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeChannel:
    shared = False  # a sweep's own broker (True: a service's)

    def __init__(self) -> None:
        self.inbox: list[Any] = []
        self.answers: dict[tuple[Any, ...], Any] = {}
        self.flushes = 0

    def push(self, *events: Any) -> None:
        self.inbox.extend(events)

    def poll(self, timeout: float) -> list[Any]:
        out, self.inbox = self.inbox, []
        return out

    def answer(self, key: tuple[Any, ...], value: Any) -> None:
        self.answers[key] = check_answer(key, value)

    def flush(self) -> None:
        self.flushes += 1


class FakeLauncher:
    def __init__(self) -> None:
        self.launched: list[Lane] = []

    def launch(self, lane: Lane) -> None:
        self.launched.append(lane)


@dataclass
class RecordingTracker:
    uri: str = "memory://"
    blocking_s: float = 0.0
    calls: list[tuple[str, Any]] = field(default_factory=list)
    ends: dict[int, TrialEnd] = field(default_factory=dict)
    closed_stale: list[str] = field(default_factory=list)

    def start_sweep(self, ctx: Any) -> None:
        ctx.experiment_id, ctx.parent_run_id = "1", "parent"
        self.calls.append(("start_sweep", None))

    def sweep_run(self, ctx: Any, timeout: float | None) -> bool:
        return ctx.parent_run_id is not None

    created: list[tuple[int, str]] = field(default_factory=list)

    def start_trial(self, ctx: Any, t: Any) -> None:
        self.calls.append(("start_trial", t.number))
        self.created.append((t.trial_id, f"run-{t.number}"))

    def created_runs(self) -> list[tuple[int, str]]:
        out, self.created = self.created, []
        return out

    def log_epoch(self, ctx: Any, t: Any, step: int, m: dict[str, float]) -> None:
        self.calls.append(("log_epoch", (t.number, step)))

    def log_metrics(self, ctx: Any, t: Any, step: int, m: dict[str, float]) -> None:
        self.calls.append(("log_metrics", (t.number, step, dict(m))))

    def log_bytes(self, ctx: Any, t: Any, name: str, data: bytes) -> None:
        self.calls.append(("log_bytes", (t.number, name, len(data))))

    def trial_restarted(self, ctx: Any, t: Any) -> None:
        self.calls.append(("trial_restarted", (t.number, t.restarts)))

    def end_trial(self, ctx: Any, t: Any, end: TrialEnd) -> None:
        self.ends[t.number] = end

    def end_sweep(self, ctx: Any, summary: Any) -> None:
        self.calls.append(("end_sweep", summary.state))

    def close_stale_run(self, run_id: str) -> None:
        self.closed_stale.append(run_id)

    def find_trial_run(self, ctx: Any, number: int) -> str | None:
        return None

    def log_artifacts(self, *a: Any, **kw: Any) -> None: ...

    def set_tags(self, *a: Any) -> None: ...

    def log_text(self, *a: Any) -> None: ...

    def log_run_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        self.calls.append(("log_run_metrics", (run_id, dict(metrics))))

    def flush(self) -> list[str]:
        return []

    def close(self) -> None: ...


class Harness:
    """A driver wired to fakes; `spec_fields` as for conftest.make_spec."""

    def __init__(
        self,
        study: Any = None,
        observers: list[Any] | None = None,
        cpus: float = math.inf,  # the cluster's CPUs, for how many lanes start at once
        **spec_fields: Any,
    ):
        fields = {"budget": {"trials": 3, "parallel": 1}, **spec_fields}
        self.spec = make_spec(**fields)
        storage = optuna.storages.InMemoryStorage()
        self.study = study or open_study(self.spec, storage)
        self.channel = FakeChannel()
        self.launcher = FakeLauncher()
        self.tracker = RecordingTracker()
        self.clock = Clock()
        r, e = self.spec.resources, self.spec.execution
        pool = LanePool(
            self.launcher,
            self.spec.name,
            LaneShape(r.workers, r.cpus_per_worker, r.gpus_per_worker, r.placement),
            RecyclePolicy(e.recycle_after_trials, e.recycle_rss_growth),
            starts=StartPolicy(cpus),
        )
        self.driver = Driver(
            self.spec,
            study=self.study,
            channel=self.channel,
            pool=pool,
            tracker=self.tracker,
            observers=ObserverManager(observers or []),
            storage_url="memory",
            install_signals=False,
            clock=self.clock,
        )
        self.seq: dict[str, int] = {}

    @property
    def lanes(self) -> list[Lane]:
        return self.launcher.launched

    def next(self, lane: Lane) -> Any:
        """The lane asks for its next trial; returns the answer."""
        seq = self.seq[lane.lane_id] = self.seq.get(lane.lane_id, 0) + 1
        self.channel.push(NextTrial(lane.lane_id, seq))
        self.driver.step(0)
        return self.channel.answers[next_key(lane.lane_id, seq)]

    def next_of_first_lane(self) -> Any:
        return self.next(self.lanes[0])

    def report(self, a: Assignment, lane: Lane, step: int, **metrics: float) -> Decision:
        self.channel.push(Report(lane.lane_id, a.seq, step, metrics))
        self.driver.step(0)
        return self.channel.answers[step_key(lane.lane_id, a.seq, step)]

    def finish(self, a: Assignment, lane: Lane, state: str = "complete", **metrics: float) -> None:
        result = TrialResult(state=state, metrics=metrics)  # type: ignore[arg-type]
        self.channel.push(Finished(lane.lane_id, a.seq, result))
        self.driver.step(0)

    def end_lane(self, lane: Lane, error: BaseException | None = None) -> None:
        """The lane's fit() returned (after a Stop) or died (with an error)."""
        lane.error = error
        lane.done.set()
        self.driver.step(0)

    def run_trial(self, lane: Lane, values: list[float]) -> Assignment:
        a = self.next(lane)
        assert isinstance(a, Assignment), a
        for i, v in enumerate(values, 1):
            self.report(a, lane, i, val_accuracy=v)
        self.finish(a, lane, val_accuracy=values[-1])
        return a

    def trial(self, number: int) -> optuna.trial.FrozenTrial:
        return self.study.get_trials(deepcopy=False)[number]
