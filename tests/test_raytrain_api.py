"""Ray Train functions run unchanged as trials: `ray.train.report`, `get_checkpoint`,
`get_context` and `ray.train.torch.prepare_*` serve the trial, not the lane's long-lived Ray
Train session (issue 28 item 3)."""

from __future__ import annotations

import json
import os
import shutil

import optuna
import pytest
import ray
import ray.train
import ray.train.collective
import torch
from conftest import ROOT, make_spec
from ray.train import Checkpoint, get_checkpoint, report  # bound before any trial starts
from ray.train.v2._internal.execution import train_fn_utils as tfu

from sweeps import api
from sweeps.execution.raytrain import trial_session
from sweeps.worker import runtime

SCRIPTS = ROOT / "tests" / "raytrain"


def _ctx(**kw) -> runtime.TrialContext:
    base = dict(rank=0, world_size=1, local_rank=0, device=None, data_dir=None, trial_number=3,
                seed=0, params={}, checkpoint_min_interval_s=60.0)  # fmt: skip
    return runtime.TrialContext(**{**base, **kw})


@pytest.fixture
def lane_session():
    """Ray Train's own local-mode session stands for the lane's (no cluster needed)."""
    inner = tfu.LocalTrainFnUtils(experiment_name="lane")
    tfu.set_train_fn_utils(inner)
    yield inner
    tfu.set_train_fn_utils(None)
    runtime._set_context(None)


