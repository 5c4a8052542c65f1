"""Issue 32 #2: `sweeps extend NAME --top K --epochs N` trains finished trials N more epochs
from their last checkpoints, as new Optuna trials linked to them, with MLflow runs that
continue their sources' curves."""

from __future__ import annotations

from types import SimpleNamespace

import optuna
import pytest
from conftest import make_spec
from mlflow.tracking import MlflowClient

from sweeps import api
from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.driver import extend as ext
from sweeps.driver.outcomes import new_record
from sweeps.search.study import load_study


def _t(number, value, state="COMPLETE", attrs=None, constraints=None):
    return SimpleNamespace(
        number=number,
        values=None if value is None else [value],
        state=SimpleNamespace(name=state),
        user_attrs=attrs or {},
        constraints=constraints or {},
        params={"lr": 0.01},
    )


def _refused(fn, *args, match):
    with pytest.raises(SpecError, match=match) as e:
        fn(*args)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


def test_bad_command_lines_are_refused_with_one_line():
    _refused(ext.check_args, 2, None, 0, match=r"--epochs: must be 1 or more, got 0")
    _refused(ext.check_args, 0, None, 2, match=r"--top: must be 1 or more, got 0")
    _refused(ext.check_args, None, None, 2, match="give --top K or --trials")
    _refused(ext.check_args, 2, [3], 2, match="give --top K or --trials")
    assert ext.parse_trials("3, 7") == [3, 7] and ext.parse_trials(None) is None
    _refused(ext.parse_trials, "3,x", match="--trials: expected trial numbers")
    _refused(ext.check_state, "s", "running", match="sweep 's' is running: extend it once")
    _refused(ext.check_state, "s", "interrupted", match="`sweeps resume s` first")
    for ended in ("finished", "stopped", "failed"):
        ext.check_state("s", ended)


def test_top_trials_are_ranked_as_the_sweeps_best():
    trials = [
        _t(0, 0.5),
        _t(1, 0.9),
        _t(2, 0.9),  # a tie: the earlier trial ranks first, as with Optuna's best_trial
        _t(3, 0.99, constraints={"c": 1.0}),  # infeasible: never ranked
        _t(4, None, state="PRUNED"),
        _t(5, 0.7),
        _t(6, 0.95, attrs={names.PBT_FINAL: False}),  # pbt: a member's earlier segment
    ]
    assert [t.number for t in ext.top_trials(trials, 3, True, False, "s")] == [1, 2, 5]
    assert [t.number for t in ext.top_trials(trials, 2, False, False, "s")] == [0, 5]
    _refused(ext.top_trials, trials, 5, True, False, "s", match="has 4 completed feasible")
    _refused(ext.top_trials, trials, 1, True, True, "s", match="several objectives")
    assert [t.number for t in ext.named_trials(trials, [5, 0, 5], "s")] == [5, 0]
    _refused(ext.named_trials, trials, [9], "s", match="sweep 's' has no trial 9")
    _refused(ext.named_trials, trials, [4], "s", match="trial 4 of sweep 's' is PRUNED")


def test_a_trial_without_a_checkpoint_is_named(tmp_path):
    _refused(ext.extension_attrs, _t(6, 0.8), 2, 2, None, match="trial 6 has no checkpoint")
    gone = _t(7, 0.8, attrs={names.CHECKPOINT: str(tmp_path / "gone"), names.CHECKPOINT_STEP: 2})
    _refused(ext.extension_attrs, gone, 2, 2, None, match="trial 7's checkpoint is gone")
    kept = str(tmp_path / "ckpt")
    (tmp_path / "ckpt").mkdir()
    t = _t(8, 0.8, attrs={names.CHECKPOINT: kept, names.CHECKPOINT_STEP: 2})
    attrs = ext.extension_attrs(t, 3, 2, "run8")
    assert attrs[names.EXTENDS] == 8 and attrs[names.EXTENDS_RUN] == "run8"
    assert attrs[names.EXTEND_EPOCHS] == 5 and attrs[names.RESUME_STEP] == 2
    assert attrs[names.RESUME_CHECKPOINT] == kept
    # An extension's config trains to its source's epochs + N.
    rec = new_record(make_spec(), 9, 9, {"lr": 0.01}, attrs, 0.0)
    assert rec.config["epochs"] == 5 and rec.extends == 8 and rec.extends_run == "run8"
    # Extending an extension counts from its own epochs.
    assert ext.source_epochs(_t(9, 0.9, attrs={names.EXTEND_EPOCHS: 5}), {"epochs": 2}) == 5


def test_the_extensions_driver_runs_only_them():
    raw = {"budget": {"trials": 9, "parallel": 4, "target": 0.9, "timeout_s": 60}}
    out = ext.extension_spec(raw, 3, 2)
    assert out["budget"] == {"trials": 3, "parallel": 2}
    assert out["pruner"] == {"name": "none"} and raw["budget"]["trials"] == 9


