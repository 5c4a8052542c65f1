"""Issue 29 #7 and #9: a sweep's name already in the store, and `--enqueue`.

Running a spec under an existing sweep's name continues that sweep only when it is the same
sweep with budget left (and says so); otherwise one line, exit 2, before anything starts.
Configurations to try first must lie in the search space and fit the budget. The stores are
real (an Optuna study in SQLite, written as a driver writes it); no Ray: every case here ends
before a sweep would start.
"""

from __future__ import annotations

import json

import optuna
import pytest
from conftest import ROOT
from typer.testing import CliRunner

from sweeps.cli import app
from sweeps.common import names, paths
from sweeps.common.errors import SpecError
from sweeps.common.redact import redacted_spec_yaml
from sweeps.search.reuse import check_reuse
from sweeps.search.study import open_study
from sweeps.spec import load_spec

QUICKSTART = ROOT / "conf" / "quickstart.yaml"
PARAMS = {"lr": 0.01, "hidden": 64, "dropout": 0.1, "batch_size": 32}


@pytest.fixture
def finished(home):
    """The quickstart sweep as a finished run leaves it: 12 trials, its spec, its state."""
    spec = load_spec(QUICKSTART)
    study = open_study(spec, paths.storage_url())
    study.set_user_attr(names.SPEC, redacted_spec_yaml(spec))
    for i in range(12):
        dist = optuna.distributions.FloatDistribution(0.0005, 0.02, log=True)
        study.add_trial(
            optuna.trial.create_trial(
                params={"lr": 0.001 + i / 1000}, distributions={"lr": dist}, value=0.9
            )
        )
    study.set_user_attr(names.STATE, "finished")
    return study


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return r.exit_code, r.output


def test_a_smaller_budget_under_a_used_name_says_so_plainly(finished):
    for command in ("run", "submit"):
        code, text = _cli(command, str(QUICKSTART), "--trials", "4")
        assert code == 2, text
        assert text.count("\n") == 1 and "submitted" not in text
        assert "sweep 'quickstart' exists (finished, 12 trials)" in text
        assert "raise --trials above 12" in text and "a new --name" in text
    # The same budget again: nothing to run is said too, not the old result as if new.
    code, text = _cli("run", str(QUICKSTART))
    assert code == 2 and "a budget of 12 trials runs none" in text, text


def test_a_larger_budget_continues_the_same_sweep_and_says_so(finished):
    spec = load_spec(QUICKSTART, ["budget.trials=16", "budget.parallel=1"])
    note = check_reuse(spec, paths.storage_url())
    assert note == "continuing sweep 'quickstart' (finished, 12 trials): up to 4 trials more"


def test_another_spec_under_a_used_name_is_refused(finished):
    code, text = _cli("run", str(QUICKSTART), "--trials", "20", "--set", "trainer.epochs=3")
    assert code == 2, text
    assert "sweep 'quickstart' exists (finished, 12 trials) with another trainer.epochs" in text
    assert "a new --name starts a new sweep" in text and "sweeps resume quickstart" in text
    # Where the code lies is not what it is: a submitted driver reads it from its job folder.
    moved = load_spec(QUICKSTART, ["budget.trials=13"])
    moved = moved.model_copy(
        update={"trainer": moved.trainer.model_copy(update={"code_dir": "/elsewhere"})}
    )
    assert check_reuse(moved, paths.storage_url()).startswith("continuing")


def test_a_notebook_train_under_a_used_name_raises(finished):
    """The README's notebook snippet after the quickstart: the user's `train` must run, or the
    call must raise; it never returns the old sweep's trials."""
    import sweeps

    def train(config):  # pragma: no cover - never runs: the call raises first
        return {"val_accuracy": 1.0}

    spec = {**json.loads(json.dumps(load_spec(QUICKSTART).model_dump(by_alias=True)))}
    spec["budget"]["trials"] = 20
    with pytest.raises(SpecError, match=r"with another trainer.entrypoint.* a new name"):
        sweeps.run(spec, train=train)


def test_joining_a_running_sweep_is_said(finished):
    from sweeps.search.liveness import heartbeat

    heartbeat(finished, "other-driver")
    note = check_reuse(load_spec(QUICKSTART), paths.storage_url())
    assert note == "joining the running sweep 'quickstart' (12 trials so far)"


def test_enqueued_params_outside_the_space_are_exit_2(home, tmp_path):
    queue = tmp_path / "q.json"
    for row, why in [
        ({"lr": 5.0}, "lr: 5.0 is outside its range [0.0005, 0.02]"),
        ({"lrr": 0.01}, "'lrr' is not in the search space; did you mean 'lr'?"),
        ({"batch_size": 48}, "batch_size: 48 is not among its choices [32, 64, 128]"),
        ({"hidden": "wide"}, "hidden: 'wide' is not an integer"),
        ({"hidden": 65}, "hidden: 65 is not on its grid (low 32, step 32)"),
    ]:
        queue.write_text(json.dumps([PARAMS, row]))
        code, text = _cli("run", str(QUICKSTART), "--enqueue", str(queue))
        assert code == 2 and text.count("\n") == 1, text
        assert f"--enqueue {queue}[1]: {why}" in text
    assert not (home / "optuna.db").exists(), "nothing was started"


def test_enqueue_past_the_budget_is_refused_not_left_waiting(finished, tmp_path):
    """A queued configuration counts in the budget (as an enqueued trial counts in Optuna's
    n_trials): one the budget cannot run is refused, never left WAITING for ever."""
    queue = tmp_path / "q.json"
    queue.write_text(json.dumps([PARAMS]))
    code, text = _cli("run", str(QUICKSTART), "--enqueue", str(queue))
    assert code == 2, text
    assert "0 trials left of its budget of 12 for 1 configuration: raise --trials to 13" in text
    assert not [t for t in finished.get_trials() if t.state.name == "WAITING"]
    spec = load_spec(QUICKSTART, ["budget.trials=13"])
    assert check_reuse(spec, paths.storage_url(), [PARAMS]).startswith("continuing")
    # A new sweep: more configurations than trials is refused the same way.
    new = load_spec(QUICKSTART, ["budget.trials=1"], name="fresh")
    with pytest.raises(SpecError, match="2 configurations to try, and a budget of 1 trial"):
        check_reuse(new, paths.storage_url(), [PARAMS, {**PARAMS, "hidden": 96}])
