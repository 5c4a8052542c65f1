"""`sweeps.optimize`: an Optuna objective written as Optuna's own examples are
(examples/optuna/pytorch_simple.py, which imports nothing from sweeps but the one call in its
__main__), run by that __main__, each trial on two DDP ranks, into a real Optuna study."""

from __future__ import annotations

import json
import runpy
import sys

import optuna
import pytest
from conftest import ROOT
from mlflow.tracking import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.contracts.protocol import StopStudy, Suggest
from sweeps.driver.define_by_run import DefineByRun

SCRIPT = ROOT / "examples" / "optuna" / "pytorch_simple.py"
# Enqueued, so the pruner's cut is certain: Adam at 1e-2 passes 30% accuracy after one epoch
# on digits, at 1e-5 it cannot.
GOOD = {"n_layers": 1, "n_units_l0": 64, "dropout_l0": 0.2, "optimizer": "Adam", "lr": 1e-2}
SLOW = {**GOOD, "lr": 1e-5}


@pytest.mark.usefixtures("ray_cluster")
def test_an_optuna_script_runs_unchanged_with_two_ranks_per_trial(
    home, tmp_path, monkeypatch, capsys
):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="simple", storage=storage, direction="maximize")
    study.enqueue_trial(GOOD)
    study.enqueue_trial(SLOW)
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    argv = ["--storage", storage, "--study-name", "simple", "--n-trials", "2", "--workers", "2"]
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv, "--record-dir", str(ranks)])

    runpy.run_path(str(SCRIPT), run_name="__main__")  # the script's own __main__

    out = capsys.readouterr().out
    assert "Number of pruned trials:  1" in out and "Number of complete trials:  1" in out
    study = optuna.load_study(study_name="simple", storage=storage)
    good, slow = study.trials
    assert (good.state, slow.state) == (TrialState.COMPLETE, TrialState.PRUNED)
    assert good.params == GOOD and slow.params == SLOW
    assert good.distributions == {
        "n_layers": IntDistribution(1, 3),
        "n_units_l0": IntDistribution(4, 128),
        "dropout_l0": FloatDistribution(0.2, 0.5),
        "optimizer": CategoricalDistribution(["Adam", "RMSprop", "SGD"]),
        "lr": FloatDistribution(1e-5, 1e-1, log=True),
    }, "each suggest_* reached the study as define-by-run, with its distribution"
    assert sorted(good.intermediate_values) == [0, 1]
    assert good.value == good.intermediate_values[1] > 0.3
    assert list(slow.intermediate_values) == [0] and slow.intermediate_values[0] < 0.3
    assert good.user_attrs["n_params"] == 64 * 64 + 64 + 64 * 10 + 10
    assert "n_params" not in slow.user_attrs
    df = study.trials_dataframe()
    assert list(df["state"]) == ["COMPLETE", "PRUNED"]
    assert {"params_lr", "params_optimizer", "user_attrs_n_params", "value"} <= set(df.columns)
    for t in study.trials:  # both ranks of each trial were given what the study recorded
        seen = [json.loads((ranks / f"trial{t.number}-rank{r}.json").read_text()) for r in (0, 1)]
        assert seen == [t.params, t.params]
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        filter_string=f"tags.`{names.ROLE}` = 'trial'",
    )
    logged = {int(r.data.tags[names.TRIAL_NUMBER]): r.data.params for r in runs}
    for t in study.trials:  # the suggestions reach the trial's MLflow run as its params
        assert {k: logged[t.number][k] for k in t.params} == {
            k: str(v) for k, v in t.params.items()
        }


@pytest.mark.usefixtures("ray_cluster")
def test_an_exception_outside_catch_stops_the_study_and_is_raised_again(home, tmp_path):
    import sweeps

    def objective(trial):
        x = trial.suggest_float("x", -1, 1)
        if trial.number == 0:
            raise KeyError(f"no data for x={x:.2f}")
        return x

    storage = f"sqlite:///{tmp_path}/o.db"
    with pytest.raises(KeyError, match="no data for x="):
        sweeps.optimize(objective, n_trials=3, study_name="raises", storage=storage)
    (t,) = optuna.load_study(study_name="raises", storage=storage).trials
    assert t.state == TrialState.FAIL and "x" in t.params, "no trial started after it"


def test_the_driver_answers_suggestions_from_its_own_trial():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()

    class Running:  # the one part of RunningTrials a suggestion reads
        def __init__(self):
            self.rec = type("Rec", (), {"trial": trial, "params": {}})()

        def get(self, key):
            return self.rec if key == ("lane", 1) else None

    host, running = DefineByRun(), Running()
    ask = Suggest("lane", 1, 1, "suggest_int", "units", {"low": 4, "high": 8, "step": 2})
    got = host.suggest(running, ask)
    assert got.name == "units" and got.value in (4, 6, 8) and not got.error
    assert trial.distributions["units"] == IntDistribution(4, 8, step=2)
    assert running.rec.params == {"units": got.value}
    bad = host.suggest(running, Suggest("lane", 1, 2, "suggest_float", "lr", {"low": 1, "high": 0}))
    assert "lr" not in trial.params and bad.error, "Optuna's own check, as a message for the ranks"
    assert host.suggest(running, Suggest("lane", 2, 1, "suggest_int", "u", {})).error
    assert host.stop(StopStudy("lane", 1, "first")) == host.stop(StopStudy("lane", 2, "second"))


def test_create_study_arguments_are_checked_as_optuna_checks_them():
    from sweeps.objectives import _catch, _directions, _storage_url

    assert _directions(None, None) == ["minimize"], "Optuna's default"
    assert _directions(optuna.study.StudyDirection.MAXIMIZE, None) == ["maximize"]
    assert _directions(None, ["minimize", "maximize"]) == ["minimize", "maximize"]
    with pytest.raises(SpecError, match="only one of"):
        _directions("minimize", ["maximize"])
    assert _catch(ValueError) == (ValueError,)
    with pytest.raises(SpecError, match="catch"):
        _catch(["ValueError"])
    with pytest.raises(SpecError, match="InMemoryStorage"):
        _storage_url(optuna.storages.InMemoryStorage())
