"""Why a lane's worker group is not placed: one line that names what it waits for.

Ray Train asks for a lane's workers as one placement group (a bundle per worker). While the
cluster cannot hold it, the group stays PENDING and Ray Train waits in silence, retrying every
RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S (its `WorkerGroupStartupTimeoutError`, charged to
`FailureConfig.controller_failure_limit`). The lane pool asks here while a lane starts.

`explain` and `holders` are pure (what the lane asks, what the cluster has, who holds it → the
line); `pending` and `cluster_view` read Ray's public tables (`ray.cluster_resources`,
`ray.available_resources`, `ray.nodes`, `ray.util.placement_group_table`): Ray's state API
needs the dashboard, which sweeps does not start.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sweeps.execution.lane import LaneShape, sweep_of


@dataclass(frozen=True)
class Holder:
    """Who holds part of the cluster: lanes of a sweep, or whatever else runs on Ray."""

    who: str  # "idle lanes of sweep X", "this sweep's running lanes", "other Ray work"
    cpus: float = 0.0
    gpus: float = 0.0
    own: bool = False  # this sweep's own lanes: what they hold frees as their trials end

    def amount(self, res: str) -> float:
        return self.gpus if res == "GPU" else self.cpus


@dataclass(frozen=True)
class ClusterView:
    total: Mapping[str, float]
    free: Mapping[str, float]
    nodes: Sequence[Mapping[str, float]]  # each alive node's resources
    holders: Sequence[Holder] = ()


@dataclass(frozen=True)
class Wait:
    line: str  # "waiting for 2 CPUs: 0 of 2 free, held by idle lanes of sweep X (2 CPUs)"
    own: bool = False  # this sweep's own running lanes hold what is short: it frees by itself
    fits: bool = True  # the cluster, were it empty, could hold the lane: the wait can end


def _amount(x: float, res: str) -> str:
    return f"{x:g} {res}" + ("" if x == 1 else "s")


def explain(shape: LaneShape, view: ClusterView) -> Wait:
    """Pure: what a lane of `shape` waits for on a cluster seen as `view`: a resource no node
    has, more than the whole cluster holds, or (it fits, but not now) who holds what is short."""
    w = shape.workers
    per = {r: x for r, x in (("CPU", shape.cpus_per_worker), ("GPU", shape.gpus_per_worker)) if x}
    one = " and ".join(_amount(x, r) for r, x in per.items())  # one worker's bundle
    asked = _amount(w * per["GPU"], "GPU") if "GPU" in per else _amount(w * per["CPU"], "CPU")
    if "GPU" in per and not any(n.get("GPU", 0) > 0 for n in view.nodes):
        return Wait(f"waiting for {asked}: no node has a GPU", fits=False)
    # How many of the lane's workers each node could hold, were it empty.
    room = [min(math.floor(n.get(r, 0) / x + 1e-9) for r, x in per.items()) for n in view.nodes]
    if not any(room):
        big = max(view.nodes, key=lambda n: tuple(n.get(r, 0) for r in per), default={})
        largest = " and ".join(_amount(big.get(r, 0), r) for r in per)
        line = f"waiting for {asked}: no node has {one} for a worker (the largest: {largest})"
        return Wait(line, fits=False)
    if sum(room) < w:
        line = f"waiting for {asked}: the cluster holds {sum(room)} of its {w} workers"
        return Wait(line, fits=False)
    short = [(r, w * x) for r, x in sorted(per.items(), reverse=True) if _free(view, r) < w * x]
    if not short:  # enough in all, but no node has a worker's share free
        return Wait(f"waiting for {asked}: free in all, but not {one} on one node")
    res, need = short[0]
    held = sorted((h for h in view.holders if h.amount(res) > 0), key=lambda h: -h.amount(res))
    by = ", ".join(f"{h.who} ({_amount(h.amount(res), res)})" for h in held)
    free = f"{_free(view, res):g} of {view.total.get(res, 0):g} free"
    line = f"waiting for {_amount(need, res)}: {free}" + (f", held by {by}" if by else "")
    mine = {r: sum(h.amount(r) for h in view.holders if h.own) for r in per}
    return Wait(line, own=all(_free(view, r) + mine[r] >= n for r, n in short))


def _free(view: ClusterView, res: str) -> float:
    return max(0.0, view.free.get(res, 0.0))


def holders(
    used: Mapping[str, float], lanes: Sequence[tuple[str, LaneShape, bool]]
) -> list[Holder]:
    """Pure: who holds the `used` resources, from the lanes known to hold some (who, shape,
    own), grouped by who; what they do not explain is other Ray work."""
    cpus: dict[str, float] = {}
    gpus: dict[str, float] = {}
    own: dict[str, bool] = {}
    for who, s, mine in lanes:
        cpus[who] = cpus.get(who, 0.0) + s.workers * s.cpus_per_worker
        gpus[who] = gpus.get(who, 0.0) + s.workers * s.gpus_per_worker
        own[who] = mine
    out = [Holder(who, cpus[who], gpus[who], own[who]) for who in cpus]
    rest_c = used.get("CPU", 0.0) - sum(cpus.values())
    rest_g = used.get("GPU", 0.0) - sum(gpus.values())
    if rest_c > 1e-9 or rest_g > 1e-9:
        out.append(Holder("other Ray work", max(rest_c, 0.0), max(rest_g, 0.0)))
    return out


def start_timed_out(error: BaseException) -> bool:
    """Whether fit() ended because its workers were never placed: Ray Train's
    `WorkerGroupStartupTimeoutError` inside its public `ControllerError`, past
    `FailureConfig.controller_failure_limit`. Named, not imported: the class is private (the
    other private names of Ray Train are in execution/raytrain.py, which is full)."""
    failure = getattr(error, "controller_failure", None)
    return type(failure).__name__ == "WorkerGroupStartupTimeoutError"


def bundle(shape: LaneShape) -> dict[str, float]:
    """One worker's bundle, as Ray Train asks for it (ScalingConfig.resources_per_worker)."""
    out = {"CPU": shape.cpus_per_worker}
    if shape.gpus_per_worker:
        out["GPU"] = shape.gpus_per_worker
    return out


