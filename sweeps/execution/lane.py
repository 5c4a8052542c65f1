"""Driver side of a lane: a thread that holds one Ray Train run (`TorchTrainer.fit()`) open.

The lane's workers run `worker.lane_main`, pulling trials from the broker. The thread ends when
the broker tells the workers to stop, when the lane is recycled, or when Ray Train gives up on
the worker group; the driver notices through :attr:`Lane.done` / :attr:`Lane.error`.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LaneShape:
    """Trials of one shape can share a lane; a different shape needs a worker group of its own."""

    workers: int
    cpus_per_worker: float
    gpus_per_worker: float


@dataclass
class Lane:
    lane_id: str
    shape: LaneShape
    thread: threading.Thread | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    started_at: float = field(default_factory=time.time)
    trials_run: int = 0
    first_rss_mb: float = 0.0
    last_rss_mb: float = 0.0


def make_lane_id(sweep: str, index: int) -> str:
    return f"{sweep}-lane{index}-{uuid.uuid4().hex[:6]}"


def start_lane(
    lane: Lane,
    *,
    broker: Any,
    train_config: dict[str, Any],
    storage_path: str,
    max_restarts: int,
    keep_checkpoints: int,
    runtime_env: dict[str, Any] | None = None,
    local_mode: bool = False,
) -> None:
    """Start the lane's `fit()` in a daemon thread (fit blocks until the lane ends)."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from sweeps.execution.worker import lane_main

    use_gpu = lane.shape.gpus_per_worker > 0
    resources = {"CPU": lane.shape.cpus_per_worker}
    if use_gpu:
        resources["GPU"] = lane.shape.gpus_per_worker
    scaling = ScalingConfig(
        num_workers=0 if local_mode else lane.shape.workers,
        use_gpu=use_gpu,
        resources_per_worker=resources,
    )
    storage_fs = None
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if storage_path.startswith("gs://") and emulator:
        # Ray Train resolves gs:// through pyarrow, which knows nothing of the emulator.
        from pyarrow.fs import GcsFileSystem

        scheme, _, hostport = emulator.rpartition("://")
        storage_fs = GcsFileSystem(
            anonymous=True, endpoint_override=hostport, scheme=scheme or "http"
        )
        storage_path = storage_path.removeprefix("gs://")
    trainer = TorchTrainer(
        lane_main,
        train_loop_config={**train_config, "lane_id": lane.lane_id, "broker": broker},
        scaling_config=scaling,
        run_config=RunConfig(
            name=lane.lane_id,
            storage_path=storage_path,
            storage_filesystem=storage_fs,
            failure_config=FailureConfig(max_failures=max_restarts),
            checkpoint_config=CheckpointConfig(num_to_keep=keep_checkpoints),
            worker_runtime_env=runtime_env or {},
        ),
    )

    def _run() -> None:
        try:
            trainer.fit()
        except BaseException as e:  # surfaced to the driver, which fails the lane's trial
            lane.error = e
        finally:
            lane.done.set()

    lane.thread = threading.Thread(target=_run, name=lane.lane_id, daemon=True)
    lane.thread.start()
