"""Ray Train functions run unchanged as trials: `ray.train.report`, `get_checkpoint`,
`get_context` and `ray.train.torch.prepare_*` serve the trial, not the lane's long-lived Ray
Train session (issue 28 item 3)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile

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
from sweeps.worker import runtime, workdir

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
    wait on the first trial's tell.) Each trial and rank runs in its own view of code_dir: the
    function's relative read finds data/classes.txt, its relative writes (model.pth,
    out/metrics.json) stay out of code_dir and become rank 0's artifacts under workdir/."""
    code_before = _tree(SCRIPTS)
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
    cwds = {(s["lr"], s["rank"]): s["cwd"] for s in seen}
    assert len(set(cwds.values())) == 4, f"one working dir per trial and rank: {cwds}"
    assert not any(s["leftover"] for s in seen), "no trial saw another's model.pth"
    assert not any(os.path.exists(d) or d.startswith(str(SCRIPTS)) for d in cwds.values())
    assert _tree(SCRIPTS) == code_before, "the user's code_dir is unchanged"

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run = first.user_attrs["mlflow_run_id"]
    assert [m.value for m in client.get_metric_history(run, "epoch")] == [0, 1, 2]
    assert client.get_run(run).data.metrics["accuracy"] == pytest.approx(first.value)
    files = {a.path for a in client.list_artifacts(run, "outputs/workdir")}
    assert files == {"outputs/workdir/model.pth", "outputs/workdir/out"}, files
    local = client.download_artifacts(run, "outputs/workdir", str(tmp_path / "got"))
    with open(os.path.join(local, "out", "metrics.json")) as f:
        assert json.load(f)["accuracy"] == pytest.approx(first.value), "this trial's own file"
    state = torch.load(os.path.join(local, "model.pth"))
    assert state["2.weight"].shape == (10, 32), "10 classes, read from data/classes.txt"


def test_a_function_trial_runs_in_its_own_view_and_the_worker_gets_its_cwd_back(
    tmp_path, monkeypatch
):
    code = tmp_path / "code"
    (code / "data").mkdir(parents=True)
    (code / "data" / "classes.txt").write_text("a b")
    monkeypatch.chdir(tmp_path)
    with workdir.for_function("code", 4, 1) as view:  # relative: to the worker's cwd
        assert open("data/classes.txt").read() == "a b"
        torch.save({"w": 1}, "model.pth")
        first = os.getcwd()
        blob = view.pack()
    with pytest.raises(KeyError), workdir.for_function(str(code), 5, 1):
        assert not os.path.exists("model.pth"), "the next trial starts from code_dir alone"
        second = os.getcwd()
        raise KeyError("a trial that fails")
    assert os.getcwd() == str(tmp_path), "the lane's next trial starts where this one did"
    assert first != second and not os.path.exists(first) and not os.path.exists(second)
    assert sorted(os.listdir(code)) == ["data"]
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        assert tar.getnames() == ["workdir/model.pth"]
    with workdir.for_function(None, 6, 0) as none:
        assert none is None and os.getcwd() == str(tmp_path)


def _tree(folder) -> dict[str, float]:
    """Every file under folder with its mtime (bytecode caches aside: the import writes them)."""
    return {str(p.relative_to(folder)): p.stat().st_mtime for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}  # fmt: skip


def test_an_untested_ray_release_fails_with_one_line(lane_session, monkeypatch):
    """Only a trial's own ray.train calls fail there: one that never makes one runs on, as
    lanes do on such a Ray (the host's public path)."""
    monkeypatch.setattr(ray, "__version__", "2.99.0")
    runtime._set_context(_ctx())
    with trial_session():
        runtime.report({"accuracy": 0.5})  # sweeps' own report is untouched
        with pytest.raises(RuntimeError) as e:
            report({"accuracy": 0.5})
    assert str(e.value) == (
        "ray.train calls of a trial are routed through Ray Train's TrainFnUtils, tested with "
        "ray >=2.60,<2.61; this worker has 2.99.0"
    )
    assert tfu.get_train_fn_utils() is lane_session
