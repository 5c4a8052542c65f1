"""No silent stall: a lane whose workers cannot be placed says what it waits for, again at a
slow interval, and the sweep ends with that line once Ray Train gave up on the placement.

Pure parts here (the line, who holds what, when it is said, what the driver does with it); the
end-to-end run on the session's Ray is the last test."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, make_spec
from driver_fakes import Harness
from rich.console import Console

from sweeps import api
from sweeps.cli.progress import RichProgress
from sweeps.contracts.protocol import Assignment
from sweeps.contracts.records import SweepContext
from sweeps.driver.joblog import ProgressLines
from sweeps.execution.lane import NOT_PLACED, LaneShape, make_lane_id, not_placed, sweep_of
from sweeps.execution.placement import ClusterView, Holder, Wait, explain, holders
from sweeps.execution.pool import StallWatch

pytestmark = pytest.mark.timeout(120)

ONE_CPU = LaneShape(1, 1.0, 0.0)
TWO_CPU = LaneShape(2, 1.0, 0.0)


def _view(total, free, nodes=None, held=()):
    return ClusterView(total, free, nodes if nodes is not None else [total], list(held))


# ----- the line ------------------------------------------------------------------------------
def test_cpus_held_by_idle_lanes_of_another_sweep():
    idle = Holder("idle lanes of sweep X", cpus=2.0)
    w = explain(TWO_CPU, _view({"CPU": 2.0}, {"CPU": 0.0}, held=[idle]))
    assert w.line == "waiting for 2 CPUs: 0 of 2 free, held by idle lanes of sweep X (2 CPUs)"
    assert not w.own


def test_cpus_short_names_every_holder_largest_first():
    held = holders(
        {"CPU": 3.0},
        [("this sweep's running lanes", ONE_CPU, True), ("idle lanes of sweep X", TWO_CPU, False)],
    )
    w = explain(TWO_CPU, _view({"CPU": 4.0}, {"CPU": 1.0}, held=held))
    assert w.line == (
        "waiting for 2 CPUs: 1 of 4 free, held by idle lanes of sweep X (2 CPUs), "
        "this sweep's running lanes (1 CPU)"
    )
    assert w.own  # its own running lane's CPU is enough: it frees as that lane's trials end


def test_no_node_has_a_gpu():
    w = explain(LaneShape(1, 1.0, 1.0), _view({"CPU": 4.0}, {"CPU": 4.0}))
    assert w.line == "waiting for 1 GPU: no node has a GPU"


def test_gpus_short_before_cpus():
    nodes = [{"CPU": 8.0, "GPU": 1.0}]
    held = holders({"GPU": 1.0, "CPU": 1.0}, [])
    w = explain(LaneShape(1, 1.0, 1.0), _view(nodes[0], {"CPU": 7.0, "GPU": 0.0}, nodes, held))
    assert w.line == "waiting for 1 GPU: 0 of 1 free, held by other Ray work (1 GPU)"


def test_no_node_is_big_enough_for_one_worker():
    nodes = [{"CPU": 2.0}, {"CPU": 4.0}]
    w = explain(LaneShape(1, 8.0, 0.0), _view({"CPU": 6.0}, {"CPU": 6.0}, nodes))
    assert w.line == "waiting for 8 CPUs: no node has 8 CPUs for a worker (the largest: 4 CPUs)"


def test_more_workers_than_the_cluster_holds():
    w = explain(LaneShape(5, 1.0, 0.0), _view({"CPU": 4.0}, {"CPU": 4.0}))
    assert w.line == "waiting for 5 CPUs: the cluster holds 4 of its 5 workers"


def test_free_in_all_but_split_over_nodes():
    nodes = [{"CPU": 2.0}, {"CPU": 2.0}]
    w = explain(LaneShape(1, 2.0, 0.0), _view({"CPU": 4.0}, {"CPU": 2.0}, nodes))
    assert w.line == "waiting for 2 CPUs: free in all, but not 2 CPUs on one node"


def test_holders_leave_the_rest_to_other_ray_work():
    got = holders({"CPU": 4.0}, [("idle lanes of sweep X", ONE_CPU, False)] * 2)
    assert got == [
        Holder("idle lanes of sweep X", 2.0, 0.0, False),
        Holder("other Ray work", 2.0, 0.0, False),
    ]


def test_lane_ids_and_keys_name_their_sweep_and_shape():
    assert sweep_of(make_lane_id("my-sweep-lane2", 3)) == "my-sweep-lane2"
    shape = LaneShape(2, 0.5, 0.25, "spread")
    assert LaneShape.from_key(f"{shape.key}|code|/tmp/ckpt") == shape
    assert LaneShape.from_key("nonsense") is None


def test_a_service_brokers_idle_lanes_are_named_by_sweep_as_holders():
    import asyncio

    from sweeps.contracts.protocol import Stop, next_key
    from sweeps.execution.broker import Broker
    from sweeps.execution.placement import RayProbe

    async def go():
        b = Broker(owner=None, idle_s=60)
        lane = make_lane_id("other", 0)
        b.register(lane, "driver1", f"{TWO_CPU.key}|builtin|/ckpt")
        nxt = asyncio.create_task(b.next_trial(lane, 1))
        await asyncio.sleep(0.01)
        assert b.idle_lanes() == []  # a lane its driver still owns is not idle
        b.answer(next_key(lane, 1), Stop("budget reached", keep_warm=True))
        assert b.idle_lanes() == [(lane, f"{TWO_CPU.key}|builtin|/ckpt")]
        nxt.cancel()
        return RayProbe(b.idle_lanes).known([ONE_CPU])

    assert asyncio.run(go()) == [
        ("this sweep's running lanes", ONE_CPU, True),
        ("idle lanes of sweep other", TWO_CPU, False),
    ]


# ----- when it is said -----------------------------------------------------------------------
def test_the_watch_looks_early_then_says_it_again_slowly():
    watch = StallWatch.for_bound(60.0)
    assert watch.first_s == 10.0 and StallWatch.for_bound(4.0).first_s == 2.0
    assert not watch.due("a", 0.0, 9.9)
    assert watch.due("a", 0.0, 10.0)
    watch.looked["a"] = 10.0  # looked: not waiting yet
    assert not watch.due("a", 0.0, 19.0) and watch.due("a", 0.0, 20.0)
    watch.said["a"] = 20.0
    assert not watch.due("a", 0.0, 79.0) and watch.due("a", 0.0, 80.0)


class FakeProbe:
    def __init__(self, wait: Wait | None) -> None:
        self.wait = wait
        self.asked = 0

    def waiting(self, shape, own):
        self.asked += 1
        return self.wait

    def explain(self, shape, own):
        return self.wait or Wait("placed")


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_notice(self, ctx, line):
        self.lines.append(line)


def _stalled(wait: Wait | None):
    lines = Lines()
    h = Harness(observers=[lines], budget={"trials": 1, "parallel": 1})
    h.driver.pool.probe = FakeProbe(wait)
    h.driver.start()
    return h, lines


def test_a_lane_not_placed_says_so_repeats_slowly_and_ends_the_sweep_with_it():
    line = "waiting for 1 CPU: 0 of 4 free, held by other Ray work (4 CPUs)"
    h, lines = _stalled(Wait(line))
    (lane,) = h.lanes
    h.clock.t += 5
    h.driver.step(0)
    assert lines.lines == []  # a lane that is only slow to start says nothing
    h.clock.t += 5
    h.driver.step(0)
    assert lines.lines == [f"lane {lane.lane_id} {line} (10 s)"]
    h.clock.t += 30
    h.driver.step(0)
    assert len(lines.lines) == 1  # the slow interval
    h.clock.t += 30
    h.driver.step(0)
    assert len(lines.lines) == 2
    h.end_lane(lane, RuntimeError(f"{NOT_PLACED}: ControllerError: timed out"))
    assert h.driver.pool.lanes_lost() == 0  # not a worker group that died
    assert not h.driver.step(0)
    out = h.driver.finish()
    assert out.state == "failed"
    bound = "execution.lane_start_timeout_s=60"
    assert out.reason == f"lane not placed, twice ({bound}): {line}"
    assert len(h.lanes) == 1  # not replaced: it would wait for the same


def test_a_lane_that_waits_for_its_own_sweeps_lanes_is_replaced_not_failed():
    h, lines = _stalled(Wait("waiting for 2 CPUs: ...", own=True))
    (lane,) = h.lanes
    h.end_lane(lane, RuntimeError(f"{NOT_PLACED}: ControllerError: timed out"))
    assert h.driver.status.launching
    assert len(h.lanes) == 2 and h.driver.pool.lanes_lost() == 0


@pytest.mark.parametrize(
    ("wait", "queued"),
    [
        (Wait("waiting for 2 CPUs: 0 of 2 free, held by other Ray work (2 CPUs)"), True),
        (Wait("waiting for 1 GPU: no node has a GPU", fits=False), False),
    ],
)
def test_on_a_service_a_lane_that_fits_queues_and_one_that_never_fits_fails(wait, queued):
    h, lines = _stalled(wait)
    h.driver.channel.shared = True
    (lane,) = h.lanes
    h.end_lane(lane, RuntimeError(f"{NOT_PLACED}: ControllerError: timed out"))
    if queued:  # another sweep's work holds the cluster: the lane starts again, and says so
        assert h.driver.status.launching and len(h.lanes) == 2
        assert lines.lines[-1] == f"lane {lane.lane_id} still {wait.line}; queued"
    else:
        h.driver.step(0)
        assert h.driver.finish().state == "failed" and len(h.lanes) == 1


def test_only_a_shape_the_cluster_cannot_hold_is_said_to_never_fit():
    view = ClusterView({"CPU": 4}, {"CPU": 0}, [{"CPU": 4}], [])
    assert explain(LaneShape.of(2, 1.0, 0.0, "PACK"), view).fits
    assert not explain(LaneShape.of(5, 1.0, 0.0, "PACK"), view).fits
    assert not explain(LaneShape.of(1, 8.0, 0.0, "PACK"), view).fits


def test_a_sweep_with_a_running_lane_goes_on_without_the_one_not_placed():
    lines = Lines()
    h = Harness(observers=[lines], budget={"trials": 4, "parallel": 2})
    h.driver.pool.probe = FakeProbe(Wait("waiting for 1 CPU: 0 of 2 free"))
    h.driver.start()
    running, stuck = h.lanes
    a = h.next(running)  # this lane is placed: it runs a trial
    h.end_lane(stuck, RuntimeError(f"{NOT_PLACED}: ControllerError: timed out"))
    assert h.driver.status.launching and len(h.lanes) == 2  # not failed, not replaced
    bound = "execution.lane_start_timeout_s=60"
    assert lines.lines[-1] == (
        f"lane not placed, twice ({bound}): waiting for 1 CPU: 0 of 2 free; going on with 1 lane"
    )
    h.finish(a, running, val_accuracy=0.5)
    assert isinstance(h.next(running), Assignment)


def test_a_placed_lane_says_nothing():
    h, lines = _stalled(None)
    h.clock.t += 100
    h.driver.step(0)
    assert lines.lines == [] and h.driver.pool.probe.asked == 1
    assert not not_placed(None) and not_placed(f"{NOT_PLACED}: x")


def test_the_notice_reaches_the_driver_log_and_the_terminal(home):
    spec = make_spec(name="stall")
    ctx = SweepContext(spec, "stall", "memory", 0.0)
    log, term = io.StringIO(), io.StringIO()
    ProgressLines(log).on_notice(ctx, "lane l waiting for 1 GPU: no node has a GPU")
    bar = RichProgress(spec, Console(file=term, width=200))
    bar.on_notice(ctx, "lane l waiting for 1 GPU: no node has a GPU")
    bar.close()
    assert log.getvalue() == "stall: lane l waiting for 1 GPU: no node has a GPU\n"
    assert "stall: lane l waiting for 1 GPU: no node has a GPU" in term.getvalue()


# ----- end to end, on the session's Ray ------------------------------------------------------
@pytest.mark.usefixtures("ray_cluster")
def test_a_lane_that_cannot_be_placed_says_so_and_the_sweep_ends_with_it(home):
    """Another job holds every CPU of the cluster (a placement group of its own): the sweep's
    lane fits the cluster but not now. It says what it waits for, and once Ray Train timed its
    placement out twice (a 3 s bound here), the sweep fails with that line (exit code 1)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    cpus = ray.cluster_resources()["CPU"]
    hog = placement_group([{"CPU": cpus}])
    ray.get(hog.ready(), timeout=60)
    log = io.StringIO()
    spec = make_spec(
        name="stall",
        budget={"trials": 1, "parallel": 1},
        trainer={"epochs": 1},
        execution={"lane_start_timeout_s": 3},
    )
    try:
        out = api.run(spec, callbacks=[ProgressLines(log)], install_signals=False)
    finally:
        remove_placement_group(hog)
    waits = f"waiting for 1 CPU: 0 of {cpus:g} free, held by other Ray work ({cpus:g} CPUs)"
    said = [x for x in log.getvalue().splitlines() if waits in x]
    assert said and said[0].startswith("stall: lane stall-lane0-"), log.getvalue()
    assert out.state == "failed"  # `sweeps run` and a submitted driver exit 1
    assert out.reason == f"lane not placed, twice (execution.lane_start_timeout_s=3): {waits}"


def test_sweeps_run_says_no_node_has_a_gpu_then_exits_1_with_it(home):
    """The terminal of `sweeps run` (its own local Ray, no GPU): the lane's wait is said above
    the progress bar, and the run's last line and exit code give the sweep's end."""
    env = {**os.environ, "SWEEPS_HOME": str(home), "COLUMNS": "200"}
    for var in ("RAY_ADDRESS", "SWEEPS_VERBOSE"):
        env.pop(var, None)
    sets = {
        "resources.gpus_per_worker": 1,
        "resources.machine_type": "local",
        "execution.lane_start_timeout_s": 2,
        "trainer.epochs": 1,
    }
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    cmd = [sys.executable, "-m", "sweeps.cli", "run", "conf/quickstart.yaml", "--name", "gpu"]
    cmd += ["--trials", "1", "--parallel", "1", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    waits = "waiting for 1 GPU: no node has a GPU"
    assert r.returncode == 1, r.stdout + r.stderr
    assert re.search(rf"^gpu: lane gpu-lane0-\w+ {waits} \(\d+ s\)$", r.stderr, re.M), r.stderr
    assert f"lane not placed, twice (execution.lane_start_timeout_s=2): {waits}" in r.stdout
