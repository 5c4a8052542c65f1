"""Ray Train's private names, in one place, pinned to the Ray release they were tested with.

A lane's `fit()` would have Ray Train spawn a controller actor: a new process (Ray Train gives it
a runtime env of its own, so no pre-started worker process can take it) that imports Ray Train
again before it asks for a worker: 3.6 s to spawn and 2.6 s to initialize on 2 cores, all on the
path to a lane's first trial. The lane host is a process with Ray Train imported already, so it
runs the controller itself. `TrainController` is a plain class whose `run()` is a coroutine; the
actor around it adds nothing a lane uses (its SIGINT handler needs a main thread, which a lane
host's call never has; nobody calls `abort()` on a lane, the pool stops lanes through the broker).

Helper actors Ray Train starts for every run are left out where they have nothing to do; each
is a process spawned while the lane's worker spawns:
- the placement-group cleaner, which removes a worker group's placement group should the
  controller's actor die without doing it. Here the controller is the lane host itself, the
  placement group's creator, and Ray deletes a placement group with its creator (without the
  cleaner a lane's first request came at 9.45 s, with it 10.11 s: means of 6 sweeps each way);
- the dataset manager, when the run has no Ray Datasets (a lane never has);
- the autoscaling coordinator, on a Ray that `ensure_ray` started in-process: no autoscaler
  reads its requests there. Its first request waits for the actor to spawn (~1 s on 2 cores)
  on a fresh cluster, before the controller asks for a worker.

Only on the tested Ray with every name in place (`private_path_missing`); elsewhere, or with
SWEEPS_RAY_PATH=public, the host calls the public `TorchTrainer.fit()`: same trials and results.

On a lane's worker, `trial_session` gives each trial Ray Train's public functions of its own
(`ray.train.report`, `get_checkpoint`, ...), which would otherwise talk to the lane's session.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import re
import shutil
from collections.abc import Iterator
from typing import Any

from sweeps.worker import runtime

# The Ray releases whose private names this module uses (>= first, < second); pyproject pins the
# same range and tests/test_adapters.py checks the installed one, so an upgrade fails there.
RAY_TESTED = ("2.60", "2.61")

# Set by `ensure_ray` for a Ray of the process's own (its processes inherit it).
NO_AUTOSCALER_ENV = "SWEEPS_NO_AUTOSCALER"


def untested_release() -> str | None:
    """Why this Ray is not the release our private names were tested with (None: it is)."""
    import ray

    have = tuple(int(x) for x in re.findall(r"\d+", ray.__version__)[:2])
    low, high = (tuple(int(x) for x in v.split(".")) for v in RAY_TESTED)
    if low <= have < high:
        return None
    return f"tested with ray >={RAY_TESTED[0]},<{RAY_TESTED[1]}; this worker has {ray.__version__}"


@functools.cache
def private_path_missing() -> str | None:
    """Why the lane host cannot run controllers in its own process here (None: it can): an
    untested Ray, or a private name this module uses is gone. Checks every name, so an upgrade
    that moved one lands on the public path instead of failing lanes mid-start."""
    import inspect

    untested = untested_release()
    if untested:
        return f"Ray Train's private names are {untested}"
    try:
        from ray.train.torch import TorchTrainer
        from ray.train.v2._internal.execution.controller import TrainController
        from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy

        for owner, name in [(TorchTrainer, "_create_default_callbacks"),
                            (TorchTrainer, "_initialize_and_run_controller"),
                            (FixedScalingPolicy, "after_controller_start"),
                            (FixedScalingPolicy, "_maybe_send_resource_request"),
                            (TrainController, "get_result")]:  # fmt: skip
            if not callable(getattr(owner, name, None)):
                return f"Ray Train's {owner.__name__}.{name} is gone"
        if not inspect.iscoroutinefunction(TrainController.run):
            return "Ray Train's TrainController.run is no longer a coroutine"
        in_process_trainer_class()
        _logging_names()
    except (ImportError, AttributeError) as e:
        return f"a private name of Ray Train is gone ({type(e).__name__}: {e})"
    return None


@functools.cache
def in_process_trainer_class() -> type:
    """TorchTrainer whose controller runs in the calling process, in a fresh event loop of the
    calling thread (the lane host runs each lane's fit() in a thread of its own)."""
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks.datasets import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import (
        PlacementGroupCleanerCallback,
    )
    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy

    class NoAutoscalerPolicy(FixedScalingPolicy):  # type: ignore[misc, valid-type]
        """Fixed-size worker group that never asks the autoscaling coordinator for nodes."""

        def after_controller_start(self, train_run_context: Any) -> None:
            pass

        def _maybe_send_resource_request(self) -> None:
            pass

    class InProcessTorchTrainer(TorchTrainer):  # type: ignore[misc, valid-type]
        def _create_default_callbacks(self) -> list[Any]:
            callbacks = super()._create_default_callbacks()
            unused: tuple[type, ...] = (PlacementGroupCleanerCallback,)
            if not self.datasets:
                unused += (DatasetsCallback,)
            return [c for c in callbacks if not isinstance(c, unused)]

        def _initialize_and_run_controller(self, **controller_init_kwargs: Any) -> Any:
            import asyncio

            policy = controller_init_kwargs["scaling_policy"]
            if os.environ.get(NO_AUTOSCALER_ENV) == "1" and type(policy) is FixedScalingPolicy:
                controller_init_kwargs["scaling_policy"] = NoAutoscalerPolicy(policy.scaling_config)
            controller = TrainController(**controller_init_kwargs)
            asyncio.run(controller.run())
            return controller.get_result()

    return InProcessTorchTrainer


# The lane whose controller emits a record, for the host's log files (set by the host's thread).
LANE_NAME: contextvars.ContextVar[str] = contextvars.ContextVar("sweeps_lane", default="")


class _LaneFilter(logging.Filter):
    """Ray Train's per-run filter names one run for the whole process: in a host of several
    lanes every record carried the name of the lane that started last."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.run_name = LANE_NAME.get()
        record.component = "controller"
        return True


def _logging_names() -> tuple[Any, ...]:
    from ray._common.filters import CoreContextFilter
    from ray._common.formatters import JSONFormatter
    from ray._private.log import PlainRayHandler
    from ray.train.v2._internal.constants import ENABLE_CONTROLLER_STRUCTURED_LOGGING_ENV_VAR
    from ray.train.v2._internal.logging.logging import SessionFileHandler, TrainLogLevelFilter

    return (CoreContextFilter, JSONFormatter, PlainRayHandler,
            ENABLE_CONTROLLER_STRUCTURED_LOGGING_ENV_VAR, SessionFileHandler,
            TrainLogLevelFilter)  # fmt: skip


def configure_host_logging() -> None:
    """Set up the `ray.train` logger once for a process that runs several controllers (the
    lane host), and keep each controller from setting it up again.

    Each `TrainController` calls `logging.config.dictConfig` as it is made. Two lanes starting
    together in one host deadlocked on it: one lane's dictConfig holds logging's module lock and
    waits for the lock of a file handler, which the other lane holds while that handler opens
    its file for its first record (and registering the new handler takes the module lock). Both
    lanes hung before a worker started: a 4-trial sweep in CI waited 600 s for its first trial,
    its host's controller log one empty file. Call it before any lane runs, on one thread.
    Only the private path needs it: a public fit()'s controller is an actor of its own."""
    import logging.config

    import ray

    CoreContextFilter, JSONFormatter, PlainRayHandler, structured_env, SessionFileHandler, \
        TrainLogLevelFilter = _logging_names()  # fmt: skip
    os.environ[structured_env] = "0"
    worker = ray.get_runtime_context().get_worker_id()

    def log_file(kind: str, *filters: str) -> dict[str, Any]:
        name = f"ray-train-{kind}-controller-{worker}.log"  # Ray Train's own names
        return {"()": SessionFileHandler, "filename": name, "formatter": "json",
                "filters": ["core", "lane", *filters]}  # fmt: skip

    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"json": {"()": JSONFormatter}},
            "filters": {
                "core": {"()": CoreContextFilter},
                "lane": {"()": _LaneFilter},
                "level": {"()": TrainLogLevelFilter, "log_level": "INFO"},
            },
            "handlers": {
                "sys": log_file("sys"),
                "app": log_file("app", "level"),
                "console": {"()": PlainRayHandler, "filters": ["level"]},
            },
            "loggers": {
                "ray.train": {
                    "level": "DEBUG",
                    "handlers": ["sys", "app", "console"],
                    "propagate": False,
                }
            },
        }
    )
    for handler in logging.getLogger("ray.train").handlers:
        if isinstance(handler, SessionFileHandler):
            handler.get_log_file_path()  # opens it now: no record opens it under its lock


