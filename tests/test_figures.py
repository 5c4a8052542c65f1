"""Issue 29 item 16: a sweep's wall time, trial time, cost and budget line add up, whatever
its drivers did: several drivers (a resume), one killed before it could record its end, one
that ran no trial, and one still running. Drivers stepped against fakes (no Ray)."""

from __future__ import annotations

import time

import pytest
from driver_fakes import Harness

from sweeps import queries
from sweeps.common import names

pytestmark = pytest.mark.timeout(60)


def _run(h: Harness, trials: int, seconds_each: float) -> None:
    """Start the driver and run `trials` trials on its lane, each `seconds_each` long."""
    h.driver.start()
    (lane,) = h.lanes
    for _ in range(trials):
        a = h.next(lane)
        h.clock.t += seconds_each
        h.report(a, lane, 1, val_accuracy=0.5)
        h.finish(a, lane, val_accuracy=0.5)


def _driver_at(h: Harness, t: float) -> Harness:
    h.clock.t = h.driver.started = t
    return h


def test_a_later_run_that_ran_no_trial_adds_no_wall_time():
    h = _driver_at(Harness(budget={"trials": 2, "parallel": 1}), 1000.0)
    _run(h, 2, 15.0)
    h.driver.finish()
    assert queries.describe(h.study)["wall_s"] == 30.0
    again = _driver_at(Harness(study=h.study, budget={"trials": 2, "parallel": 1}), 5000.0)
    again.driver.start()
    again.clock.t += 3.0  # the second run finds the budget spent: no lane starts
    assert not again.lanes and not again.driver.step(0)
    assert again.driver.finish().summary.wall_s == 3.0
    assert queries.describe(h.study)["wall_s"] == 30.0, "28.7 -> 31.3 -> 47.3 in the issue"


def test_after_a_resume_the_wall_time_covers_the_killed_driver_too():
    first = _driver_at(Harness(budget={"trials": 3, "parallel": 1}), 1000.0)
    _run(first, 1, 30.0)
    first.clock.t += 11.0  # past a heartbeat: its session is written
    first.driver.step(0)
    # Killed: it never records its end, and its heartbeat goes stale.
    key = names.driver_beat(first.driver.driver_id)
    first.study.set_user_attr(key, {**first.study.user_attrs[key], "t": 0})
    second = _driver_at(Harness(study=first.study, budget={"trials": 3, "parallel": 1}), 2000.0)
    _run(second, 2, 10.0)
    second.driver.finish()
    doc = queries.describe(first.study)
    assert doc["wall_s"] == 41.0 + 20.0, doc["wall_s"]  # not the last driver's 20 s alone
    assert doc["trial_s"] == 50.0


def test_a_running_sweep_shows_its_wall_trial_time_and_cost_so_far():
    start = time.time() - 30.0
    h = _driver_at(Harness(resources={"machine_type": "n1-standard-4"}), start)
    h.driver.start()
    (lane,) = h.lanes
    h.next(lane)
    h.clock.t = time.time()  # 30 s into the sweep, the trial is running
    h.driver.pulse._beat = 0.0  # its next turn beats
    h.driver.step(0)
    time.sleep(0.3)
    doc = queries.describe(h.study)
    assert doc["state"] == "running"
    assert doc["wall_s"] >= 30.0, doc
    assert doc["trial_s"] >= 0.2, doc
    assert doc["cost_usd"] > 0, doc  # 30 s of a quarter n1-standard-4


def test_the_figures_are_pure_functions_of_the_sessions():
    from sweeps.common import figures

    attrs = {
        names.driver_beat("a"): figures.session(100.0, 130.0, 3, 0.0),  # killed: last beat
        names.driver_beat("b"): figures.session(200.0, 225.0, 2, 0.0),
        names.driver_beat("c"): figures.session(300.0, 303.0, 0, 0.0),  # ran no trial
        names.driver_beat("d"): figures.session(400.0, 405.0, 1, 0.25),  # live
        names.driver_beat("old"): {"t": 0, "host": "h", "pid": 1},  # no session kept
    }
    assert figures.wall_s(attrs, {"d"}, 410.0) == 30 + 25 + 10
    assert figures.wall_s({**attrs, names.WALL_S: 7.0}, set(), 0) == 7 + 30 + 25 + 5
    assert figures.running_cost(attrs, {"d"}) == 0.25 and figures.running_cost(attrs, set()) == 0
    facts = [("COMPLETE", 4.0, 10.0), ("RUNNING", None, 15.0), ("FAIL", None, None)]
    assert figures.trial_s(facts, 20.0, live=True) == 9.0
    assert figures.trial_s(facts, 20.0, live=False) == 4.0  # a dead driver's trial: no clock


def test_a_budget_line_counts_the_trials_that_exist_or_says_why_not():
    from sweeps.driver.summary import explain_uncounted

    counts = {"COMPLETE": 4, "FAIL": 1}
    text = explain_uncounted("budget reached: 4/4 trials", counts, requeued=1, warm=0)
    assert text == "budget reached: 4/4 trials (5 trials in all; not counted: 1 re-queued)"
    assert explain_uncounted("budget reached: 5/5 trials", {"COMPLETE": 5}, 0, 0).endswith(
        "5/5 trials"
    )
    assert explain_uncounted("target reached: best 0.9 vs 0.8", counts, 1, 0).startswith("target")