def _folder(path, **files) -> str:
    os.makedirs(path, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return str(path)


def test_reports_and_checkpoints_belong_to_the_trial(lane_session, tmp_path):
    # The lane's session holds an earlier trial's checkpoint: the new trial must not see it.
    lane_session.report({}, checkpoint=Checkpoint.from_directory(_folder(tmp_path / "old")))
    ctx = _ctx()
    runtime._set_context(ctx)
    with trial_session():
        assert get_checkpoint() is None and ray.train.get_checkpoint() is None
        assert ray.train.get_context().get_world_size() == 1
        ckpt = Checkpoint.from_directory(_folder(tmp_path / "e1", **{"model.pt": "w1"}))
        report({"accuracy": 0.5, "note": "text"}, checkpoint=ckpt)
        # Through the trial's runtime (step 1, a checkpoint despite the sweep's 60 s interval)
        # to the lane's Ray Train session, which uploaded it.
        assert ctx.step == 1
        assert lane_session._get_last_metrics() == {"accuracy": 0.5, "trial_number": 3, "step": 1}
        with ray.train.get_checkpoint().as_directory() as d:
            assert open(os.path.join(d, "model.pt")).read() == "w1"
            assert json.load(open(os.path.join(d, runtime.META)))["trial_number"] == 3
        assert len(ray.train.get_all_reported_checkpoints()) == 1
        assert ray.train.collective.broadcast_from_rank_zero({"a": 1}) == {"a": 1}
        ray.train.collective.barrier()
        report({"accuracy": 0.6})  # metrics only: no upload
        assert ctx.step == 2
    assert tfu.get_train_fn_utils() is lane_session, "the lane's session is back"


def test_a_resumed_trial_gets_its_own_checkpoint_and_step(lane_session, tmp_path):
    saved = _folder(tmp_path / "saved", **{"model.pt": "w2", runtime.META: '{"step": 2}'})
    ctx = _ctx(resume_from=Checkpoint.from_directory(saved))
    runtime._set_context(ctx)
    try:
        with trial_session():
            ckpt = ray.train.get_checkpoint()
            with ckpt.as_directory() as d:
                assert open(os.path.join(d, "model.pt")).read() == "w2"
            assert ctx.step == 2, "reports continue after the resumed step"
            report({"accuracy": 0.7})
            assert ray.train.get_checkpoint() is ckpt and ctx.step == 3
    finally:
        shutil.rmtree(ctx.resume_dir or tmp_path / "none", ignore_errors=True)


def test_what_a_trial_cannot_honour_fails_with_one_line(lane_session, tmp_path):
    from ray.train import CheckpointUploadMode

    runtime._set_context(_ctx())
    ckpt = Checkpoint.from_directory(_folder(tmp_path / "c"))
    with trial_session():
        cases = [
            (lambda: ray.train.get_dataset_shard("train"), "get_dataset_shard cannot be hon"),
            (lambda: report({}, checkpoint=ckpt, validation=True), "validation=...) cannot"),
            (lambda: report({}, checkpoint=ckpt,
                            checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD), "NO_UPLOAD"),
            (lambda: report({"loss": torch.tensor(1.0)}), "metric 'loss' is a torch tensor"),
        ]  # fmt: skip
        for call, says in cases:
            with pytest.raises(ValueError) as e:
                call()
            assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.usefixtures("ray_cluster")
def test_ray_train_quickstart_runs_unchanged_as_a_sweep(home, tmp_path):
    """Two trials on one 2-worker lane: the second must not see the first's checkpoints, and
    successive halving stops it after its first report. (Successive halving compares a step's
    value with every trial's at that rung, running or not yet told, so the decision does not
    wait on the first trial's tell.)"""
    spec = make_spec(
        name="raytrain",
        objective={"metric": "accuracy", "direction": "maximize"},
        search_space={"lr": {"type": "float", "low": 1e-6, "high": 0.5, "log": True}},
        pruner={
            "name": "successive_halving",
            "options": {"min_resource": 1, "reduction_factor": 2},
        },
        budget={"trials": 2, "parallel": 1},
        resources={"workers": 2},
        execution={"checkpoint_min_interval_s": 60},  # Ray code's checkpoints are kept anyway
        trainer={
            "entrypoint": "ray_quickstart:train_func",
            "code_dir": str(SCRIPTS),
            "epochs": 3,
            "batch_size": 32,
            "params": {"hidden": 32, "record_dir": str(tmp_path)},
        },
    )
    out = api.run(spec, enqueue=[{"lr": 0.3}, {"lr": 1e-6}], install_signals=False)
    assert out.state == "finished"
    study = optuna.load_study(study_name="raytrain", storage=f"sqlite:///{home}/optuna.db")
    first, second = study.trials
    assert first.state.name == "COMPLETE", first
    assert sorted(first.intermediate_values) == [1, 2, 3] and first.value > 0.8
    assert second.state.name == "PRUNED" and list(second.intermediate_values) == [1]
    assert first.user_attrs["sweeps.checkpoint"], "the trial's checkpoint record"
    assert first.user_attrs["sweeps.lane"] == second.user_attrs["sweeps.lane"]
    seen = [json.loads(line) for line in open(tmp_path / "seen.jsonl")]
    by_lr = {lr: [s for s in seen if s["lr"] == lr] for lr in (0.3, 1e-6)}
    assert {(s["rank"], s["world_size"]) for s in seen} == {(0, 2), (1, 2)}
    assert sorted(s["epoch"] for s in by_lr[0.3]) == [0, 0, 1, 1, 2, 2]
    assert [s["epoch"] for s in by_lr[1e-6]] == [0, 0], "pruned after epoch 0: it stopped"
    assert not any(s["resumed"] for s in seen), "no trial saw another's checkpoint"

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run = first.user_attrs["mlflow_run_id"]
    assert [m.value for m in client.get_metric_history(run, "epoch")] == [0, 1, 2]
    assert client.get_run(run).data.metrics["accuracy"] == pytest.approx(first.value)


def test_an_untested_ray_release_fails_with_one_line(lane_session, monkeypatch):
    monkeypatch.setattr(ray, "__version__", "2.99.0")
    with pytest.raises(RuntimeError) as e, trial_session():
        pass
    assert "tested with ray >=2.60,<2.61; this worker has 2.99.0" in str(e.value)
    assert tfu.get_train_fn_utils() is lane_session
