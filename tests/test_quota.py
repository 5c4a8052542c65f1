"""Issue 31 #5: quotas in money and GPU-hours, per team and per user, per calendar period.
`run` and `submit` refuse a sweep whose worst case may not fit what is left (exit 2, one line
with the numbers); `--allow-partial` caps its spend instead; `sweeps usage` shows the spend.
The store is real (Optuna studies in SQLite, with trials as a driver records them); no Ray:
a refusal ends before anything starts."""

from __future__ import annotations

import datetime as dt
import json

import optuna
import pytest
from conftest import ROOT
from typer.testing import CliRunner

from sweeps.cli import app
from sweeps.common import names, paths
from sweeps.search import quota
from sweeps.search.study import open_storage
from sweeps.spec.teams import Quota, Teams

QUICKSTART = ROOT / "conf" / "quickstart.yaml"
TEAMS = """teams:
  vision: {members: [alice, bob], quota: {usd: 1.0, period: month}}
users:
  bob: {quota: {gpu_hours: 2, period: week}}
"""
UTC = dt.UTC


def test_calendar_periods_in_utc():
    now = dt.datetime(2026, 12, 10, 15, 30, tzinfo=UTC)  # a Thursday
    assert quota.period_start("day", now) == (
        dt.datetime(2026, 12, 10, tzinfo=UTC),
        "today (2026-12-10)",
    )
    assert quota.period_start("week", now)[0] == dt.datetime(2026, 12, 7, tzinfo=UTC)  # Monday
    assert quota.period_start("month", now) == (
        dt.datetime(2026, 12, 1, tzinfo=UTC),
        "this month (2026-12)",
    )


def _teams() -> Teams:
    import yaml

    return Teams.model_validate(yaml.safe_load(TEAMS))


def test_what_is_left_counts_the_team_and_the_user():
    rows = [
        quota.Usage("a", "alice", "vision", 0.40, 0.0),
        quota.Usage("b", "bob", "vision", 0.25, 1.5),
        quota.Usage("c", "carol", "nlp", 9.0, 9.0),
    ]
    now = dt.datetime(2026, 12, 10, tzinfo=UTC)
    got = quota.left(_teams(), "bob", "vision", {"month": rows, "week": rows}, now)
    assert [(x.who, x.usd, x.gpu_hours) for x in got] == [
        ("team vision", pytest.approx(0.35), None),
        ("user bob", None, pytest.approx(0.5)),
    ]
    line = quota.refusal(got, 0.30, 0.6, "12 trials")
    assert line == (
        "quota: user bob has 0.50 GPU-hours of 2.00 GPU-hours left this week (from 2026-12-07); "
        "this sweep may cost 0.60 GPU-hours (12 trials); lower --trials, or --allow-partial to "
        "run until the quota is reached"
    )
    assert quota.refusal(got, 0.30, 0.4, "12 trials") is None
    assert quota.caps(got) == (pytest.approx(0.35), pytest.approx(0.5))


def test_a_quota_needs_a_limit():
    with pytest.raises(ValueError, match="a quota needs usd, gpu_hours or both"):
        Quota(period="week")


@pytest.fixture
def spent(home, tmp_path, monkeypatch):
    """alice's team spent $0.90 of its $1.00 this month, in one sweep of 3 trials."""
    p = tmp_path / "teams.yaml"
    p.write_text(TEAMS)
    monkeypatch.setenv("SWEEPS_TEAMS", str(p))
    storage = open_storage(paths.storage_url())
    study = optuna.create_study(study_name="earlier", storage=storage, direction="maximize")
    study.set_user_attr(names.OWNER, "alice")
    study.set_user_attr(names.TEAM, "vision")
    dist = optuna.distributions.FloatDistribution(0.0, 1.0)
    for i in range(3):
        t = optuna.trial.create_trial(
            params={"x": i / 3},
            distributions={"x": dist},
            value=0.5,
            user_attrs={"cost_usd": 0.30, "gpu_hours": 0.0},
        )
        t.datetime_start = dt.datetime.now()
        study.add_trial(t)


def _cli(user: str, *args: str) -> tuple[int, str]:
    env = {"COLUMNS": "200", "MLFLOW_TRACKING_USERNAME": user}
    r = CliRunner().invoke(app, list(args), env=env)
    return r.exit_code, r.output


@pytest.mark.parametrize("command", ["run", "submit"])
def test_a_sweep_over_the_quota_is_refused_with_the_numbers(spent, command):
    code, text = _cli(
        "alice", command, str(QUICKSTART), "--name", "next", "--set", "budget.trial_timeout_s=3600"
    )
    assert code == 2, text
    assert text.count("\n") == 1, text
    assert (
        text.startswith("error: quota: team vision has $0.10 of $1.00 left this month (")
        and "this sweep may cost $" in text
        and "--allow-partial" in text
    )


def test_an_unknown_worst_case_under_a_quota_is_refused(spent):
    code, text = _cli("alice", "run", str(QUICKSTART), "--name", "next")
    assert code == 2 and "this sweep's worst case is unknown: no bound on a trial's" in text, text


def test_a_user_outside_any_quota_is_not_held_back(spent):
    s, note = quota.admit(
        __import__("sweeps.spec", fromlist=["load_spec"]).load_spec(QUICKSTART),
        paths.storage_url(),
    )
    assert note is None  # this process's user is in no team of the file


def test_allow_partial_caps_the_spend_at_what_is_left(spent, monkeypatch):
    from sweeps.spec import load_spec

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    s, note = quota.admit(load_spec(QUICKSTART), paths.storage_url(), allow_partial=True)
    assert s.budget.max_cost_usd == pytest.approx(0.10)
    assert note == "quota: --allow-partial: the sweep stops launching trials at $0.10"


def test_usage_by_team_user_and_sweep(spent):
    code, text = _cli("bob", "usage", "--json")
    assert code == 0, text
    doc = json.loads(text)
    assert [(u["sweep"], u["owner"], u["team"]) for u in doc["sweeps"]] == [
        ("earlier", "alice", "vision")
    ]
    assert doc["sweeps"][0]["usd"] == pytest.approx(0.90)
    assert doc["quotas"] == [
        {"who": "team vision", "usd": 1.0, "gpu_hours": None, "spent_usd": 0.9,
         "spent_gpu_hours": 0.0}
    ]  # fmt: skip
    code, text = _cli("bob", "usage")
    assert code == 0 and "vision (all)" in text, text
    assert "quota team vision: $0.90 of $1.00 spent this month" in text
    code, text = _cli("bob", "usage", "--period", "year")
    assert code == 2 and "--period: 'year' is not day, week or month" in text
