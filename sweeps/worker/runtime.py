"""What training code calls on a Ray Train worker: report, get_checkpoint, context, TrialPruned.

The built-in loop (`trainer.loop`) uses exactly this API, so user code ("bring your own") and
built-in trials look the same to the driver and in MLflow. Every call is lockstep across ranks:
all ranks call `report` once per epoch and get the same decision.
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sweeps.common.errors import ProtocolError
from sweeps.common.quietlogs import is_ray_line
from sweeps.contracts.protocol import Decision
from sweeps.worker import ckpt_faults


class TrialPruned(Exception):  # noqa: N818 - the name users know from Optuna
    """Raised by :func:`report` on every rank when the pruner stops the trial."""


@dataclass
class TrialContext:
    rank: int
    world_size: int
    local_rank: int
    device: Any
    data_dir: str | None
    trial_number: int
    seed: int
    params: dict[str, Any]
    lane_id: str = ""
    sweep: str = ""  # the sweep's name: a warm lane runs several sweeps' trials
    seq: int = 0
    broker: Any = None
    checkpoint_every: int = 1
    # Persist at most this often: on small trials a checkpoint costs more than redoing the
    # epochs it would save, and a lost worker then costs at most this much work.
    checkpoint_min_interval_s: float = 0.0
    step: int = 0
    restarts: int = 0
    log_model: bool = True  # the sweep logs models (tracking.log_models)
    # tracking.model: best: the metric (and direction) whose best report's weights the
    # built-in trainer keeps as the model; None: the weights the trial ends with.
    model_metric: str | None = None
    model_direction: str = "maximize"
    prunes: bool = True  # a report's answer may prune the trial (the sweep has a pruner)
    resume_from: Any = None  # a ray.train.Checkpoint of this trial, after a restart
    storage_scheme: str = ""  # put before a persisted checkpoint's path ("gs://"; "" locally)
    log_buf: io.StringIO | None = None  # what the trial printed, shipped each epoch
    log_sent: int = 0  # how much of log_buf has been shipped
    started: float = field(default_factory=time.monotonic)
    last_ckpt: float | None = None  # when a checkpoint was last persisted (monotonic)
    # One-worker trials with no pruner read each report's answer at the next report.
    pending_answer: tuple[int, Any] | None = None
    resume_dir: str | None = None  # the checkpoint get_checkpoint() unpacked
    artifact_bytes: int = 0  # what sweeps.log_artifact has sent so far
    persisting: bool = False  # _persist's own ray.train calls: the lane's session answers them


# Thread-local: in Ray Train's local mode (num_workers=0) lanes are threads of one process.
_LOCAL = threading.local()

META = "sweeps_meta.json"


def context() -> TrialContext:
    """Rank, world size, local rank, device, data dir and trial number of the running trial."""
    ctx = getattr(_LOCAL, "ctx", None)
    if ctx is None:
        raise RuntimeError("context() is only available inside a trial on a worker")
    return ctx


def _set_context(ctx: TrialContext | None) -> None:
    _LOCAL.ctx = ctx


def checkpoint_due() -> bool:
    """Whether the next `report` will persist a checkpoint: lets training code skip saving one
    that would be thrown away."""
    ctx = context()
    nxt = ctx.step + 1
    if not ctx.checkpoint_every or nxt % ctx.checkpoint_every:
        return False
    if ctx.last_ckpt is None:
        ctx.last_ckpt = ctx.started
    last = ctx.last_ckpt
    return time.monotonic() - last >= ctx.checkpoint_min_interval_s


def _check_finite(metrics: dict[str, float], step: int) -> None:
    for k, v in metrics.items():
        if not math.isfinite(v):
            raise FloatingPointError(f"metric '{k}' is {v} at step {step}: stopped early")


def _act_on(decision: Decision, step: int) -> None:
    """Stop the trial where the driver's answer to the report at `step` says so."""
    if decision is Decision.PRUNE:
        raise TrialPruned(f"pruned at step {step}")
    if decision is Decision.CANCEL:
        raise TrialPruned(f"cancelled at step {step}")
    if decision is not Decision.CONTINUE:
        raise ProtocolError(f"report at step {step} got {decision!r}, not a Decision")


