"""The sweep timeline's pure arithmetic: the --profile breakdown and the steady-state cost per
trial taken from one run (issue 18)."""

from __future__ import annotations

import math

from sweeps.common.timeline import Timeline, breakdown, steady_state


def _ev(t: float, event: str, **d) -> dict:
    return {"t": t, "event": event, **d}


EVENTS = [
    _ev(0.0, "process.start"),
    _ev(1.5, "imports.done"),
    _ev(1.6, "stores.start"),
    _ev(1.6, "ray.start"),
    _ev(2.1, "stores.ready"),
    _ev(4.0, "ray.ready"),
    _ev(4.1, "lane.launch", lane="a"),
    _ev(4.2, "lane.launch", lane="b"),
    _ev(9.0, "lane.first_request", lane="a"),
    _ev(9.1, "trial.assigned", trial=0, lane="a"),
    _ev(9.5, "trial.assigned", trial=1, lane="b"),
    _ev(11.0, "trial.ended", trial=0, lane="a", train_s=1.8),
    _ev(11.2, "trial.assigned", trial=2, lane="a"),
    _ev(11.6, "trial.ended", trial=1, lane="b", train_s=2.0),
    _ev(11.7, "trial.assigned", trial=3, lane="b"),
    _ev(12.0, "trial.ended", trial=2, lane="a", train_s=0.7),
    _ev(12.1, "trial.assigned", trial=4, lane="a"),
    _ev(12.9, "trial.ended", trial=3, lane="b", train_s=1.0),
    _ev(13.0, "trial.assigned", trial=5, lane="b"),
    _ev(13.0, "trial.ended", trial=4, lane="a", train_s=0.8),
    _ev(14.0, "trial.ended", trial=5, lane="b", train_s=0.9),
    _ev(15.5, "process.exit"),
]


def test_breakdown_spans_set_up_trials_and_the_end():
    rows = {label: (start, took) for label, start, took in breakdown(EVENTS)}
    assert rows["imports"] == (0.0, 1.5)
    assert math.isclose(rows["stores (Optuna + MLflow schemas)"][1], 0.5)
    assert math.isclose(rows["ray.init"][1], 2.4)
    assert math.isclose(rows["lanes: fit() to first request"][1], 4.9)
    assert rows["until first trial assigned"] == (0.0, 9.1)
    # first assignment to the LAST trial.ended; from the last trial.ended to exit
    assert math.isclose(rows["trials (first assigned to last ended)"][1], 14.0 - 9.1)
    assert math.isclose(rows["after the last trial until exit"][1], 1.5)
    assert rows["whole process (to exit or last record)"] == (0.0, 15.5)


def test_breakdown_without_an_exit_mark_ends_at_the_last_event_and_missing_phases_are_nan():
    rows = {label: took for label, _, took in breakdown(EVENTS[:-1])}
    assert rows["whole process (to exit or last record)"] == 14.0
    rows = {label: took for label, _, took in breakdown([_ev(0.0, "process.start")])}
    assert math.isnan(rows["ray.init"])


def test_steady_state_leaves_out_each_lanes_first_trial():
    pairs = sorted(steady_state(EVENTS))
    # lane a: trial 2 -> 4 (gap 0.9, trial 2 trained 0.7); lane b: 3 -> 5 (gap 1.3, trained 1.0)
    assert [(round(g, 6), tr) for g, tr in pairs] == [(0.9, 0.7), (1.3, 1.0)]


def test_steady_state_of_a_lane_with_one_or_two_trials_is_empty():
    assert steady_state(EVENTS[:12]) == []


def test_timeline_marks_are_in_time_order_and_relative_to_its_start():
    tl = Timeline(t0=0.0)
    tl.mark("a", x=1)
    tl.mark("b")
    events = tl.to_json()
    assert [e["event"] for e in events] == ["process.start", "a", "b"]
    assert events[1]["x"] == 1 and events[1]["t"] <= events[2]["t"]
    assert tl.first("a", x=1) is not None and tl.first("a", x=2) is None


def test_an_event_from_another_process_lands_in_time_order():
    tl = Timeline(t0=0.0)
    tl.mark("a")
    first = tl.events[-1][0]
    tl.mark("b")
    tl.mark_at(first + 1e-9, "from_writer", trial=3)  # between a and b (one monotonic clock)
    assert [e["event"] for e in tl.to_json()] == ["process.start", "a", "from_writer", "b"]
    assert tl.first("from_writer", trial=3) is not None
