"""Replicated winners (`evaluate`): the pure planning and statistics, the spec's checks, the
learning log's rendering, and the driver's side stepped against fakes (no Ray)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from conftest import make_spec
from driver_fakes import Harness
from scipy import stats as sps

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.contracts.protocol import Assignment, Decision, NextTrial, Stop, next_key
from sweeps.driver import replicates as r
from sweeps.driver.trial_config import trial_seed
from tracking import replicates as tr

pytestmark = pytest.mark.timeout(60)


# ----- statistics --------------------------------------------------------------------------
def test_stats_give_the_mean_sample_std_and_the_student_t_interval():
    values = [0.91, 0.93, 0.90, 0.95, 0.92]
    s = r.stats(values)
    assert s.n == 5 and s.values == tuple(values)
    assert s.mean == pytest.approx(0.922)
    assert s.std == pytest.approx(sps.tstd(values))
    half = 2.7764451051977987 * s.std / math.sqrt(5)  # t(0.975, 4 degrees of freedom)
    assert (s.low, s.high) == (pytest.approx(s.mean - half), pytest.approx(s.mean + half))
    low, high = sps.t.interval(0.95, 4, loc=s.mean, scale=sps.sem(values))
    assert (s.low, s.high) == (pytest.approx(low), pytest.approx(high))


def test_stats_of_one_value_have_no_interval_and_of_none_no_mean():
    one = r.stats([0.5])
    assert (one.n, one.mean, one.std, one.low, one.high) == (1, 0.5, None, None, None)
    assert "no interval" in one.text()
    none = r.stats([])
    assert none.mean is None and none.text() == "no replicate completed"
    assert r.stats([0.7, 0.7]).low == pytest.approx(0.7)  # no spread: a zero-width interval


def test_metrics_and_summary_name_what_the_trial_run_and_the_study_get():
    s = r.stats([1.0, 3.0])
    m = r.metrics("loss", s)
    assert set(m) == {"loss_n", "loss_mean", "loss_std", "loss_ci95_low", "loss_ci95_high"}
    assert m["loss_n"] == 2 and m["loss_mean"] == 2.0
    rec = r.summary(s, failed=1, seeds=[11, 12])
    assert rec["values"] == [1.0, 3.0] and rec["failed"] == 1 and rec["seeds"] == [11, 12]
    assert r.from_summary(rec) == s
    assert set(r.metrics("loss", r.stats([1.0]))) == {"loss_n", "loss_mean"}


# ----- planning ----------------------------------------------------------------------------
def _t(number: int, value: float | None, state: str = "COMPLETE", broken: float = 0.0):
    return SimpleNamespace(
        number=number, value=value, state=SimpleNamespace(name=state), constraints={"c": broken}
    )


def test_top_trials_are_the_best_feasible_complete_ones_in_the_direction():
    trials = [
        _t(0, 0.5),
        _t(1, 0.9),
        _t(2, 0.99, "PRUNED"),
        _t(3, 0.95, broken=1.0),  # breaks a constraint
        _t(4, 0.9),
        _t(5, None, "FAIL"),
    ]
    assert [t.number for t in r.top_trials(trials, True, 2)] == [1, 4]  # a tie: the earlier
    assert [t.number for t in r.top_trials(trials, False, 5)] == [0, 1, 4]


def test_plan_runs_round_by_round_with_numbers_and_seeds_of_their_own():
    a, b = r.Source(3, {"lr": 0.1}, 0.9), r.Source(7, {"lr": 0.2}, 0.8)
    items = r.plan([a, b], 3)
    assert [(i.source.number, i.index, i.count) for i in items] == [
        (3, 1, 3), (7, 1, 3), (3, 2, 3), (7, 2, 3), (3, 3, 3), (7, 3, 3)
    ]  # fmt: skip
    assert [i.number for i in items[:2]] == [1_000_003, 1_000_007]
    spec = make_spec(budget={"trials": 50})
    seeds = {trial_seed(spec, n) for n in range(50)}
    assert not seeds & {trial_seed(spec, i.number) for i in items}


def test_ranked_orders_by_mean_in_the_direction():
    by = {1: r.stats([0.9, 0.8]), 2: r.stats([0.86, 0.87]), 3: r.stats([])}
    assert r.ranked(by, maximize=True) == [2, 1]
    assert r.ranked(by, maximize=False) == [1, 2]


# ----- the spec ----------------------------------------------------------------------------
def test_the_spec_takes_evaluate_and_refuses_what_it_cannot_rank():
    spec = make_spec(evaluate={"top_k": 3, "replicates": 5})
    assert (spec.evaluate.top_k, spec.evaluate.replicates) == (3, 5)
    assert make_spec().evaluate is None
    bad = [
        ({"evaluate": {"replicates": 1}}, "greater than or equal to 2"),
        ({"evaluate": {"top_k": 0}}, "greater than or equal to 1"),
        ({"evaluate": {"top": 1}}, "unknown field"),
        (
            {
                "evaluate": {},
                "objectives": [{"metric": "val_accuracy"}, {"metric": "cost_usd"}],
            },
            "multi-objective",
        ),
        (
            {
                "evaluate": {},
                "search_space": {"resources.workers": {"type": "int", "low": 1, "high": 2}},
            },
            "resources.workers",
        ),
    ]
    for fields, words in bad:
        with pytest.raises((SpecError, ValueError), match=words):
            make_spec(**fields)


# ----- the learning log --------------------------------------------------------------------
def test_a_replicate_run_is_tagged_as_one_and_never_as_a_trial():
    tags = {names.TRIAL_NUMBER: "4", names.ROLE: "trial", names.SEED: "9"}
    out, name = tr.replicate_run(tags, "s", (4, 2, 5))
    assert names.TRIAL_NUMBER not in out and out[names.SEED] == "9"
    assert out[names.ROLE] == "replicate" and out[names.REPLICATE] == "2/5"
    assert out[names.REPLICATE_OF] == "4" and name == "s-trial-0004-rep2"


def test_the_report_section_lists_configurations_by_mean_with_their_interval():
    attrs = {
        names.replicates_of_trial(2): r.summary(r.stats([0.8, 0.82]), 0, [1, 2]),
        names.replicates_of_trial(5): r.summary(r.stats([0.9, 0.88]), 1, [3, 4]),
        names.replicates_of_trial(7): r.summary(r.stats([]), 2, [5, 6]),
        "other": 1,
    }
    rows = tr.collect(attrs, maximize=True)
    assert [x["number"] for x in rows] == [5, 2, 7]
    md = "\n".join(tr.render(rows, "acc"))
    s = r.stats([0.9, 0.88])
    half = (s.high - s.low) / 2
    assert f"| 5 | 0.8900 ± {half:.4f} [{s.low:.4f}, {s.high:.4f}] | 2 | 1 | 0.9, 0.88 |" in md
    assert "| 7 | no replicate completed | 0 | 2 |" in md
    assert tr.render([], "acc") == []


# ----- the driver --------------------------------------------------------------------------
def _replicate(h: Harness, lane, value: float) -> Assignment:
    a = h.next(lane)
    assert isinstance(a, Assignment), a
    assert h.report(a, lane, 1, val_accuracy=value) is Decision.CONTINUE
    h.finish(a, lane, val_accuracy=value)
    return a


def test_replicates_run_after_the_search_outside_the_study_and_rank_the_best_by_mean():
    h = Harness(
        budget={"trials": 3, "parallel": 1},
        pruner={"name": "median", "options": {"n_startup_trials": 0}},
        evaluate={"top_k": 2, "replicates": 2},
    )
    h.driver.start()
    (lane,) = h.lanes
    for v in (0.5, 0.9, 0.7):
        h.run_trial(lane, [v])
    # Trial 1 (0.9) and trial 2 (0.7) are rerun, round by round; their own values left out.
    got = [_replicate(h, lane, v) for v in (0.6, 0.72, 0.62, 0.74)]
    assert [a.trial_number for a in got] == [1_000_001, 1_000_002, 2_000_001, 2_000_002]
    assert [a.params for a in got] == [h.trial(n).params for n in (1, 2, 1, 2)]
    assert len({a.seed for a in got} | {h.trial(n).user_attrs[names.SEED] for n in range(3)}) == 7
    assert len(h.study.trials) == 3, "replicates are not Optuna trials"
    assert all(h.trial(n).intermediate_values.keys() == {1} for n in range(3))
    stop = h.next(lane)
    assert isinstance(stop, Stop) and "budget reached" in stop.reason
    h.end_lane(lane)
    assert not h.driver.step(0)
    out = h.driver.finish()
    assert out.state == "finished"
    rec = h.study.user_attrs[names.replicates_of_trial(2)]
    assert rec["values"] == [0.72, 0.74] and rec["n"] == 2
    assert h.study.user_attrs[names.replicates_of_trial(1)]["values"] == [0.6, 0.62]
    assert h.study.best_trial.number == 1, "Optuna's own best is the single value's"
    assert (out.summary.best_number, out.summary.best_value) == (2, pytest.approx(0.73))
    logged = dict(c[1] for c in h.tracker.calls if c[0] == "log_run_metrics")
    assert logged["run-2"]["val_accuracy_mean"] == pytest.approx(0.73)
    assert logged["run-1"]["val_accuracy_ci95_high"] > 0.61
    ends = [h.tracker.ends[a.trial_number] for a in got]
    assert [e.state for e in ends] == ["COMPLETE"] * 4


def test_a_lane_asking_while_search_trials_run_waits_and_a_cancel_runs_no_replicate():
    h = Harness(budget={"trials": 2, "parallel": 2}, evaluate={"top_k": 1, "replicates": 2})
    h.driver.start()
    first, second = h.lanes
    a = h.next(first)
    b = h.next(second)
    h.report(a, first, 1, val_accuracy=0.8)
    h.finish(a, first, val_accuracy=0.8)
    seq = h.seq[first.lane_id] = h.seq[first.lane_id] + 1
    h.channel.push(NextTrial(first.lane_id, seq))
    h.driver.step(0)
    assert next_key(first.lane_id, seq) not in h.channel.answers, "held: trial 1 still runs"
    h.driver.terminate()  # SIGTERM: running work is cancelled, nothing more is started
    h.driver.step(0)
    stop = h.channel.answers[next_key(first.lane_id, seq)]
    assert isinstance(stop, Stop), "the held lane is let go at once"
    assert h.report(b, second, 1, val_accuracy=0.9) is Decision.CANCEL
    h.finish(b, second, val_accuracy=0.9)
    for lane in (first, second):
        h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == "cancelled"
    assert not [k for k in h.study.user_attrs if k.startswith(names.REPLICATES_OF_TRIAL_PREFIX)]


def test_validate_refuses_a_bad_evaluate_in_one_line_with_exit_2(tmp_path):
    from typer.testing import CliRunner

    from sweeps.cli import app

    path = tmp_path / "s.yaml"
    path.write_text("name: s\nevaluate: {top_k: 2, replicates: 1}\n")
    out = CliRunner().invoke(app, ["validate", str(path)])
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and "evaluate.replicates" in lines[0], out.output
