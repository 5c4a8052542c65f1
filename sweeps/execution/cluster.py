"""The Ray side of a sweep's set-up: connect or start Ray, ship the user's code, start the
broker, and the channel the driver reads the broker through.

Nothing here decides anything about trials; the driver gets a `BrokerChannel` and a launcher
and never calls Ray itself.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

from sweeps.common.errors import ServiceError, SpecError, one_line
from sweeps.contracts.protocol import Event, Key, check_answer
from sweeps.execution.lane import HEALTH_CHECK_ENV, HEALTH_CHECK_S, LaneShape
from sweeps.execution.raytrain import NO_AUTOSCALER_ENV
from sweeps.spec import Spec

# Workers read data and checkpoints themselves: where storage is goes with them (not secrets of
# ours: the Optuna and MLflow credentials stay with the driver).
PROPAGATE = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "SWEEPS_DATA_CACHE")

# Set once `ensure_ray` has started a local Ray of this process's own (not a cluster it joined).
_OWN_CLUSTER: list[bool] = []


def set_ray_env(own: bool) -> None:
    """Ray Train's settings for a sweep, in this process's environment before Ray starts (its
    processes inherit it); `own`: a local Ray this process starts, not a cluster it joins."""
    # Faster worker-group polling: Ray Train's default 2 s adds seconds to every lane's end.
    os.environ.setdefault(HEALTH_CHECK_ENV, HEALTH_CHECK_S)
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    if own:
        # A Ray of this process's own, on this machine: no node of it is drained, and nothing
        # scrapes its metrics. Ray Train's preemption watcher (one more actor process per lane:
        # 1.5 s of CPU to start, taken from the trials of the lanes already running) and its
        # per-report metrics only cost.
        os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
        os.environ.setdefault("RAY_TRAIN_METRICS_ENABLED", "0")
        # Nor does an autoscaler read Ray Train's resource requests (execution/raytrain.py).
        os.environ.setdefault(NO_AUTOSCALER_ENV, "1")


def ensure_ray(address: str | None = None, runtime_env: dict[str, Any] | None = None) -> None:
    """Connect to `address` (a cluster's GCS host:port), or start a local Ray of this process's
    own: never attach to whichever Ray happens to run on the machine."""
    import ray

    if ray.is_initialized():
        return
    set_ray_env(own=not address)
    if address and address.startswith(("http://", "https://")):
        raise SpecError(
            f"RAY_ADDRESS={address} is a Jobs API URL: use `sweeps submit` with it, or set "
            "RAY_ADDRESS to the cluster's GCS address (host:6379) to run the driver here"
        )
    try:
        verbose = os.environ.get("SWEEPS_VERBOSE") == "1"
        ray.init(
            address=address or "local",
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.INFO if verbose else logging.ERROR,
            runtime_env=runtime_env,
        )
    except (ConnectionError, RuntimeError) as e:
        raise ServiceError(f"Ray cluster {address or '(local)'}: {one_line(e)}") from None
    if not address:
        _OWN_CLUSTER.append(True)


def stop_own_cluster() -> None:
    """Tear down the local Ray this process started, as Ray's own `ray.shutdown()` does at a
    normal exit. A process that ends with `os._exit` skips that: its raylet and GCS die with
    it (parent-death signal), but the raylet's DashboardAgent and RuntimeEnvAgent, orphaned
    to PID 1, stayed ~90-105 s until they noticed. A cluster this process only joined (the
    `sweeps up` service's, RAY_ADDRESS, one started by the user) is left running."""
    ray = sys.modules.get("ray")
    if _OWN_CLUSTER and ray is not None and ray.is_initialized():
        ray.shutdown()
    _OWN_CLUSTER.clear()


def cpus() -> float:
    """The cluster's CPUs (all nodes): how many cold lane starts it carries at once."""
    import ray

    return float(ray.cluster_resources().get("CPU", 0.0)) or float("inf")


def in_ray_job() -> bool:
    """Whether this driver runs as a Ray Job (`sweeps submit`): its code came as the job's
    working dir, and the job's runtime env may not be replaced at ray.init."""
    return os.environ.get("SWEEPS_JOB") == "1"


def runtime_env(spec: Spec) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(job-level env for ray.init, each lane's workers' env): how the user's code (and, on a
    remote cluster, our packages) reach the workers.

    Same machine: a path on PYTHONPATH is enough, and unlike working_dir it works when Ray was
    started before this spec was read (tests, notebooks). A remote cluster, driver here: the
    code and our packages are uploaded with the job. A Ray Job (`sweeps submit`): the job
    already carries them, and its working dir becomes the lanes' (Ray refuses to merge a second
    working dir into the job's, or to upload a folder for one actor)."""
    remote = bool(os.environ.get("RAY_ADDRESS"))
    passed = {k: os.environ[k] for k in PROPAGATE if os.environ.get(k)}
    # Ray Train V2 patches print() in its workers to tee every line into its logger, whose
    # handler writes to sys.stderr: a trial's captured output then held each line twice.
    passed["RAY_TRAIN_ENABLE_PRINT_PATCH"] = "0"
    passed["SWEEPS_VERBOSE"] = os.environ.get("SWEEPS_VERBOSE", "0")  # Ray's lines in trial logs
    job: dict[str, Any] = {}
    lane: dict[str, Any] = {}
    if spec.trainer.code_dir:
        d = os.path.abspath(spec.trainer.code_dir)
        if not os.path.isdir(d):
            raise SpecError(f"trainer.code_dir: folder not found: {spec.trainer.code_dir}")
        if in_ray_job():
            pass  # in the job's working dir, given to the lanes in connect()
        elif remote:
            job["working_dir"] = d
        else:
            passed["PYTHONPATH"] = os.pathsep.join(
                x for x in (d, os.environ.get("PYTHONPATH", "")) if x
            )
    if remote and not in_ray_job():
        job["py_modules"] = our_packages()
    lane["env_vars"] = passed
    if spec.resources.image:
        lane["image_uri"] = spec.resources.image  # with env_vars only (Ray's rule)
        # An image's Python may differ from the cluster's in its patch release only (Debian's
        # 3.11.2 beside a 3.11.7): the same ABI, so a warning in the worker's log rather than
        # Ray's traceback in the user's terminal. Another minor version is still an error.
        passed["RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL"] = "minor"
    return job or None, lane


def our_packages() -> list[str]:
    """sweeps, trainer and tracking as folders, for a cluster that may not have them."""
    import tracking
    import trainer

    # This file is sweeps/execution/cluster.py: the package folder is two levels up.
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [ours] + [os.path.dirname(m.__file__) for m in (trainer, tracking)]


def connect(spec: Spec) -> tuple[dict[str, Any] | None, bool]:
    """Ray up for this spec. Returns the runtime env each lane's workers get, and whether this
    is a service (a cluster that outlives the sweep: RAY_ADDRESS, or `sweeps up` on this
    machine), whose lanes stay warm between sweeps."""
    address = os.environ.get("RAY_ADDRESS") or None
    if not address and not _ray_initialized():
        from sweeps.service.local import auth_env, load

        info = load()
        if info is not None:
            address = info.ray_address
            _set_auth_env(auth_env(info.token_path))
    import ray

    job_env, lane_env = runtime_env(spec)
    ensure_ray(address, runtime_env=job_env)
    if in_ray_job() and spec.trainer.code_dir:
        # The job's working dir, as the package Ray uploaded (a gcs:// URI, valid for one
        # actor): lanes started by the service's shared lane host would otherwise inherit the
        # working dir of whichever job started that host.
        working_dir = ray.get_runtime_context().runtime_env.get("working_dir")
        if working_dir:
            lane_env["working_dir"] = working_dir
    return lane_env, bool(address)


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray and ray.is_initialized())


