"""The arbiter's pure parts, without Ray: its board of the drivers' reports, the capacity in
lanes, the queue's order and estimate, and the driver's choice of what to give back."""

from __future__ import annotations

import pytest

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.contracts.records import TrialRecord
from sweeps.driver import arbitration, pause
from sweeps.driver.arbitration import LaneView, choose
from sweeps.service.arbiter import SILENT_S, Board, Entry, capacity
from sweeps.service.fairshare import Ask, Take


def test_capacity_counts_whole_lanes_of_cpus_or_of_gpus():
    assert capacity({"CPU": 2.0}, 1.0, 0.0) == 2
    assert capacity({"CPU": 5.0}, 2.0, 0.0) == 2
    assert capacity({"CPU": 64.0, "GPU": 8.0}, 4.0, 1.0) == 8  # GPU lanes count GPUs
    assert capacity({"CPU": 64.0, "GPU": 8.0}, 4.0, 0.25) == 32
    assert capacity({"CPU": 2.0}, 0.0, 0.0) == 0


def _entry(sweep, now, **kw):
    return Entry(Ask(sweep, "default", **kw), now)


def test_two_sweeps_share_and_a_silent_one_drops_out():
    b = Board()
    b.report(_entry("a", 0.0, want=2, held=2, since=0))
    assert b.answer("a", 2, 0.0) == (2, None)  # alone: both lanes
    b.report(_entry("b", 1.0, want=2, since=1))
    assert b.answer("b", 2, 1.0) == (1, None)
    # a is asked to give one back: it holds two, its target is one, and none is free
    assert b.answer("a", 2, 1.0) == (1, Take("a", 1, at_boundary=False))
    # b's driver stops reporting: a gets both lanes again
    b.report(_entry("a", 2.0 + SILENT_S, want=2, held=1, since=0))
    assert b.answer("a", 2, 2.0 + SILENT_S) == (2, None)
    assert [e.ask.sweep for e in b.live(2.0 + SILENT_S)] == ["a"]


def test_a_high_priority_sweep_takes_from_the_one_furthest_above_its_share():
    b, now = Board(), 5.0
    b.report(_entry("fs-a", now, want=2, held=1, since=0))
    b.report(_entry("fs-b", now, want=2, held=1, since=1))
    b.report(_entry("fs-c", now, priority="high", want=1, since=2))
    assert b.answer("fs-c", 2, now) == (1, None)
    got = {s: b.answer(s, 2, now) for s in ("fs-a", "fs-b")}
    assert sorted(t for t, _ in got.values()) == [0, 1]
    (taken,) = [s for s, (_, take) in got.items() if take]
    assert got[taken] == (0, Take(taken, 1, at_boundary=False))
    # once it says the lane is on its way back, it is not taken twice
    b.report(_entry(taken, now, want=2, held=1, releasing=1, since=1))
    assert b.answer(taken, 2, now)[1] is None


def test_a_sweep_that_cannot_checkpoint_gives_its_lane_at_a_trial_boundary():
    b = Board()
    b.report(_entry("a", 0.0, want=2, held=2, since=0, preemptible=False))
    b.report(_entry("b", 0.0, priority="high", want=1, since=1))
    assert b.answer("a", 2, 0.0) == (1, Take("a", 1, at_boundary=True))


def test_the_queue_lists_running_sweeps_then_the_waiting_ones_with_an_estimate():
    b = Board()
    b.report(Entry(Ask("run", "t", "high", 1, 1, since=0), 0.0, "alice", left_s=100.0))
    b.report(Entry(Ask("q1", "t", want=1, since=1), 0.0, "bob", left_s=50.0))
    b.report(Entry(Ask("q2", "t", "low", want=1, since=0.5), 0.0, "carol"))
    rows = b.rows(1, 0.0)
    assert [(r["sweep"], r["state"], r.get("position")) for r in rows] == [
        ("run", "running", None),
        ("q1", "queued", 1),
        ("q2", "queued", 2),  # low priority: behind bob's though submitted before it
    ]
    assert rows[1]["start_in_s"] == 100.0  # the work ahead of it over the lanes
    assert rows[2]["start_in_s"] == 150.0
    assert rows[0]["owner"] == "alice" and rows[1]["target"] == 0
    b.report(Entry(Ask("run", "t", "high", 1, 1, since=0), 0.0, "alice"))  # length unknown
    assert b.rows(1, 0.0)[1]["start_in_s"] is None


