"""A trial's own time limit and the retries of its transient failures, as pure rules.

`classify` reads a failed trial's error and names its cause; `should_retry` says whether the
spec's `retries` runs its params again; `retry_attrs` is what the retry is queued with (its
attempt number and the checkpoint it starts from, as a resumed sweep queues a cancelled trial);
`overdue` finds the running trials past `budget.trial_timeout_s`. The trial book applies them.

A retry is a new Optuna trial (a finished trial cannot be reopened) and so a run of its own in
MLflow: each attempt keeps its own state, log and error, and the retry's run is tagged with its
attempt and the trial it retries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from sweeps.common import names
from sweeps.contracts.records import TrialRecord
from sweeps.spec.retries import RETRY_CAUSES

CAUSES = RETRY_CAUSES  # what `classify` names, and what `retries.on` may list
TIMED_OUT = "timed out"
GRACE_S = 30.0  # how long a timed-out trial may take to reach its next report before it fails

_OOM = re.compile(
    r"OutOfMemoryError|out of memory|\bOOM\b|killed due to (the node running )?low on memory"
    r"|memory (usage|limit) (exceeded|threshold)",
    re.IGNORECASE,
)
_LOST = re.compile(
    r"^worker group (lost|failed)|lane ended while the trial ran|ActorDiedError|RayActorError"
    r"|WorkerCrashedError|NodeDiedError|node .*(died|was lost)",
    re.IGNORECASE,
)
_SIGNAL = re.compile(r"was killed by SIG[A-Z]+|exited with code (1[3-9][0-9]|2[0-5][0-9])")


def classify(error: str) -> str:
    """Pure: the cause of a trial's failure, one of CAUSES. Memory first: a worker the OOM
    killer took is also a lost worker, and the memory is what to fix."""
    if error.startswith(TIMED_OUT):
        return "timeout"
    if _OOM.search(error):
        return "oom"
    if _LOST.search(error):
        return "worker_lost"
    if _SIGNAL.search(error):
        return "signal"  # a program the OS stopped (exit 128+N from a shell is signal N too)
    return "exception"


def should_retry(cause: str, attempt: int, max_retries: int, on: Iterable[str]) -> bool:
    """Pure: whether attempt `attempt` (1 for the first) that failed of `cause` runs again."""
    return cause in set(on) and attempt <= max_retries


def may_run(state: str, ends_as: str) -> bool:
    """Pure: whether a queued retry runs in a sweep in `state`: while it runs, and while it
    drains because its budget is spent (the retry's trial was counted), not once it fails, is
    stopped or is cancelled."""
    return state == "running" or (state == "draining" and ends_as == "finished")


def timed_out_error(limit_s: float) -> str:
    return f"{TIMED_OUT} (budget.trial_timeout_s={limit_s:g})"


def overdue(recs: Iterable[TrialRecord], now: float, limit_s: float | None) -> list[TrialRecord]:
    """Pure: the running trials past their time limit, not yet marked timed out. Each attempt
    has the whole limit: its clock starts when a lane takes it."""
    if limit_s is None:
        return []
    return [r for r in recs if r.failure_cause != "timeout" and now - r.assigned_at > limit_s]


def stuck(recs: Iterable[TrialRecord], now: float, limit_s: float | None) -> list[TrialRecord]:
    """Pure: timed-out trials that reached no report in GRACE_S since: they fail now, and
    their lane is left to end the code when it returns."""
    if limit_s is None:
        return []
    late = limit_s + GRACE_S
    return [r for r in recs if r.failure_cause == "timeout" and now - r.assigned_at > late]


def retry_attrs(rec: TrialRecord) -> dict[str, Any]:
    """Pure: the user attributes a retry of `rec` is queued with: its attempt number, the
    first trial of its params, and the checkpoint it continues from (when it has one)."""
    attrs: dict[str, Any] = {
        names.REQUEUED_FROM: rec.number,
        names.ATTEMPT: rec.attempt + 1,
        names.RETRY_OF: rec.retry_of if rec.retry_of is not None else rec.number,
    }
    checkpoint = rec.checkpoint or rec.resume_from  # a retry killed before its first checkpoint
    if checkpoint:
        attrs[names.RESUME_CHECKPOINT] = checkpoint
        attrs[names.RESUMED_FROM_TRIAL] = rec.number
        if rec.checkpoint_step is not None:
            attrs[names.RESUME_STEP] = rec.checkpoint_step
    if rec.extends is not None:  # an `extend` trial's retry trains to the same epochs
        attrs[names.EXTENDS], attrs[names.EXTENDS_RUN] = rec.extends, rec.extends_run
        attrs[names.EXTEND_EPOCHS] = rec.config.get("epochs")
    return attrs


def retried_line(rec: TrialRecord, cause: str, max_retries: int) -> str:
    """The notice when a trial's params run again."""
    return (
        f"trial {rec.number} failed ({cause}); retrying its params "
        f"(attempt {rec.attempt + 1} of {max_retries + 1})"
    )
