"""`sweeps pause`: running trials park at a checkpoint, and `sweeps resume` continues them.

A pause drains the sweep (no new trials; lanes are released, warm on a service) and parks each
running trial at its first report that follows a persisted checkpoint: that report's epoch is
not logged and the worker is told to end (`Decision.CANCEL`, before it saves anything more).
The trial ends FAIL in Optuna, marked cancelled and parked (a finished trial cannot be
reopened), its MLflow run KILLED and tagged with the step it parked at; `resume` re-queues it
with the same params from that checkpoint (`recovery.requeue_cancelled`), so no epoch up to the
checkpoint runs again, and the curve in MLflow has each step once.

The trainer persists a checkpoint every `execution.checkpoint_every` epochs, at most one per
`execution.checkpoint_min_interval_s`. A trial waits for its next one; a trial whose code saves
none by then (or a sweep with checkpoints off) parks at once, from its last checkpoint or from
the start, and the notice says so. A trial at its last epoch finishes instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sweeps.contracts.records import TrialRecord

REASON = "paused (sweeps pause): running trials park at their checkpoints"


def park_now(
    step: int, checkpoint_step: int | None, last: int | None, waited: int | None, every: int
) -> bool:
    """Pure: whether a pausing trial parks at its report of `step`.

    `checkpoint_step`: its latest persisted checkpoint (None: none yet); `last`: its final
    step (None: unknown); `waited`: reports since a checkpoint came due (None: not yet);
    `every`: execution.checkpoint_every (0: the sweep saves none)."""
    if last is not None and step >= last:
        return False  # its last epoch: it completes rather than runs it again
    if checkpoint_step is not None and checkpoint_step >= step - 1:
        return True  # only this epoch runs again on resume
    if not every:
        return True  # nothing to wait for
    # A checkpoint came due and none came in a whole interval more (one report of slack: the
    # worker may have judged the interval a moment before this driver did): its code saves none.
    return waited is not None and waited > every + 1


def parked_line(number: int, step: int, checkpoint_step: int | None) -> str:
    """The notice (and the trial's error) when a pause parks a trial at its report of `step`."""
    if checkpoint_step is None:
        return f"paused: trial {number} parked at step {step} with no checkpoint; it starts over"
    if checkpoint_step < step - 1:
        return (
            f"paused: trial {number} parked at step {step}, its code saved no checkpoint since "
            f"step {checkpoint_step}; it resumes there"
        )
    return f"paused: trial {number} parked at its checkpoint (step {checkpoint_step})"


def ended_reason(parked: int, name: str) -> str:
    """The sweep's reason once its lanes are gone."""
    if not parked:
        return f"paused: no trial was running; sweeps resume {name} runs the rest of the budget"
    trials = "1 trial parked at its checkpoint" if parked == 1 else f"{parked} trials parked"
    if parked > 1:
        trials += " at their checkpoints"
    return f"paused: {trials}; sweeps resume {name}"


@dataclass
class Parking:
    """The trials a pause parks. `every` / `min_interval_s`: the trainer's checkpoint
    cadence (`TrainerSettings`)."""

    every: int
    min_interval_s: float
    asked_at: float | None = None
    parked: dict[int, int | None] = field(default_factory=dict)  # trial id -> checkpoint step
    # One trial at a time (the arbiter takes its lane, sweeps/driver/arbitration.py): trial id
    # -> when its park was asked. A pause (`request`) parks every running trial instead.
    trials: dict[int, float] = field(default_factory=dict)
    _due_from: dict[int, int] = field(default_factory=dict)  # trial id -> step a save came due

    def request(self, now: float) -> None:
        if self.asked_at is None:
            self.asked_at = now

    def request_trial(self, trial_id: int, now: float) -> None:
        """Park this one trial at its next report after a persisted checkpoint."""
        self.trials.setdefault(trial_id, now)

    def parks(self, rec: TrialRecord, step: int, last: int | None, now: float) -> bool:
        """Whether the trial's report of `step` parks it (once parked, every later one)."""
        if rec.trial_id in self.parked:
            return True
        asked = self.asked_at if self.asked_at is not None else self.trials.get(rec.trial_id)
        if asked is None:
            return False
        waited = None
        if now - asked >= self.min_interval_s:  # a checkpoint may be saved from here
            waited = step - self._due_from.setdefault(rec.trial_id, step) + 1
        if not park_now(step, rec.checkpoint_step, last, waited, self.every):
            return False
        self.parked[rec.trial_id] = rec.checkpoint_step
        return True