def pending(shape: LaneShape) -> bool:
    """Whether a placement group of this lane's shape waits for resources now."""
    from ray.util import placement_group_table

    want = [bundle(shape)] * shape.workers
    for pg in placement_group_table().values():
        if pg.get("state") not in ("PENDING", "RESCHEDULING"):
            continue
        bundles = [b for _, b in sorted(pg["bundles"].items())]
        got = [{k: float(b[k]) for k in ("CPU", "GPU") if b.get(k)} for b in bundles]
        if got == want:
            return True
    return False


def cluster_view(lanes: Sequence[tuple[str, LaneShape, bool]]) -> ClusterView:
    """The cluster now: its resources, what is free, and who holds the rest (`lanes`: those
    known to hold resources, as `holders` takes them)."""
    import ray

    total, free = ray.cluster_resources(), ray.available_resources()
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    used = {r: total.get(r, 0.0) - free.get(r, 0.0) for r in ("CPU", "GPU")}
    return ClusterView(total, free, nodes, holders(used, lanes))


class RayProbe:
    """The lane pool's eyes on Ray: whether a starting lane's workers wait to be placed, and
    for what. `idle_lanes()`: (lane id, key) of the lanes a service's broker holds idle."""

    def __init__(self, idle_lanes: Callable[[], list[tuple[str, str]]] = list) -> None:
        self.idle_lanes = idle_lanes

    def known(self, own: Sequence[LaneShape]) -> list[tuple[str, LaneShape, bool]]:
        """The lanes known to hold resources: this sweep's running ones, and idle ones."""
        out = [("this sweep's running lanes", s, True) for s in own]
        for lane_id, key in self.idle_lanes():
            shape = LaneShape.from_key(key)
            if shape is not None:
                out.append((f"idle lanes of sweep {sweep_of(lane_id)}", shape, False))
        return out

    def waiting(self, shape: LaneShape, own: Sequence[LaneShape]) -> Wait | None:
        """What a lane of `shape` waits for, or None while none of its shape waits."""
        return self.explain(shape, own) if pending(shape) else None

    def explain(self, shape: LaneShape, own: Sequence[LaneShape]) -> Wait:
        return explain(shape, cluster_view(self.known(own)))
