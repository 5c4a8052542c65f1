"""A lane: one Ray Train run (`TorchTrainer.fit()`) whose workers pull trials until told to stop.

The lane's workers run `lane_worker.lane_main`. `fit()` ends when the broker answers `Stop`, when
the lane is recycled, or when Ray Train gives up on the worker group; whoever launched it sets
:attr:`Lane.done` and :attr:`Lane.error`, and the lane pool reaps it.

Launchers are small objects with one method, `launch(lane)`: `ThreadLauncher` holds `fit()` open
in a daemon thread of the driver. Tests use a fake one (no Ray at all).
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class LaneShape:
    """Trials of one shape can share a lane; a different shape needs a worker group of its own."""

    workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    placement: str = "pack"

    @classmethod
    def of(cls, workers: int, cpus: float, gpus: float, placement: str = "pack") -> LaneShape:
        """The shape of a trial's resources (numbers as the spec or a sampled trial has them)."""
        return cls(int(workers), float(cpus), float(gpus), placement)

    @property
    def key(self) -> str:
        """The shape as a lane's key names it: 2x1cpu0gpu-pack."""
        w, c, g = self.workers, self.cpus_per_worker, self.gpus_per_worker
        return f"{w}x{c:g}cpu{g:g}gpu-{self.placement}"

    @classmethod
    def from_key(cls, key: str) -> LaneShape | None:
        """The shape a lane key starts with (`key`'s inverse); None for another string."""
        m = re.match(r"^(\d+)x([\d.e+-]+)cpu([\d.e+-]+)gpu-(\w+)(\||$)", key)
        return cls.of(int(m[1]), float(m[2]), float(m[3]), m[4]) if m else None


@dataclass
class Lane:
    lane_id: str
    shape: LaneShape
    thread: threading.Thread | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    started_at: float = field(default_factory=time.time)
    trials_run: int = 0
    stopping: bool = False  # told to stop: its fit() is ending, nothing more runs on it
    launched: bool = False  # its fit() was started (a lane may wait for CPUs to start)
    ready: bool = False  # its workers asked for a trial: its start-up is over
    launched_at: float | None = None  # on the pool's clock
    first_rss_mb: float = 0.0
    last_rss_mb: float = 0.0
    waiting: Any = None  # placement.Wait: what its workers waited for, last it said


# Ray Train's own setting for how long a worker group's placement may take before it retries.
START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
# Ray Train's controller polls its workers at this interval, and each `report` waits for the
# poll: at its default (2 s) every epoch of a lane takes >= 2 s, on any Ray sweeps did not start.
HEALTH_CHECK_ENV, HEALTH_CHECK_S = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2"

# How the lane host runs a lane's fit(): "private" (Ray Train's controller in the host itself,
# through execution/raytrain.py's private names: the fast path), "public" (`TorchTrainer.fit()`
# as documented: Ray Train spawns its controller actor), or unset ("auto"): private where this
# Ray is the tested release with every name in place, else public. Read by the driver; tests set
# it to run lanes on both paths.
RAY_PATH_ENV = "SWEEPS_RAY_PATH"


def asked_ray_path() -> str:
    """The path the environment asks for ("" for automatic); an unknown value is bad input."""
    from sweeps.common.errors import SpecError

    asked = os.environ.get(RAY_PATH_ENV, "").strip().lower()
    if asked not in ("", "auto", "public", "private"):
        raise SpecError(f"{RAY_PATH_ENV}={asked!r}: expected public, private or auto")
    return "" if asked == "auto" else asked


def make_lane_id(sweep: str, index: int) -> str:
    return f"{sweep}-lane{index}-{uuid.uuid4().hex[:6]}"


def sweep_of(lane_id: str) -> str:
    """The sweep a lane id names (`make_lane_id`'s inverse); the id itself for another."""
    m = re.match(r"^(.*)-lane\d+-[0-9a-f]{6}$", lane_id)
    return m[1] if m else lane_id