def test_what_a_take_gives_back_starting_lanes_first_then_the_latest_checkpoints():
    lanes = [
        LaneView("l0", True, trial=10, checkpoint_step=None),
        LaneView("l1", True, trial=11, checkpoint_step=4),
        LaneView("l2", False),
        LaneView("l3", True, trial=12, checkpoint_step=2),
        LaneView("l4", True),  # between trials: it goes when it asks
    ]
    assert choose(1, lanes, at_boundary=False) == (["l2"], [])
    assert choose(2, lanes, at_boundary=False) == (["l2"], [11])
    assert choose(4, lanes, at_boundary=False) == (["l2"], [11, 12, 10])
    assert choose(3, lanes, at_boundary=True) == (["l2"], [])


def test_a_preempted_trial_is_queued_again_from_its_checkpoint_with_its_params():
    rec = TrialRecord(3, 7, {"lr": 0.1}, {"epochs": 5}, 0, 0.0, 0.0)
    rec.checkpoint, rec.checkpoint_step = "/ck/3/step4", 4
    assert arbitration.requeue_attrs(rec) == {
        names.REQUEUED_FROM: 3,
        names.RESUME_CHECKPOINT: "/ck/3/step4",
        names.RESUMED_FROM_TRIAL: 3,
        names.RESUME_STEP: 4,
    }
    line = arbitration.preempted_line(3, 5, 4)
    assert line.startswith("preempted: trial 3 parked") and "(step 4)" in line


def test_one_trial_parks_at_its_checkpoint_while_the_others_run_on():
    parking = pause.Parking(every=1, min_interval_s=0.0)
    mine = TrialRecord(0, 1, {}, {}, 0, 0.0, 0.0)
    other = TrialRecord(1, 2, {}, {}, 0, 0.0, 0.0)
    parking.request_trial(1, now=10.0)
    mine.checkpoint_step = other.checkpoint_step = 3
    assert not parking.parks(other, 4, last=8, now=11.0)
    assert parking.parks(mine, 4, last=8, now=11.0) and parking.parked == {1: 3}


def test_a_priority_is_high_normal_or_low(monkeypatch):
    monkeypatch.delenv(arbitration.PRIORITY_ENV, raising=False)
    assert arbitration.priority() == "normal"
    arbitration.set_priority("high")
    assert arbitration.priority() == "high"
    with pytest.raises(SpecError, match="priority: 'urgent' is not one of high, normal, low"):
        arbitration.set_priority("urgent")


class _Launcher:
    def __init__(self) -> None:
        self.launched: list[str] = []

    def launch(self, lane) -> None:
        self.launched.append(lane.lane_id)


def test_the_lane_pool_holds_no_more_lanes_than_the_arbiter_allows():
    from sweeps.execution.lane import LaneShape
    from sweeps.execution.pool import LanePool

    launcher, allowed = _Launcher(), [1]
    pool = LanePool(launcher, "s", LaneShape.of(1, 1.0, 0.0))
    pool.limit = lambda: allowed[0]
    first, second = pool.start(), pool.start()
    assert launcher.launched == [first.lane_id] and pool.held() == 1 and pool.waiting()
    first.ready = True
    allowed[0] = 2
    pool.launch_waiting()
    assert launcher.launched == [first.lane_id, second.lane_id] and pool.held() == 2
    allowed[0] = 1  # a lane that asks for a trial now goes back: its resources go to Ray
    assert "fair share" in (pool.recycle_reason(first) or "")
    pool.mark_stopping(first.lane_id)
    assert pool.recycle_reason(second) is None


def test_a_sweep_given_no_lane_says_queued_until_it_holds_one():
    import optuna
    from conftest import make_spec

    from sweeps.common import names
    from sweeps.driver.arbitration import Arbitration
    from sweeps.queries import sweep_state

    class Pool:
        lanes = 0

        def held(self) -> int:
            return self.lanes

    class Driver:
        study = optuna.create_study()

    pool = Pool()
    arb = Arbitration(make_spec(), pool, None, "key")
    arb.driver = Driver()
    arb._apply(0, None, 0)  # the arbiter's target: no lane yet
    assert Driver.study.user_attrs[names.SERVICE_QUEUED] is True
    assert sweep_state(Driver.study.user_attrs, False, True) == "queued"
    pool.lanes = 1
    arb._apply(1, None, 0)
    attrs = Driver.study.user_attrs
    assert attrs[names.SERVICE_QUEUED] is False and sweep_state(attrs, False, True) == "running"
    assert sweep_state({names.SERVICE_QUEUED: True}, True, True) == "running"  # a trial runs
    pool.lanes, arb.want = 0, 0  # its last lane gone, nothing left to run: ending, not queued
    arb._apply(0, None, 0)
    assert Driver.study.user_attrs[names.SERVICE_QUEUED] is False