def _set_auth_env(env: dict[str, str]) -> None:
    """The service's token settings, before `import ray`: Ray reads them once, when it is
    imported, and a process that imported it without them is refused by the service's GCS
    (retrying for 20 s, then "Failed to connect")."""
    if "ray" in sys.modules and any(os.environ.get(k) != v for k, v in env.items()):
        hint = " ".join(f"{k}={v}" for k, v in env.items())
        raise ServiceError(
            f"the sweeps service wants Ray's token auth, but ray was imported without it: "
            f"set {hint} before importing ray"
        )
    os.environ.update(env)


SERVICE_NAMESPACE = "sweeps"


def on_head() -> dict[str, Any]:
    """Actor options that keep a service's own actors on the head node: a lost worker node
    must not take the broker or the lanes' host (and their Ray Train controllers) with it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            # Hard: a soft affinity put a detached 0-CPU actor on a worker node whenever the
            # head had no CPUs (a compose or KubeRay head; seen with Ray 2.60), and killing that
            # worker then killed the broker and every driver using it.
            return {
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            }
    return {}


def lane_idle_s() -> float:
    """How long a service keeps an idle lane warm for the next sweep (SWEEPS_LANE_IDLE_S)."""
    return float(os.environ.get("SWEEPS_LANE_IDLE_S", "300"))


class BrokerChannel:
    """The driver's side of the broker actor. Answers given during a step go out together in
    one actor call at `flush`, so a step costs one round trip however many events it handled.

    `shared`: the service's broker (a detached named actor that outlives this driver, holding
    warm lanes between sweeps) instead of one of this sweep's own. A daemon thread touches it
    every few seconds, so it can tell a driver that is busy from one that died."""

    def __init__(self, max_failures: int, shared: bool = False) -> None:
        import uuid

        import ray

        from sweeps.execution.broker import Broker

        self.owner = uuid.uuid4().hex[:12]
        self.shared = shared
        actor = ray.remote(Broker)
        if shared:
            self.handle = _service_actor(actor, "sweeps-broker", 10_000).remote(
                owner=None, idle_s=lane_idle_s(), orphan_after_s=30.0
            )
            threading.Thread(target=self._keepalive, name="broker-touch", daemon=True).start()
        else:
            self.handle = actor.options(num_cpus=0, max_concurrency=1000).remote(
                max_failures=max_failures, owner=self.owner
            )
        self._out: list[tuple[Key, Any]] = []

    def _keepalive(self) -> None:
        while True:
            self.handle.touch.remote(self.owner)
            time.sleep(5.0)

    def poll(self, timeout: float) -> list[Event]:
        import ray

        return ray.get(self.handle.poll.remote(timeout, self.owner))

    def answer(self, key: Key, value: Any) -> None:
        # Checked here, not only in the actor: a bad answer must fail the driver loudly, not
        # vanish in a fire-and-forget actor call while a lane waits forever.
        self._out.append((key, check_answer(key, value)))

    def flush(self) -> None:
        if self._out:
            out, self._out = self._out, []
            self.handle.answer_many.remote(out)

    def claim(self, key: str, n: int) -> list[str]:
        """Warm lanes of the service this sweep can use (none for a sweep's own broker)."""
        import ray

        return ray.get(self.handle.claim.remote(self.owner, key, n)) if self.shared and n else []

    def idle_lanes(self) -> list[tuple[str, str]]:
        """(lane id, key) of the service's idle lanes (none for a sweep's own broker)."""
        import ray

        return ray.get(self.handle.idle_lanes.remote()) if self.shared else []

    def release_idle(self, keep_key: str) -> int:
        import ray

        return ray.get(self.handle.release_idle.remote(keep_key)) if self.shared else 0


def lane_host(shared: bool) -> Any:
    """The actor that holds the lanes' fit() calls: the service's (detached, shared) or a
    sweep's own (it goes with the driver)."""
    import ray

    from sweeps.execution.host import LaneHost

    actor = ray.remote(LaneHost)
    if shared:
        return _service_actor(actor, "sweeps-lane-host", 1024).remote()
    return actor.options(num_cpus=0, max_concurrency=1024).remote()


def lane_key(
    spec: Spec, shape: LaneShape, storage_root: str, function_digest: str | None = None
) -> str:
    """What lanes of a sweep can run: their worker shape, code and checkpoint storage. A warm
    lane serves another sweep only when all three match."""
    import hashlib

    r, t = spec.resources, spec.trainer
    code = "builtin"
    if function_digest:
        code = f"function-{function_digest}"
    elif t.command_line is not None or t.entrypoint:
        h = hashlib.sha256(str(t.entrypoint or t.command_line).encode())
        root = os.path.abspath(t.code_dir) if t.code_dir else ""
        for folder, dirs, files in sorted(os.walk(root)) if root else []:
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".git"))
            for name in sorted(files):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
        code = h.hexdigest()[:16]
    if r.image:  # the image is the code the workers run (and its tag may move: name it)
        code = f"image-{r.image}|{code}"
    return f"{shape.key}|{code}|{storage_root}"