def report(metrics: dict[str, Any], *, checkpoint_dir: str | None = None) -> None:
    """Report one epoch's metrics (every rank, once per epoch).

    Pass `checkpoint_dir` (a folder you just saved into) on rank 0 to make the epoch resumable;
    other ranks may pass None. Rank 0's metrics go to the driver, which records them and asks
    the pruner; every rank gets the same answer and raises :class:`TrialPruned` together. A
    non-finite metric fails the trial at once instead of training a diverged model to the end.
    """
    import ray

    ctx = context()
    ctx.step += 1
    clean = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
    _check_finite(clean, ctx.step)
    ship_output(ctx)
    ctx.step -= 1
    due = checkpoint_due()
    ctx.step += 1
    persist = due and checkpoint_dir is not None
    if ctx.broker is not None:
        step, sent = ctx.step, clean if ctx.rank == 0 else None
        # An answer still out is read before this report goes: the broker (an async actor) may
        # run two reports in flight in either order, and the driver logs them as they come.
        (step_before, before), ctx.pending_answer = ctx.pending_answer or (0, None), None
        if before is not None:
            _act_on(ray.get(before)[0], step_before)
        ref = ctx.broker.report.remote(ctx.lane_id, ctx.seq, step, sent, persist)
        if ctx.world_size == 1 and not ctx.prunes and not persist:
            # No pruner, and no other rank to agree with on a checkpoint: the answer can only
            # be "cancelled", and may come an epoch late. This epoch's is read at the next
            # report, while the driver records it; a one-report trial of ~50 ms waited ~20 ms.
            ctx.pending_answer = (step, ref)
        else:
            # An epoch that persists a checkpoint waits: the driver records each checkpoint
            # before the next one exists. Ray Train keeps only the newest few, and a worker
            # running ahead would leave a resumed sweep a deleted one to continue from.
            decision, persist = ray.get(ref)
            _act_on(decision, step)
    # Only epochs with something to save pay for Ray Train's report (a barrier + upload); rank
    # 0 decides, so ranks that pass no directory still join the barrier.
    if persist and _persist(ctx, clean, checkpoint_dir):
        ctx.last_ckpt = time.monotonic()  # one not written: the next report tries again


def clean_output(text: str) -> str:
    """Pure: a trial's output without Ray's own log lines."""
    return "".join(line for line in text.splitlines(True) if not is_ray_line(line))


def ship_output(ctx: TrialContext, final: bool = False) -> None:
    """Every rank sends what its trial printed since the last epoch, for `sweeps logs -f` and
    the run's log. The last call of a trial waits for delivery, so it precedes the trial's end."""
    buf = ctx.log_buf
    if buf is None or ctx.broker is None:
        return
    text = buf.getvalue()
    start = ctx.log_sent
    if len(text) <= start:
        return
    ctx.log_sent = len(text)
    part = clean_output(text[start:])
    if not part:
        return
    ref = ctx.broker.log.remote(ctx.lane_id, ctx.seq, part, ctx.rank)
    if final:
        import ray

        ray.get(ref)


def _persist(ctx: TrialContext, metrics: dict[str, float], checkpoint_dir: str | None) -> bool:
    """Hand the epoch's checkpoint to Ray Train (a barrier: every rank calls it). False: rank
    0's write failed, and the trial goes on without it (`ckpt_faults.write_failed`)."""
    import ray.train

    ckpt = None
    if checkpoint_dir is not None and ctx.rank == 0:
        # Its files and sizes: a resume tells a torn checkpoint from a whole one.
        meta = {"trial_number": ctx.trial_number, "seq": ctx.seq, "step": ctx.step}
        meta["files"] = ckpt_faults.manifest(checkpoint_dir)
        with open(os.path.join(checkpoint_dir, META), "w") as f:
            json.dump(meta, f)
        ckpt = ray.train.Checkpoint.from_directory(checkpoint_dir)
    sent = {**metrics, "trial_number": ctx.trial_number, "step": ctx.step}
    name = ckpt_faults.checkpoint_name(
        ctx.sweep, ctx.lane_id, ctx.trial_number, ctx.step, ctx.restarts
    )
    ctx.persisting = True
    try:
        ray.train.report(sent, checkpoint=ckpt, checkpoint_dir_name=name)
        # In Ray Train V2 a synchronous report has uploaded the checkpoint when it returns, and
        # get_checkpoint() is now that persisted copy. Its path goes to the driver: a restarted
        # worker group or a resumed sweep continues from it, registered by Ray Train or not.
        persisted = ray.train.get_checkpoint() if ckpt is not None else None
    except OSError as e:  # a full disk, a quota: costs this checkpoint only
        if ckpt is None:
            raise
        ckpt_faults.write_failed(sent, name, ctx.step, e)
        return False
    finally:
        ctx.persisting = False
    if persisted is not None and ctx.broker is not None:
        uri = ctx.storage_scheme + persisted.path
        # Waited for: a worker killed right after this report still leaves its checkpoint
        # with the broker, so a retry resumes from it, not from the one before.
        ray.get(ctx.broker.checkpointed.remote(ctx.lane_id, ctx.seq, ctx.step, uri))
    return True


def get_checkpoint() -> str | None:
    """The directory to resume this trial from after a lost worker, or None to start fresh."""
    ctx = context()
    ckpt = ctx.resume_from
    if ckpt is None:
        return None
    local = ctx.resume_dir
    if local is None:
        # Every resume comes here (a restart, a retry, a parked or re-queued trial): a torn
        # checkpoint falls back to the one before it, in one place.
        ckpt, lines = ckpt_faults.intact(ckpt)
        ckpt_faults.say(lines)
        ctx.resume_from = ckpt
        if ckpt is None:
            return None
        local = tempfile.mkdtemp(prefix=f"sweeps-resume-{ctx.trial_number}-")
        ckpt.to_directory(local)
        ctx.resume_dir = local
    with open(os.path.join(local, META)) as f:
        ctx.step = int(json.load(f)["step"])
    return local
