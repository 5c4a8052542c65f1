"""The lane start policy (`sweeps.execution.startcost.start_pays`): a lane starts beside running
trials only where it ends the sweep's work sooner, counting the CPU its start takes from them.
Pure unit tests, and the driver with fakes (no Ray): the warm service's case of issue 30, a
sweep that adopted an idle lane on 2 CPUs."""

from __future__ import annotations

import math

import pytest
from driver_fakes import Harness

from sweeps.contracts.protocol import Assignment, Stop
from sweeps.execution.startcost import START_S_GUESS, start_pays


def test_nothing_left_never_starts_and_the_first_lane_always_does():
    assert not start_pays(0, 1, 5.0, 1.0)
    assert not start_pays(0, 0, 5.0, None)
    assert start_pays(3, 0, 0.0, None, cpus=2, busy=0, draw=2)


@pytest.mark.parametrize("left", [1, 4, 12])
@pytest.mark.parametrize("lanes", [1, 2])
@pytest.mark.parametrize("trial_s", [0.0, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("start_s", [2.0, 10.0])
def test_with_cpus_to_spare_a_start_pays_once_the_work_left_outlasts_it(
    left, lanes, trial_s, start_s
):
    expected = left * trial_s / lanes > start_s
    assert start_pays(left, lanes, trial_s, start_s) is expected
    assert start_pays(left, lanes, trial_s, start_s, cpus=8, busy=lanes, draw=2) is expected


def test_the_cpu_a_start_takes_from_running_trials_counts_against_it():
    # One lane runs 1-CPU trials on 2 CPUs; a start draws 2 (a worker and its controller).
    assert start_pays(4, 1, 3.0, 10.0), "12 s of work outlasts a 10 s start"
    assert not start_pays(4, 1, 3.0, 10.0, cpus=2, busy=1, draw=2), (
        "the trial gets 2/3 of its CPU for 10 s: 12.7 s with the start, 12 s without"
    )
    assert start_pays(4, 1, 4.0, 10.0, cpus=2, busy=1, draw=2), "16 s alone, 14.7 s with it"


def test_a_driver_that_started_no_lane_yet_weighs_a_start_it_has_not_timed():
    # Nothing taken from the trials: start (as before).
    assert start_pays(4, 1, 0.0, None)
    # Beside running trials: a start is taken to cost START_S_GUESS.
    assert not start_pays(4, 1, 1.0, None, cpus=2, busy=1, draw=2), "the quickstart, warm"
    assert not start_pays(3, 1, 0.0, None, cpus=2, busy=1, draw=2), "no trial has run yet"
    long = 11 * 3.0
    assert long > START_S_GUESS and start_pays(11, 1, 3.0, None, cpus=2, busy=1, draw=2)


def test_more_lanes_running_make_one_more_worth_less():
    assert start_pays(6, 1, 4.0, 10.0, cpus=4, busy=1, draw=2)
    assert not start_pays(6, 3, 4.0, 10.0, cpus=4, busy=3, draw=2)
    assert start_pays(6, 3, 6.0, 10.0, cpus=math.inf, busy=3, draw=2), "12 s each, uncontended"


def _adopted(trials: int) -> tuple[Harness, object]:
    """A driver on 2 CPUs that adopted a warm idle lane, as a warm service sweep starts."""
    h = Harness(cpus=2, budget={"trials": trials, "parallel": 2})
    h.launcher.watch = lambda lane: None  # the real launcher watches the adopted lane's end
    lane = h.driver.pool.adopt("quickstart-warm-lane")
    h.driver.start()
    return h, lane


def test_a_warm_sweep_of_short_trials_starts_no_lane_beside_its_adopted_one():
    h, lane = _adopted(trials=4)
    assert h.lanes == [], "no start at once beside the adopted lane"
    assert h.driver.pool.active() == 2, "the second lane waits, counted against `parallel`"
    for value in (0.1, 0.2, 0.3, 0.4):
        a = h.next(lane)
        assert isinstance(a, Assignment)
        h.clock.t += 1
        h.driver.step(0)
        h.report(a, lane, 1, val_accuracy=value)
        h.finish(a, lane, val_accuracy=value)
    assert isinstance(h.next(lane), Stop)
    h.end_lane(lane)
    assert not h.driver.step(0)
    assert h.lanes == [] and h.driver.finish().state == "finished"


def test_a_warm_sweep_of_long_trials_starts_its_second_lane_once_it_pays():
    h, lane = _adopted(trials=12)
    assert isinstance(h.next(lane), Assignment)
    h.clock.t += 1
    h.driver.step(0)
    assert h.lanes == [], "11 trials x 1 s: less than a start and what it takes"
    h.clock.t += 2
    h.driver.step(0)
    assert len(h.lanes) == 1, "11 trials x 3 s: 33 s alone, 23 s with a second lane"
