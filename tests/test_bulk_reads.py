"""`show` and `ls` read a study's trials in bulk (sweeps/search/bulk.py): the same document as
from Optuna's own `get_trials`, on a real SQLite study with every kind of trial. No Ray."""

from __future__ import annotations

import math
import subprocess
import sys

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from sweeps import queries
from sweeps.search import bulk, reader, sql_rows

optuna.logging.set_verbosity(optuna.logging.ERROR)
D = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "hidden": IntDistribution(32, 256, step=32),
    "opt": CategoricalDistribution(["adamw", "sgd", None]),
}


def _fill(study) -> None:
    p = {"lr": 0.01, "hidden": 64, "opt": "sgd"}
    study.add_trials(
        [
            create_trial(params=p, distributions=D, value=0.5, user_attrs={"cost_usd": 0.1}),
            create_trial(params={**p, "opt": None}, distributions=D, value=math.inf),
            create_trial(
                params={**p, "hidden": 96},
                distributions=D,
                value=0.9,
                system_attrs={"constraints": [1.0]},  # infeasible: never the best
                user_attrs={"duration_s": 2.0, "mlflow_run_id": "r1"},
            ),
            create_trial(
                state=TrialState.PRUNED, params=p, distributions=D, intermediate_values={0: 0.2}
            ),  # fmt: skip
            create_trial(state=TrialState.FAIL, user_attrs={"sweeps.error": "boom"}),
        ]
    )
    t = study.ask()
    t.suggest_float("lr", 1e-4, 1e-1, log=True)
    study.set_user_attr("sweeps.wall_s", 12.5)


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_show_and_ls_match_optunas_own_read(tmp_path, monkeypatch, direction):
    _match_optunas_read(f"sqlite:///{tmp_path}/o.db", monkeypatch, direction)


def test_show_and_ls_match_optunas_own_read_on_postgresql(postgres, monkeypatch):
    """Through psycopg, no SQLAlchemy: the server's own datetimes and enum columns, the same
    document as Optuna's read."""
    url = postgres.create_database("bulk_reads")
    _match_optunas_read(url, monkeypatch, "maximize")
    monkeypatch.undo()
    assert isinstance(reader.open_reader(url).rows, sql_rows.PgRows)
    code = (
        "import sys; from sweeps import queries; "
        f"queries.show('b', {url!r}); queries.ls({url!r}); "
        "print('sqlalchemy' in sys.modules)"
    )  # (Optuna is: the infeasible trial's constraints are read through it, bulk.py)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert got.stdout.strip() == "False", got.stderr


def test_rows_of_a_trial_created_between_two_reads_are_passed_over():
    class Rows:  # a trial (id 2) asked for after the trials' read: its params and attrs come
        url, key = "sqlite:///x.db", "key"

        def __call__(self, sql: str, **params):
            if sql.startswith("SELECT trial_id, number"):
                return [(1, 0, "COMPLETE", "2026-12-07 10:00:00.5", None)]
            if "trial_values" in sql:
                return [(1, 0, 0.5, "FINITE"), (2, 0, 0.7, "FINITE")]
            if "trial_params" in sql:
                return [(2, "lr", 0.1, '{"name": "FloatDistribution", "attributes": {}}')]
            return [(2, "k", "1")] if "trial_user_attributes" in sql else []

    (t,) = bulk._read(Rows(), 1, None)
    assert t.values == [0.5] and t.params == {} and t.user_attrs == {}
    assert t.datetime_start is not None and t.datetime_start.microsecond == 500_000


def _match_optunas_read(url: str, monkeypatch, direction: str) -> None:
    study = optuna.create_study(study_name="b", storage=url, direction=direction)
    _fill(study)
    monkeypatch.setattr(queries.time, "time", lambda: 2e9)
    fast_show, fast_ls = queries.show("b", url), queries.ls(url)
    light = bulk.trials(optuna.load_study(study_name="b", storage=url))
    assert all(isinstance(t, bulk.LightTrial) for t in light), "the bulk path ran"
    # Optuna's own path: its study (`reader` without its light store) and its trials.
    monkeypatch.setattr(reader, "_light", lambda url: None)
    monkeypatch.setattr(bulk, "trials", lambda s, *a, **kw: s.get_trials(deepcopy=False))
    slow = queries.show("b", url)
    assert slow == fast_show
    # in the order they were suggested, as Optuna gives them (show and the summary print them)
    assert [list(t["params"]) for t in slow["trials"]] == [
        list(t["params"]) for t in fast_show["trials"]
    ]
    assert queries.ls(url) == fast_ls
    assert fast_show["best"]["number"] == (0 if direction == "minimize" else 1)
    assert fast_show["trials"][2]["infeasible"] == ["0"]


def test_the_drivers_incremental_reads_build_optunas_frozen_trials(tmp_path):
    url = f"sqlite:///{tmp_path}/o.db"
    study = optuna.create_study(study_name="f", storage=url, directions=["minimize"])
    _fill(study)
    trial = study.ask()
    trial.report(float("nan"), 0)
    trial.report(float("-inf"), 1)
    trial.set_user_attr("k", [1, "x"])
    backend = study._storage._backend
    theirs = backend._get_trials(study._study_id, None, set(), -1)
    ours = bulk.frozen_trials(backend.engine, study._study_id, None, set(), -1)
    assert repr(ours) == repr(theirs) and len(ours) == 7
    some = bulk.frozen_trials(backend.engine, study._study_id, None, {ours[5]._trial_id}, 5)
    assert [t.number for t in some] == [5, 6], "the running one asked for and the new one"
    done = bulk.frozen_trials(backend.engine, study._study_id, [TrialState.COMPLETE], set(), -1)
    assert [t.number for t in done] == [0, 1, 2]
    (one,) = bulk.frozen_trials(backend.engine, None, None, set(), -1, ours[5]._trial_id)
    assert repr(one) == repr(backend.get_trial(ours[5]._trial_id))
    sped = optuna.load_study(study_name="f", storage=url)
    bulk.speed_up(sped)
    assert repr(sped.get_trials()) == repr(theirs)
    assert repr(sped._storage.get_trial(ours[5]._trial_id)) == repr(one)
    with pytest.raises(KeyError):
        sped._storage._backend.get_trial(10_000)
