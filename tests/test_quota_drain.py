"""Issue 31 #5: a running sweep that reaches its quota drains, counting what its team's other
sweeps spend meanwhile (admission saw only what was spent when it started). Real Optuna on
SQLite; the end-to-end case runs a real sweep on the session's local Ray."""

from __future__ import annotations

import datetime as dt
import threading
import time

import optuna
import pytest
from conftest import make_spec

from sweeps.common import names, paths
from sweeps.driver.quota_watch import QuotaWatch, exhausted
from sweeps.search.quota import Left
from sweeps.search.study import open_storage
from sweeps.spec.teams import Quota, load_teams

TEAMS = "teams:\n  vision: {members: [alice, bob], quota: {usd: 1.0, period: month}}\n"


def test_a_quota_with_nothing_left_drains_with_the_numbers():
    q = Quota(usd=1.0, period="month")
    left = Left("team vision", q, usd=0.25, gpu_hours=None, label="this month (2026-12)")
    assert exhausted([left]) is None
    spent = Left("team vision", q, usd=-0.5, gpu_hours=None, label="this month (2026-12)")
    assert exhausted([spent]) == (
        "quota reached: team vision has spent $1.50 of $1.00 this month (2026-12): "
        "running trials finish, no new ones start"
    )


def _spend(storage, name: str, owner: str, usd: float) -> None:
    """Another sweep of the team, as its driver records a trial."""
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    study.set_user_attr(names.OWNER, owner)
    study.set_user_attr(names.TEAM, "vision")
    dist = optuna.distributions.FloatDistribution(0.0, 1.0)
    t = optuna.trial.create_trial(
        params={"x": 0.5}, distributions={"x": dist}, value=0.5, user_attrs={"cost_usd": usd}
    )
    t.datetime_start = dt.datetime.now()
    study.add_trial(t)


@pytest.fixture
def teams(home, tmp_path, monkeypatch):
    p = tmp_path / "teams.yaml"
    p.write_text(TEAMS)
    monkeypatch.setenv("SWEEPS_TEAMS", str(p))
    monkeypatch.setenv("SWEEPS_OWNER", "alice")
    monkeypatch.setenv("SWEEPS_QUOTA_CHECK_S", "0.5")


def test_the_watch_counts_the_teams_other_sweeps(teams):
    url = paths.storage_url()
    storage = open_storage(url)
    watch = QuotaWatch.for_sweep(url, "alice", "vision")
    assert watch is not None and watch.every_s == 0.5
    now = dt.datetime.now(dt.UTC)
    _spend(storage, "bobs", "bob", 0.4)
    assert watch.check(storage, now) is None
    _spend(storage, "bobs-too", "bob", 0.7)  # the team, together: $1.10 of $1.00
    assert watch.check(storage, now).startswith("quota reached: team vision has spent $1.10")
    assert QuotaWatch.for_sweep(url, "carol", "") is None  # no quota applies: no thread
    assert load_teams().team_of("carol") == "default"


def test_a_running_sweep_drains_when_its_team_spends_the_quota(ray_cluster, teams):
    spec = make_spec(
        name="drains",
        budget={"trials": 40, "parallel": 1, "trial_timeout_s": 30},
        trainer={"epochs": 1},
    )
    url = paths.storage_url()

    def bob_spends() -> None:  # once alice's sweep has a trial, bob's sweep spends the rest
        storage = open_storage(url)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                s = optuna.load_study(study_name="drains", storage=storage)
                if any(t.state.name == "COMPLETE" for t in s.get_trials(deepcopy=False)):
                    break
            except KeyError:
                pass
            time.sleep(0.2)
        _spend(storage, "bobs", "bob", 5.0)

    from sweeps import api

    spender = threading.Thread(target=bob_spends, daemon=True)
    spender.start()
    out = api.run(spec, install_signals=False)
    spender.join()
    assert out.state == "stopped", (out.state, out.reason)
    assert out.reason.startswith("quota reached: team vision has spent $5."), out.reason
    study = optuna.load_study(study_name="drains", storage=open_storage(url))
    states = [t.state.name for t in study.trials]
    assert 1 <= len(states) < 40 and set(states) == {"COMPLETE"}, states
