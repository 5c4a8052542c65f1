"""Assemble a sweep from its real parts and run it: the stores (Optuna, MLflow), Ray, the broker
and the lane host, the lane pool, the observers, and the driver that carries it out.

Start-up overlaps what does not depend on each other: Ray comes up, the broker starts and the
first lanes begin their (slow) worker-group start in one thread while this one creates or opens
the store schemas and the sweep's MLflow parent run. This is the one place that knows which
concrete class plays each role; the driver and its parts only know each other's contracts.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from sweeps.common import paths, timeline
from sweeps.contracts.observers import ObserverManager, SweepObserver
from sweeps.contracts.records import SweepOutcome
from sweeps.driver import arbitration
from sweeps.driver.define_by_run import DefineByRun
from sweeps.driver.loop import Driver
from sweeps.driver.plan import LanePlan, make_plan
from sweeps.execution import cluster
from sweeps.execution.host import ActorLauncher
from sweeps.execution.lane import LaneConfig, ThreadLauncher
from sweeps.execution.placement import RayProbe
from sweeps.execution.pool import LanePool, StallWatch, StartPolicy
from sweeps.spec import Spec


def check_tracking(spec: Spec) -> str:
    """The tracking URI, once it answers: a dead server is a clear error before anything
    starts, not lost work. A local SQLite store needs no check (`open_tracker` creates it)."""
    from tracking.mlflow_compat import check_reachable

    uri = paths.tracking_uri(spec.tracking.uri)
    paths.ensure_local_dirs(uri)
    if not uri.startswith("sqlite"):
        check_reachable(uri)
    return uri


def open_tracker(uri: str) -> Any:
    """The tracker, its writes in a process of their own (the driver's loop keeps a core; see
    writer_proc). That process imports MLflow and creates a new store's schema while Ray
    starts here: this one does not wait for either (tracking.sweep_run)."""
    from tracking.tracker import MLflowTracker

    if uri.startswith("sqlite:///"):
        _wal(uri.removeprefix("sqlite:///"))
    from sweeps.service import zygote

    artifact_root = paths.artifact_root() if uri.startswith(("sqlite", "postgresql")) else None
    # A driver the service's zygote forked has the zygote fork its writer too (MLflow imported).
    fork = zygote.fork_helper if zygote.FORKED_FROM else True
    return MLflowTracker(uri, artifact_root, process=fork)


def _wal(path: str) -> None:
    """MLflow's SQLite store in WAL mode (persistent on the file): readers such as the MLflow UI
    no longer block the driver's writer thread, and commits stop waiting on the journal."""
    import sqlite3

    try:
        with sqlite3.connect(path, timeout=30) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error:
        pass  # an optimization only


def start_lanes(
    spec: Spec,
    plan: LanePlan,
    local_mode: bool,
    spent: Callable[[], bool] = lambda: False,
) -> tuple[cluster.BrokerChannel, LanePool]:
    """Ray, the broker, the lane pool, and the sweep's first lanes (on the main thread: Ray's
    processes get their parent-death signal when the *thread* that started them ends). On a
    service, warm lanes
    an earlier sweep left idle first (same shape and code), new ones for the rest. (They may
    turn out not to be needed: they are told to stop.) `spent()`, asked once Ray is up, says
    that the study has used its trial budget already (a finished sweep run again): no lanes."""
    if plan.image:
        cluster.check_image_storage(plan.storage_root, local_mode)
    timeline.mark("ray.start")
    worker_env, shared = cluster.connect(spec)
    timeline.mark("ray.ready")
    if plan.image:
        cluster.check_image_nodes(spec)
    channel = cluster.BrokerChannel(plan.max_failures, shared=shared)
    timeline.mark("broker.ready")
    conf = LaneConfig(
        broker=channel.handle,
        train_config={"warmup": plan.warm_up},
        storage_path=plan.storage_root,
        max_restarts=max(plan.max_failures, 0) + 1,
        keep_checkpoints=plan.keep_checkpoints,
        runtime_env=worker_env,
        local_mode=local_mode,
        start_timeout_s=plan.start_timeout_s,
    )
    key = plan.key
    if local_mode:  # workers in this process's threads: only a driver-side fit() can do that
        launcher: Any = ThreadLauncher(conf)
    else:
        launcher = ActorLauncher(
            conf, cluster.lane_host(shared), channel.owner, key, plan.max_failures
        )
    starts = StartPolicy() if local_mode else StartPolicy(cluster.cpus())
    probe = None if local_mode else RayProbe(channel.idle_lanes)
    watch = StallWatch.for_bound(plan.start_timeout_s)
    pool = LanePool(
        launcher, spec.name, plan.shape, plan.recycle, starts=starts, probe=probe, watch=watch
    )
    want = arbitration.attach(spec, pool, channel, key, 0 if spent() else plan.want)
    for lane_id in channel.claim(key, want):
        pool.adopt(lane_id)
    timeline.mark("lanes.claimed")
    if pool.active() < want:
        channel.release_idle(keep_key=key)  # idle lanes of other sweeps give back resources
    for _ in range(want - pool.active()):
        pool.start()
    return channel, pool


