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
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
from typing import Any

# The Ray releases whose private names this module uses (>= first, < second); pyproject pins the
# same range and tests/test_adapters.py checks the installed one, so an upgrade fails there.
RAY_TESTED = ("2.60", "2.61")

# Set by `ensure_ray` for a Ray of the process's own (its processes inherit it).
NO_AUTOSCALER_ENV = "SWEEPS_NO_AUTOSCALER"


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


def configure_host_logging() -> None:
    """Set up the `ray.train` logger once for a process that runs several controllers (the
    lane host), and keep each controller from setting it up again.

    Each `TrainController` calls `logging.config.dictConfig` as it is made. Two lanes starting
    together in one host deadlocked on it: one lane's dictConfig holds logging's module lock and
    waits for the lock of a file handler, which the other lane holds while that handler opens
    its file for its first record (and registering the new handler takes the module lock). Both
    lanes hung before a worker started: a 4-trial sweep in CI waited 600 s for its first trial,
    its host's controller log one empty file. Call it before any lane runs, on one thread."""
    import logging.config

    import ray
    from ray._common.filters import CoreContextFilter
    from ray._common.formatters import JSONFormatter
    from ray._private.log import PlainRayHandler
    from ray.train.v2._internal.constants import ENABLE_CONTROLLER_STRUCTURED_LOGGING_ENV_VAR
    from ray.train.v2._internal.logging.logging import SessionFileHandler, TrainLogLevelFilter

    os.environ[ENABLE_CONTROLLER_STRUCTURED_LOGGING_ENV_VAR] = "0"
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
