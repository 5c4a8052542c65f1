"""The trials in flight, keyed by (lane, seq), and what happens to one while it runs: restarts,
its output, what its code logs, its checkpoints. The trial book adds and removes entries; the
driver asks this table which trials run where."""

from __future__ import annotations

from collections.abc import Iterator

from sweeps.common import names
from sweeps.contracts.observers import ObserverManager, Tracker
from sweeps.contracts.protocol import UserArtifact, UserMetrics
from sweeps.contracts.records import SweepContext, TrialRecord
from sweeps.driver import trial_logs
from sweeps.search.trial_attrs import PendingAttrs
from sweeps.worker import ckpt_faults

TrialKey = tuple[str, int]  # (lane, seq): a running trial


class RunningTrials:
    def __init__(
        self,
        ctx: SweepContext,
        tracker: Tracker,
        observers: ObserverManager,
        attrs: PendingAttrs,
    ) -> None:
        self.ctx, self.tracker, self.observers, self.attrs = ctx, tracker, observers, attrs
        self._trials: dict[TrialKey, TrialRecord] = {}

    # ----- the table --------------------------------------------------------------------------
    def get(self, key: TrialKey) -> TrialRecord | None:
        return self._trials.get(key)

    def add(self, key: TrialKey, rec: TrialRecord) -> None:
        self._trials[key] = rec

    def pop(self, key: TrialKey) -> TrialRecord | None:
        return self._trials.pop(key, None)

    def __len__(self) -> int:
        return len(self._trials)

    def __bool__(self) -> bool:
        return bool(self._trials)

    def keys(self) -> list[TrialKey]:
        return list(self._trials)

    def records(self) -> Iterator[TrialRecord]:
        return iter(list(self._trials.values()))

    def on_lane(self, lane_id: str) -> list[TrialKey]:
        """The running trials of one lane."""
        return [k for k in self._trials if k[0] == lane_id]

    def longest_s(self, now: float) -> float:
        """How long the longest running trial has run so far."""
        return max((now - r.assigned_at for r in self._trials.values()), default=0.0)

    # ----- while a trial runs -----------------------------------------------------------------
    def restarted(self, key: TrialKey, restarts: int) -> None:
        rec = self._trials.get(key)
        if rec is None:
            return
        rec.restarts = restarts
        self.attrs.write(rec.trial_id, {names.RESTARTS: restarts})
        self.tracker.trial_restarted(self.ctx, rec)
        self.observers.trial_restart(self.ctx, rec)

    def log(self, key: TrialKey, text: str, rank: int = 0) -> None:
        """A rank's output: into the live log file and the run's log, each line prefixed with
        its rank when the trial has several."""
        rec = self._trials.get(key)
        if rec is None:
            return
        for line in ckpt_faults.terminal_lines(text):  # a checkpoint lost or passed over
            self.observers.notice(self.ctx, f"trial {rec.number}: {line}")
        if rec.workers > 1:
            text = "".join(f"[rank {rank}] {line}" for line in text.splitlines(True))
        rec.log += text
        trial_logs.append(self.ctx.spec.name, rec.number, text)

    def user_logged(self, ev: UserMetrics | UserArtifact) -> None:
        """What training code logged with sweeps.log / log_artifact / log_figure."""
        rec = self._trials.get(ev.key)
        if rec is None:
            return
        if isinstance(ev, UserMetrics):
            self.tracker.log_metrics(self.ctx, rec, ev.step, ev.metrics)
        else:
            self.tracker.log_bytes(self.ctx, rec, ev.name, ev.data)

    def checkpointed(self, key: TrialKey, step: int, path: str) -> None:
        """Remember the trial's latest persisted checkpoint in Optuna: if this driver dies, a
        resumed sweep continues the trial from there."""
        rec = self._trials.get(key)
        if rec is not None:
            rec.checkpoint, rec.checkpoint_step = path, step
            attrs = {names.CHECKPOINT: path, names.CHECKPOINT_STEP: step}
            self.attrs.write(rec.trial_id, attrs)  # now: a resumed sweep starts from it