def check_image_storage(storage: str, local_mode: bool) -> None:
    """`resources.image`: the workers' checkpoints must reach storage outside their containers.
    Ray's podman mounts only its own temp folder, so a local checkpoint folder would be one
    inside each container, gone with it (and a lost worker's trial would find nothing)."""
    if local_mode:
        raise SpecError("resources.image: needs Ray workers, not a local-mode sweep")
    if "://" not in storage or storage.startswith("file://"):
        raise SpecError(
            f"resources.image: checkpoints would go to {storage}, a folder inside each "
            "worker's container, lost with it: set SWEEPS_CHECKPOINTS to storage the "
            "containers share (gs://bucket/prefix)"
        )


# What Ray's image_uri (2.60) starts the workers' containers with, on each node.
CONTAINER_TOOL = "podman"


def check_image_nodes(spec: Spec) -> None:
    """`resources.image`: every alive node that could run one of the trials' workers has
    podman, which Ray's `image_uri` starts the workers with, and the image (or pulls it).
    Asked of the nodes themselves (a zero-CPU task pinned to each) before any lane starts:
    without it, each lane's start fails deep in Ray's runtime env agent (execution/images)."""
    import ray
    from ray.exceptions import GetTimeoutError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from sweeps.execution import images

    r = spec.resources
    tool = CONTAINER_TOOL
    probe = ray.remote(num_cpus=0)(images.node_check)
    nodes = [
        n
        for n in ray.nodes()
        if n.get("Alive")
        and n["Resources"].get("CPU", 0) >= r.cpus_per_worker
        and n["Resources"].get("GPU", 0) >= r.gpus_per_worker
    ]
    asks = {
        n["NodeManagerAddress"]: probe.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(tool, r.image)
        for n in nodes
    }
    wait = images.PULL_TIMEOUT_S + 60
    try:
        answers = {addr: ray.get(ref, timeout=wait) for addr, ref in asks.items()}
    except GetTimeoutError:
        raise ServiceError(f"resources.image: the nodes did not answer within {wait} s") from None
    refusal = images.refusal(spec, tool, answers)
    if refusal:
        raise ServiceError(refusal)


def _service_actor(actor: Any, name: str, concurrency: int) -> Any:
    """A service's shared actor: detached, found by name by every driver, on the head (it must
    outlive worker nodes), and taking no CPU from the trials."""
    return actor.options(
        name=name,
        namespace=SERVICE_NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=concurrency,
        **on_head(),
    )
