"""The arbiter's policy, a pure function: priority tiers, weighted fair share, work-conserving,
and takes from the sweeps furthest above their shares."""

from __future__ import annotations

import pytest

from sweeps.service.fairshare import Ask, Grant, Take, decide, jain, targets, water_fill


def test_water_fill_splits_by_weight_and_caps_at_demand():
    assert water_fill({"a": 10, "b": 10}, {"a": 1, "b": 3}, 8) == {"a": 2.0, "b": 6.0}
    # a uses 1 of its 4: the rest goes to b (work-conserving)
    assert water_fill({"a": 1, "b": 10}, {"a": 1, "b": 1}, 8) == {"a": 1.0, "b": 7.0}
    assert water_fill({"a": 0, "b": 3}, {"a": 1, "b": 1}, 8) == {"a": 0.0, "b": 3.0}


def test_two_owners_each_get_one_lane_of_two():
    asks = [Ask("x", "t1", want=2, since=0), Ask("y", "t2", want=2, since=1)]
    assert targets(asks, 2, {}) == {"x": 1, "y": 1}


def test_team_weights_and_equal_split_inside_a_team():
    asks = [Ask("a1", "A", want=8), Ask("a2", "A", want=8), Ask("b", "B", want=8)]
    assert targets(asks, 8, {"A": 3, "B": 1}) == {"a1": 3, "a2": 3, "b": 2}


def test_high_priority_is_served_first_low_gets_what_is_left():
    asks = [
        Ask("low", "A", "low", want=8),
        Ask("norm", "B", "normal", want=3),
        Ask("hi", "C", "high", want=4),
    ]
    assert targets(asks, 8, {}) == {"hi": 4, "norm": 3, "low": 1}


def test_whole_lanes_never_exceed_capacity_or_demand():
    asks = [Ask(f"s{i}", f"t{i % 3}", want=i % 5 + 1) for i in range(11)]
    got = targets(asks, 7, {"t0": 1, "t1": 2, "t2": 1.5})
    assert sum(got.values()) == 7
    assert all(got[a.sweep] <= a.want for a in asks)


def test_free_lanes_go_to_the_sweep_below_its_share_oldest_first():
    asks = [Ask("old", "A", want=2, held=0, since=0), Ask("new", "A", want=2, held=0, since=5)]
    d = decide(asks, 3, {})
    assert [g.sweep for g in d.grants] == ["old", "new"]
    assert sorted(g.lanes for g in d.grants) == [1, 2] and d.takes == ()


def test_a_waiting_high_priority_sweep_takes_from_the_sweep_furthest_above_its_share():
    asks = [
        Ask("a", "A", want=2, held=1, since=0),
        Ask("b", "B", want=2, held=1, since=1),
        Ask("hi", "C", "high", want=1, held=0, since=2),
    ]
    d = decide(asks, 2, {})
    assert d.targets == {"hi": 1, "a": 1, "b": 0} or d.targets == {"hi": 1, "a": 0, "b": 1}
    over = "b" if d.targets["b"] == 0 else "a"
    assert d.grants == ()
    assert d.takes == (Take(over, 1, at_boundary=False),)


def test_a_sweep_that_cannot_checkpoint_gives_its_lane_at_the_trial_boundary():
    asks = [
        Ask("big", "A", want=2, held=2, preemptible=False),
        Ask("new", "B", want=2, held=0, since=1),
    ]
    assert decide(asks, 2, {}).takes == (Take("big", 1, at_boundary=True),)


def test_a_lane_already_being_taken_is_not_taken_twice():
    asks = [Ask("big", "A", want=2, held=2, releasing=1), Ask("new", "B", want=2, held=0)]
    d = decide(asks, 2, {})
    assert d.takes == () and d.grants == ()  # the lane on its way covers the new sweep's share


def test_nobody_is_taken_from_while_capacity_is_free():
    asks = [Ask("a", "A", want=1, held=1), Ask("b", "B", want=4, held=0)]
    d = decide(asks, 4, {})
    assert d.grants == (Grant("b", 3),) and d.takes == ()


@pytest.mark.parametrize(("xs", "want"), [([1, 1, 1], 1.0), ([1, 0, 0, 0], 0.25), ([], 1.0)])
def test_jain_index(xs, want):
    assert jain(xs) == pytest.approx(want)