def run_sweep(
    spec: Spec,
    *,
    callbacks: list[SweepObserver] | None = None,
    local_mode: bool = False,
    enqueue: list[dict[str, Any]] | None = None,
    install_signals: bool = True,
    from_process_start: bool = False,
    function: dict[str, Any] | None = None,
    define_by_run: DefineByRun | None = None,
) -> SweepOutcome:
    """`function`: a trainer function packed by `sweeps.notebook.pack`, run in place of the
    spec's trainer. `define_by_run`: the driver's side of `sweeps.optimize` (its sampler and
    pruner go on the study)."""
    from sweeps.common.quietlogs import quiet_optuna
    from sweeps.search import bulk
    from sweeps.search.study import counted_trials, open_study
    from tracking.plots import PlotLogger, TimelineLogger

    timeline.begin(from_process_start)
    timeline.mark("imports.done")
    quiet_optuna()  # its warnings ("There are no complete trials.") only with -v
    code_dir = spec.trainer.code_dir
    if code_dir and os.path.abspath(code_dir) not in sys.path:
        sys.path.insert(0, os.path.abspath(code_dir))  # the driver unpickles user models
    timeline.mark("stores.start")
    plan = make_plan(spec, function)
    storage_url = plan.storage_url
    uri = check_tracking(spec)
    # A store on the network that does not answer is a clear error before Ray starts; a local
    # SQLite study is created (its schema is the slow part) while Ray comes up. Ray itself
    # starts on this thread: the processes it spawns die with the thread that spawned them.
    study = None if storage_url.startswith("sqlite") else open_study(spec, storage_url)
    tracker = open_tracker(uri)
    try:
        opened = _in_thread(lambda: study or open_study(spec, storage_url))

        def spent() -> bool:  # the study is ready by the time Ray is, as a rule
            return not enqueue and counted_trials(opened.result()) >= spec.budget.trials

        try:
            channel, pool = start_lanes(spec, plan.lanes, local_mode, spent)
        except BaseException:
            _abandon(opened)  # Ray, or a check on its nodes, failed before any trial
            raise
        study = opened.result()
        bulk.speed_up(study)  # the incremental trial reads before each ask, in plain SELECTs
        define_by_run = define_by_run or DefineByRun()
        define_by_run.bind(study)
    except BaseException:
        tracker.close()  # its writer process ends too
        raise
    timeline.mark("stores.ready")
    try:
        observers = ObserverManager(
            # Plotting warms up only while some lane starts cold.
            [*(callbacks or []), PlotLogger(tracker, pool.cold_starts()), TimelineLogger(tracker)]
        )
        driver = Driver(
            spec,
            study=study,
            channel=channel,
            pool=pool,
            tracker=tracker,
            observers=observers,
            storage_url=storage_url,
            trainer=plan.trainer,
            enqueue=enqueue or [],
            install_signals=install_signals,
            define_by_run=define_by_run,
            wall_since=time.time() - (time.monotonic() - timeline.current().t0),
        )
        outcome = driver.run()
    finally:
        tracker.close()
    outcome.timeline = timeline.current().to_json()
    return outcome


def _abandon(opened: Future[Any]) -> None:
    """A sweep that never started leaves no study behind (`ls` would list it as finished with
    no trials). A study that existed before, or was submitted and is `queued`, stays as it
    was."""
    from sweeps.search.study import delete_if_unused

    try:
        study = opened.result()
    except BaseException:
        return  # the store's own error is reported by the caller
    delete_if_unused(study)


def _in_thread(fn: Any, *args: Any) -> Future[Any]:
    """Run `fn` in a daemon thread (the store set-up, while Ray starts on the main thread)."""
    fut: Future[Any] = Future()

    def target() -> None:
        try:
            fut.set_result(fn(*args))
        except BaseException as e:
            fut.set_exception(e)

    threading.Thread(target=target, name="ray-start", daemon=True).start()
    return fut