def actor_classes() -> dict[str, str]:
    """Actor id -> class name of every actor the cluster has made, dead ones included (the
    GCS actor table). Ray's public state API needs the dashboard, which sweeps does not start."""
    import ray._private.state

    return {aid: a["ActorClassName"] for aid, a in ray._private.state.actors().items()}


# ----- Ray Train's own functions inside a trial ---------------------------------------------
def _unsupported(call: str, why: str) -> ValueError:
    return ValueError(f"{call} cannot be honoured inside a sweeps trial: {why}")


class _TrialSession:
    """The trial's side of Ray Train's TrainFnUtils (`trial_session` makes the subclass): reports
    go through `sweeps.worker.runtime.report` (Optuna, MLflow, the pruner's answer, the
    checkpoint record) and `get_checkpoint` is this trial's. Runtime's own `ray.train.report`
    (the upload of a checkpoint) and everything after the trial reach the lane's session."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner  # the lane's own session
        self.through = False  # runtime is persisting: its calls go to the lane's session
        self.closed = False  # the trial ended: everything goes to the lane's session
        self.pending: str | None = None  # this rank's checkpoint dir of the report in flight
        self.upload: dict[str, Any] = {}  # the user's upload options for that report
        self.latest: Any = None  # the newest checkpoint this rank persisted in this trial
        self.resumed: Any = None  # the trial's resume checkpoint, once unpacked
        self.reported: list[Any] = []
        # On a Ray the routing was not tested with, only a trial's own ray.train calls fail.
        untested = untested_release()
        why = "ray.train calls of a trial are routed through Ray Train's TrainFnUtils"
        self.refusal = f"{why}, {untested}" if untested else None

    def _refuse(self) -> None:
        if self.refusal and not (self.closed or self.through or runtime.context().persisting):
            raise RuntimeError(self.refusal)

    def report(self, metrics: dict[str, Any], checkpoint: Any = None,
               checkpoint_dir_name: str | None = None, checkpoint_upload_mode: Any = None,
               delete_local_checkpoint_after_upload: bool | None = None,
               checkpoint_upload_fn: Any = None, validation: Any = False) -> None:  # fmt: skip
        from ray.train.v2.api.report_config import CheckpointUploadMode

        self._refuse()
        mode = checkpoint_upload_mode or CheckpointUploadMode.SYNC
        if self.closed:
            return self.inner.report(metrics, checkpoint, checkpoint_dir_name, mode,
                                     delete_local_checkpoint_after_upload,
                                     checkpoint_upload_fn, validation)  # fmt: skip
        if self.through or runtime.context().persisting:
            # runtime._persist: the upload (with the user's options when they reported it)
            return self._upload(metrics, checkpoint, checkpoint_dir_name)
        if validation:
            why = "a lane's trainer has no validation_config (validate in train_func)"
            raise _unsupported("ray.train.report(validation=...)", why)
        if checkpoint is not None and mode == CheckpointUploadMode.NO_UPLOAD:
            why = "the trial's checkpoints live in the sweep's storage; report a local folder"
            raise _unsupported("checkpoint_upload_mode=NO_UPLOAD", why)
        delete = bool(delete_local_checkpoint_after_upload)
        self._report(metrics, checkpoint, delete, checkpoint_upload_fn)
        return None

    def _report(self, metrics: dict[str, Any], checkpoint: Any, delete: bool, fn: Any) -> None:
        for k, v in metrics.items():
            if type(v).__module__.startswith("torch"):  # as Ray Train refuses them
                raise ValueError(f"metric '{k}' is a torch tensor: report a number (.item())")
        clean = {k: float(v) if _is_number(v) else v for k, v in metrics.items()}
        ctx = runtime.context()
        # The code passes a checkpoint when it wants one kept, as under Ray Train: the sweep's
        # interval between checkpoints thins sweeps.report's, not these.
        if ctx.checkpoint_every:
            ctx.checkpoint_every, ctx.checkpoint_min_interval_s = 1, 0.0
        self.upload = {"delete_local_checkpoint_after_upload": delete, "checkpoint_upload_fn": fn}
        self.through = True
        try:
            if checkpoint is None:
                runtime.report(clean)
                return
            with checkpoint.as_directory() as d:
                self.pending = d
                runtime.report(clean, checkpoint_dir=d)
                if delete and d == checkpoint.path:  # not uploaded (rank 0 passed none): as Ray
                    shutil.rmtree(d, ignore_errors=True)
        finally:
            self.through, self.pending, self.upload = False, None, {}

    def _upload(self, metrics: dict[str, Any], checkpoint: Any, name: str | None) -> None:
        from ray.train import Checkpoint
        from ray.train.v2.api.report_config import CheckpointUploadMode
        from ray.train.v2.api.reported_checkpoint import ReportedCheckpoint
        from ray.train.v2.api.reported_checkpoint import ReportedCheckpointStatus as Status

        # Runtime hands over rank 0's folder; other ranks' files merge into the same
        # checkpoint, as Ray Train merges every rank's.
        if checkpoint is None and self.pending is not None:
            checkpoint = Checkpoint.from_directory(self.pending)
        self.inner.report(metrics, checkpoint, name, CheckpointUploadMode.SYNC, **self.upload)
        if checkpoint is not None:  # as under Ray Train: the rank's latest is this one
            self.latest = self.inner.get_checkpoint()
            self.reported.append(ReportedCheckpoint(self.latest, metrics, Status.COMMITTED))

    def get_checkpoint(self) -> Any:
        from ray.train import Checkpoint

        self._refuse()
        if self.closed or self.through or runtime.context().persisting:
            return self.inner.get_checkpoint()
        if self.latest is not None:
            return self.latest
        if self.resumed is None and (local := runtime.get_checkpoint()) is not None:
            self.resumed = Checkpoint.from_directory(local)  # None: nothing intact to resume
        return self.resumed

    def get_all_reported_checkpoints(self, *args: Any, **kwargs: Any) -> list[Any]:
        self._refuse()
        if self.closed:
            return list(self.inner.get_all_reported_checkpoints(*args, **kwargs))
        return list(self.reported)  # this trial's, as this rank persisted them

    def get_dataset_shard(self, dataset_info: Any) -> Any:
        if self.closed:
            return self.inner.get_dataset_shard(dataset_info)
        why = "a sweep passes no Ray Datasets to its trials; load data in train_func"
        raise _unsupported("ray.train.get_dataset_shard", why)

    def get_context(self) -> Any:
        return self.inner.get_context()  # the lane's ranks are the trial's

    def get_preemption_info(self) -> Any:
        return self.inner.get_preemption_info()

    def is_distributed(self) -> bool:
        return bool(self.inner.is_distributed())

    def barrier(self) -> None:
        return self.inner.barrier()

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        return self.inner.broadcast_from_rank_zero(data)


def _is_number(v: Any) -> bool:
    import numbers

    return isinstance(v, numbers.Real) and not isinstance(v, bool)


@functools.cache
def _session_class() -> type:
    from ray.train.v2._internal.execution.train_fn_utils import TrainFnUtils

    return type("TrialFnUtils", (_TrialSession, TrainFnUtils), {})


@contextlib.contextmanager
def trial_session() -> Iterator[None]:
    """For one trial on this worker: Ray Train's public functions (`ray.train.report`,
    `get_checkpoint`, `get_context`, `ray.train.torch.prepare_*`, ...) serve the trial instead
    of the lane's long-lived session. Ray Train V2 dispatches every one of them through the
    TrainFnUtils installed on the worker, whatever name the caller imported. Inert until the
    trial's code calls one. On a Ray without that private dispatch nothing can be routed: the
    trial's log says so in one line, and the trial runs on (sweeps.report is unaffected)."""
    import sys

    try:
        from ray.train.v2._internal.execution import train_fn_utils as tfu

        make = _session_class()
    except (ImportError, AttributeError) as e:
        why = f"Ray Train's TrainFnUtils is gone ({e}); report with sweeps.report"
        print(f"sweeps: this trial's ray.train calls reach the lane: {why}", file=sys.stderr)
        yield
        return
    try:
        inner = tfu.get_train_fn_utils()
    except RuntimeError:  # not on a Ray Train worker: nothing to route
        yield
        return
    session = make(inner)
    tfu.set_train_fn_utils(session)
    try:
        yield
    finally:
        session.closed = True
        if tfu.get_train_fn_utils() is session:
            tfu.set_train_fn_utils(inner)
