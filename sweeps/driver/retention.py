"""Pure: which of a sweep's checkpoints its retention policy (`checkpoints:` in the spec) drops.

Determined's `save_experiment_best` / `save_trial_latest` is the model: the best K complete
trials keep their newest N checkpoints each, and nothing else stays. What a trial still needs is
never dropped: a trial that runs, waits in the queue (a retry, a re-queued or extended trial),
or is parked or cancelled and not yet re-queued (`sweeps resume` continues it) keeps its
checkpoints, and any checkpoint a live trial resumes from stays too. `sweeps/driver/retainer.py`
feeds this from the study and deletes what it returns."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# A held trial keeps at least this many newest checkpoints: the one before its latest is what a
# resume falls back to when the latest turns out torn.
HELD_KEEP = 2


@dataclass(frozen=True)
class Policy:
    keep_best_trials: int | None  # None: every complete trial keeps its checkpoints
    keep_latest_per_trial: int
    pruned: str  # "delete" | "keep"
    direction: str | None  # "minimize" | "maximize"; None: several objectives (keep all)


@dataclass(frozen=True)
class TrialCheckpoints:
    number: int
    state: str  # Optuna's state name: COMPLETE, PRUNED, FAIL, RUNNING, WAITING
    value: float | None  # its single objective value (COMPLETE only)
    checkpoints: Sequence[tuple[int, str]]  # (step, path) of each it wrote that may remain
    held: bool = False  # running, parked, paused, cancelled or retry-pending: it resumes
    needs: Sequence[str] = field(default_factory=tuple)  # checkpoints it starts from


def is_held(state: str, cancelled: bool, requeued: bool) -> bool:
    """Whether a trial will run on from its checkpoints: it runs or waits, or a cancel or a pause
    stopped it and nothing re-queued it yet (`sweeps resume` does)."""
    if state in ("RUNNING", "WAITING"):
        return True
    return state == "FAIL" and cancelled and not requeued


def best_numbers(trials: Iterable[TrialCheckpoints], policy: Policy) -> set[int] | None:
    """The complete trials that keep checkpoints (None: all of them)."""
    if policy.keep_best_trials is None or policy.direction is None:
        return None
    done = [t for t in trials if t.state == "COMPLETE" and t.value is not None]
    sign = -1.0 if policy.direction == "maximize" else 1.0
    done.sort(key=lambda t: (sign * float(t.value or 0.0), t.number))  # ties: the earlier
    return {t.number for t in done[: policy.keep_best_trials]}


def newest(checkpoints: Sequence[tuple[int, str]], n: int) -> set[str]:
    """The paths of the newest `n` checkpoints (by step; the later path breaks a tie)."""
    return {path for _, path in sorted(checkpoints, reverse=True)[:n]}


def kept_paths(t: TrialCheckpoints, best: set[int] | None, policy: Policy) -> set[str]:
    """The checkpoints of `t` the policy keeps, before what other trials need is added."""
    n = policy.keep_latest_per_trial
    if t.held:
        return newest(t.checkpoints, max(n, HELD_KEEP))
    if t.state == "COMPLETE":
        return newest(t.checkpoints, n) if best is None or t.number in best else set()
    if t.state == "PRUNED":
        return newest(t.checkpoints, n) if policy.pruned == "keep" else set()
    # Failed, and nothing resumes it: kept only while the sweep keeps every trial's best.
    return newest(t.checkpoints, n) if policy.keep_best_trials is None else set()


def to_delete(trials: Sequence[TrialCheckpoints], policy: Policy) -> list[str]:
    """The checkpoint paths to delete, in trial order; never one a held trial writes or any
    trial starts from."""
    best = best_numbers(trials, policy)
    needed = {p for t in trials if t.held for p in t.needs}  # an ended trial needs none
    needed |= fallbacks(trials, needed)
    out: list[str] = []
    for t in trials:
        keep = kept_paths(t, best, policy) | needed
        out += sorted({p for _, p in t.checkpoints} - keep)
    return out


def fallbacks(trials: Sequence[TrialCheckpoints], needed: set[str]) -> set[str]:
    """For each needed checkpoint, the newest one before it of the trial that wrote it: what a
    resume falls back to when the needed one turns out torn (sweeps/worker/ckpt_faults.py)."""
    out = set()
    for t in trials:
        for step, path in t.checkpoints:
            if path in needed:
                earlier = [(s, p) for s, p in t.checkpoints if s < step]
                out |= {max(earlier)[1]} if earlier else set()
    return out
