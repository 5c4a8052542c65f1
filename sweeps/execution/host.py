"""The lane host: a zero-CPU Ray actor that holds the lanes' `fit()` calls.

Calling `TorchTrainer.fit()` from an actor is the shape Ray Train V2 documents for tuning (a
Tune trial is an actor). On the tested Ray the host runs each lane's controller itself (the fast
path, execution/raytrain.py); elsewhere, or asked by SWEEPS_RAY_PATH, it calls the public fit().
Doing it here rather than in the driver keeps `torch` and Ray Train's controller machinery out of
the driver process (~480 MB of the driver's memory), and lets the driver exit without waiting
for worker groups to tear down: the host, owned by the driver, goes with it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sweeps.common.errors import one_line
from sweeps.execution.lane import (
    NOT_PLACED,
    RAY_PATH_ENV,
    Lane,
    LaneConfig,
    LaneShape,
    make_trainer,
)
from sweeps.execution.placement import start_timed_out
from sweeps.execution.raytrain import LANE_NAME, configure_host_logging, private_path_missing

log = logging.getLogger(__name__)


def lane_path(asked: str) -> str:
    """The path a lane runs on, "public" or "private", for what its driver asked ("": choose).
    Private asked where it cannot run fails the lane with one line, rather than run public."""
    if asked == "public":
        return "public"
    missing = private_path_missing()
    if asked == "private" and missing:
        raise RuntimeError(f"{RAY_PATH_ENV}=private, but {missing}")
    return "public" if missing else "private"


class LaneHost:
    """Threaded actor: each `run_lane` call holds one thread for the lane's life; a service's
    host is detached, so its lanes outlive the driver that launched them."""

    def __init__(self) -> None:
        self.ended: dict[str, str | None] = {}
        self.done: dict[str, threading.Event] = {}
        # Ray Train and torch take ~1.4 s to import: now, as the host is made, rather than
        # when the first lane's fit() comes (once the study is open, ~0.5 s later). Not in a
        # thread: two threads importing one package cycle can see it half-initialized.
        import ray.train.torch  # noqa: F401

        missing = private_path_missing()
        if missing is None:  # only in-process controllers need it
            configure_host_logging()  # once: per lane, two lanes starting together deadlocked
        else:
            log.warning("lanes run Ray Train's public TorchTrainer.fit(): %s", missing)

    def run_lane(self, lane_id: str, shape: LaneShape, conf: LaneConfig) -> str | None:
        """Run the lane's fit() to its end; returns None, or the error that ended it."""
        done = self.done.setdefault(lane_id, threading.Event())
        LANE_NAME.set(lane_id)  # this thread's records name this lane in the host's log
        error = None
        try:
            path = lane_path(conf.ray_path)
            lane = Lane(lane_id, shape)
            make_trainer(lane, conf, in_process_controller=path == "private").fit()
        except BaseException as e:
            error = f"{type(e).__name__}: {one_line(e, 2000)}"
            if start_timed_out(e):  # the driver says what it waited for
                error = f"{NOT_PLACED}: {error}"
        self.ended[lane_id] = error
        done.set()
        return error

    def wait_lane(self, lane_id: str) -> str | None:
        """Block until the lane ends (whoever launched it); returns its error, if any."""
        self.done.setdefault(lane_id, threading.Event()).wait()
        return self.ended.get(lane_id)

    def ping(self) -> bool:
        return True


class ActorLauncher:
    """Launches lanes in a LaneHost actor, registered with the broker for `owner` first (so
    the lane's first request already has somewhere to go); a watcher thread per lane turns
    its end into `lane.done` / `lane.error` for the pool to reap."""

    def __init__(
        self,
        conf: LaneConfig,
        host: Any = None,
        owner: str = "driver",
        key: str = "",
        max_failures: int | None = None,
    ) -> None:
        self.conf, self.host, self.owner, self.key = conf, host, owner, key
        self.max_failures = max_failures

    def _host(self) -> Any:
        if self.host is None:
            import ray

            self.host = ray.remote(LaneHost).options(num_cpus=0, max_concurrency=1024).remote()
        return self.host

    def launch(self, lane: Lane) -> None:
        import ray

        broker = self.conf.broker
        ray.get(broker.register.remote(lane.lane_id, self.owner, self.key, self.max_failures))
        self._host().run_lane.remote(lane.lane_id, lane.shape, self.conf)
        self.watch(lane)

    def watch(self, lane: Lane) -> None:
        """Follow a lane launched here or earlier by another driver (a claimed warm lane)."""
        ref = self._host().wait_lane.remote(lane.lane_id)

        def _watch() -> None:
            import ray

            try:
                error = ray.get(ref)
                if error:
                    lane.error = RuntimeError(error)
            except BaseException as e:  # the host itself died
                lane.error = e
            finally:
                lane.done.set()

        lane.thread = threading.Thread(target=_watch, name=f"watch-{lane.lane_id}", daemon=True)
        lane.thread.start()