def test_extend_continues_the_top_two_from_their_checkpoints(ray_cluster, home):
    spec = make_spec(
        name="ext",
        search_space={"lr": {"type": "categorical", "choices": [0.002, 0.01, 0.05]}},
        budget={"trials": 3, "parallel": 1},
        trainer={"epochs": 2},
        # Every epoch persisted, and the lane keeps every trial's last checkpoint.
        execution={"keep_checkpoints": 10, "checkpoint_min_interval_s": 0},
    )
    assert api.run(spec, install_signals=False).state == "finished"
    study = load_study("ext", f"sqlite:///{home}/optuna.db")
    stored_spec = study.user_attrs[names.SPEC]
    done = sorted(study.trials, key=lambda t: (-t.value, t.number))
    top = {t.number: t for t in done[:2]}

    out = api.extend("ext", top=2, epochs=2, install_signals=False)
    assert out.state == "finished", out.reason

    study = load_study("ext", f"sqlite:///{home}/optuna.db")
    assert len(study.trials) == 5 and study.user_attrs[names.SPEC] == stored_spec
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    doc = {t["number"]: t for t in api.show("ext")["trials"]}
    extensions = [t for t in study.trials if names.EXTENDS in t.user_attrs]
    assert sorted(t.user_attrs[names.EXTENDS] for t in extensions) == sorted(top)
    for t in extensions:
        src = top[t.user_attrs[names.EXTENDS]]
        assert t.state == optuna.trial.TrialState.COMPLETE and t.params == src.params
        assert t.user_attrs[names.RESUME_STEP] == 2, "it starts from the source's checkpoint"
        run, src_run = doc[t.number]["mlflow_run_id"], doc[src.number]["mlflow_run_id"]
        hist = sorted((m.step, m.value) for m in client.get_metric_history(run, "val_accuracy"))
        src_hist = client.get_metric_history(src_run, "val_accuracy")
        assert sorted(m.step for m in src_hist) == [1, 2]
        assert [s for s, _ in hist] == [3, 4], "the curve goes on past the source's last epoch"
        assert t.value == hist[-1][1], "Optuna holds the value after the extra epochs"
        tags = client.get_run(run).data.tags
        assert tags[names.EXTENDS] == str(src.number) and tags[names.EXTENDS_RUN] == src_run
        assert src.value == study.trials[src.number].value, "the source keeps its own value"


def test_a_retried_or_requeued_extension_is_still_one():
    from sweeps.contracts.records import TrialRecord
    from sweeps.driver import recovery, retries

    rec = TrialRecord(7, 8, {"lr": 0.01}, {"epochs": 5}, 1, 0.0, 0.0, extends=2, extends_run="r2")
    rec.resume_from = "/c/2-step3"
    attrs = retries.retry_attrs(rec)
    assert (attrs[names.EXTENDS], attrs[names.EXTENDS_RUN], attrs[names.EXTEND_EPOCHS]) == (
        2,
        "r2",
        5,
    )
    study = optuna.create_study()
    linked = {names.EXTENDS: 2, names.EXTENDS_RUN: "r2", names.EXTEND_EPOCHS: 5}
    study.enqueue_trial({"x": 1.0}, user_attrs={**linked, names.CANCELLED: True})
    t = study.ask()
    t.suggest_float("x", 0, 2)
    study.tell(t, state=optuna.trial.TrialState.FAIL)
    assert recovery.requeue_cancelled(study) == [0]
    (waiting,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert {k: waiting.user_attrs[k] for k in linked} == linked


def test_the_command_refuses_with_one_line_and_exit_2(home, monkeypatch):
    from typer.testing import CliRunner

    from sweeps.cli import app

    home.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{home}/optuna.db"
    study = optuna.create_study(study_name="theirs", storage=url, direction="maximize")
    study.set_user_attr(names.OWNER, "alice")
    study.set_user_attr(names.STATE, "running")  # with no driver beating: interrupted
    cases = [
        (["extend", "nosuch", "--top", "1", "--epochs", "1"], "no sweep named 'nosuch'"),
        (["extend", "theirs", "--top", "1", "--epochs", "0"], "--epochs: must be 1 or more"),
        (["extend", "theirs", "--top", "0", "--epochs", "1"], "--top: must be 1 or more"),
        (["extend", "theirs", "--epochs", "1"], "give --top K or --trials"),
        (["extend", "theirs", "--trials", "1", "--epochs", "1"], "alice's: bob may not extend"),
    ]
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "bob")
    for argv, line in cases:
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 2 and line in r.output, (argv, r.output)
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    r = CliRunner().invoke(app, ["extend", "theirs", "--trials", "1", "--epochs", "1"])
    assert r.exit_code == 2 and "`sweeps resume theirs` first" in r.output, r.output