# How a lane whose worker group Ray Train never placed ends (its error starts so): Ray Train
# timed its placement out twice (execution.lane_start_timeout_s), and gave up.
NOT_PLACED = "worker group not placed"


def not_placed(error: BaseException | str | None) -> bool:
    return error is not None and str(error).startswith(NOT_PLACED)


class LaneLauncher(Protocol):
    """Starts a lane's worker group; must set `lane.done` (and `lane.error`) when it ends."""

    def launch(self, lane: Lane) -> None: ...


@dataclass
class LaneConfig:
    """What every lane of a sweep shares: where its code and checkpoints are, restart policy."""

    broker: Any
    train_config: dict[str, Any]
    storage_path: str
    max_restarts: int
    keep_checkpoints: int | None  # None: Ray deletes none (the sweep's retention does)
    runtime_env: dict[str, Any] | None = None
    local_mode: bool = False
    ray_path: str = field(default_factory=asked_ray_path)  # "", "public" or "private"
    start_timeout_s: float = 60.0  # execution.lane_start_timeout_s


def make_trainer(lane: Lane, conf: LaneConfig, in_process_controller: bool = False) -> Any:
    """The lane's TorchTrainer, not started."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from sweeps.execution.lane_worker import lane_main
    from sweeps.execution.raytrain import in_process_trainer_class
    from sweeps.execution.storage import filesystem, scheme

    use_gpu = lane.shape.gpus_per_worker > 0
    resources = {"CPU": lane.shape.cpus_per_worker}
    if use_gpu:
        resources["GPU"] = lane.shape.gpus_per_worker
    scaling = ScalingConfig(
        num_workers=0 if conf.local_mode else lane.shape.workers,
        use_gpu=use_gpu,
        resources_per_worker=resources,
        placement_strategy=lane.shape.placement.upper(),
    )
    lane_env = (conf.runtime_env or {}).get("env_vars") or {}
    storage_fs, storage_path = filesystem(conf.storage_path, lane_env)
    config = {
        **conf.train_config,
        "lane_id": lane.lane_id,
        "broker": conf.broker,
        "storage_scheme": scheme(conf.storage_path),
    }
    trainer_cls = in_process_trainer_class() if in_process_controller else TorchTrainer
    # Ray Train waits this long for the workers' placement group, then retries the start once
    # (controller_failure_limit) and raises: the lane ends NOT_PLACED rather than wait forever.
    # Ray Train reads it from this process's environment as the run starts (both paths); a
    # shared host's lanes started at the same moment by sweeps with other bounds may see theirs.
    os.environ[START_TIMEOUT_ENV] = f"{conf.start_timeout_s:g}"
    os.environ.setdefault(HEALTH_CHECK_ENV, HEALTH_CHECK_S)  # a cluster's own setting stays
    failure = {"max_failures": conf.max_restarts}
    if "controller_failure_limit" in getattr(FailureConfig, "__dataclass_fields__", {}):
        failure["controller_failure_limit"] = 1
    return trainer_cls(
        lane_main,
        train_loop_config=config,
        scaling_config=scaling,
        run_config=RunConfig(
            name=lane.lane_id,
            storage_path=storage_path,
            storage_filesystem=storage_fs,
            failure_config=FailureConfig(**failure),
            checkpoint_config=CheckpointConfig(num_to_keep=conf.keep_checkpoints),
            worker_runtime_env=conf.runtime_env or {},
        ),
    )


class ThreadLauncher:
    """Holds each lane's `fit()` open in a daemon thread of the driver process."""

    def __init__(self, conf: LaneConfig) -> None:
        self.conf = conf

    def launch(self, lane: Lane) -> None:
        trainer = make_trainer(lane, self.conf)

        def _run() -> None:
            try:
                trainer.fit()
            except BaseException as e:  # surfaced to the driver, which fails the lane's trial
                lane.error = e
            finally:
                lane.done.set()

        lane.thread = threading.Thread(target=_run, name=lane.lane_id, daemon=True)
        lane.thread.start()
