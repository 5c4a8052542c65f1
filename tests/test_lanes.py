"""Lane semantics on a real local Ray: every trial once, fresh weights, failures contained.

The tests that exercise the lane host run on both of its paths (SWEEPS_RAY_PATH): the fast
private one (Ray Train's controller inside the host) and the public `TorchTrainer.fit()` that
any other Ray release gets."""

from __future__ import annotations

import optuna
import pytest
import ray
from conftest import byo

from sweeps import api
from sweeps.common.errors import SpecError
from sweeps.execution import host, raytrain
from sweeps.execution.lane import RAY_PATH_ENV, asked_ray_path


def _trials(name: str) -> list[dict]:
    return api.show(name)["trials"]


@pytest.fixture(params=["private", "public"])
def ray_path(request, monkeypatch) -> str:
    """The lane host's path, as the driver asks for it. The public path costs CI ~90 s on
    2 CPUs, so it runs where the controller is what is tested: two lanes' controllers side by
    side (placement, dispatch, teardown), and a worker group's restart from a checkpoint
    (Ray Train's FailureConfig, which the controller enforces). A trial that raises, a NaN and
    a missing metric are the lane worker's and the driver's, the same on both paths."""
    monkeypatch.setenv(RAY_PATH_ENV, request.param)
    return request.param


@pytest.fixture
def fresh_check():
    """`private_path_missing` looks once per process: look again, before and after."""
    raytrain.private_path_missing.cache_clear()
    yield
    raytrain.private_path_missing.cache_clear()


def test_the_environment_asks_for_a_path_or_leaves_it_to_the_host(monkeypatch):
    for asked, want in [("", ""), ("auto", ""), ("Public", "public"), ("private", "private")]:
        monkeypatch.setenv(RAY_PATH_ENV, asked)
        assert asked_ray_path() == want
    monkeypatch.setenv(RAY_PATH_ENV, "fast")
    with pytest.raises(SpecError) as e:
        asked_ray_path()
    assert str(e.value) == "SWEEPS_RAY_PATH='fast': expected public, private or auto"
    assert e.value.exit_code == 2


@pytest.mark.usefixtures("fresh_check")
def test_the_tested_ray_with_every_private_name_runs_the_fast_path():
    assert raytrain.private_path_missing() is None
    assert host.lane_path("") == "private" and host.lane_path("private") == "private"
    assert host.lane_path("public") == "public"


@pytest.mark.usefixtures("fresh_check")
def test_an_untested_ray_runs_the_public_path_and_refuses_the_private_one(monkeypatch):
    monkeypatch.setattr(ray, "__version__", "2.99.0")
    assert host.lane_path("") == "public" and host.lane_path("public") == "public"
    with pytest.raises(RuntimeError) as e:
        host.lane_path("private")
    assert str(e.value) == (
        "SWEEPS_RAY_PATH=private, but Ray Train's private names are tested with "
        "ray >=2.60,<2.61; this worker has 2.99.0"
    )


@pytest.mark.usefixtures("fresh_check")
def test_a_private_name_gone_runs_the_public_path(monkeypatch):
    from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy

    name = "_maybe_send_resource_request"
    owner = next(c for c in FixedScalingPolicy.__mro__ if name in vars(c))
    monkeypatch.delattr(owner, name)
    assert host.lane_path("") == "public"
    assert "FixedScalingPolicy._maybe_send_resource_request is gone" in (
        raytrain.private_path_missing() or ""
    )


@pytest.mark.usefixtures("fresh_check")
def test_a_private_class_gone_runs_the_public_path(monkeypatch):
    import ray.train.torch  # noqa: F401  (imported whole before a name goes)
    from ray.train.v2._internal.execution import controller

    monkeypatch.delattr(controller, "TrainController")
    assert host.lane_path("") == "public"
    assert (
        "a private name of Ray Train is gone (ImportError: cannot import name 'TrainController'"
        in (raytrain.private_path_missing() or "")
    )


@pytest.mark.usefixtures("ray_cluster")
def test_trials_over_two_lanes_run_once_with_their_own_params_and_fresh_weights(
    home, tmp_path, ray_path
):
    meet = tmp_path / "meet"
    meet.mkdir()
    spec = byo(
        "init_weights",
        name="lanes",
        budget={"trials": 8, "parallel": 2},
        sampler={"name": "random", "seed": 5},
        # Each lane's first trial waits for the other lane's: see byo_tasks._meet_other_lanes.
        trainer={"params": {"meet_dir": str(meet)}},
    )
    before = set(raytrain.actor_classes())
    out = api.run(spec, install_signals=False)
    assert out.state == "finished"
    made = sorted(c for a, c in raytrain.actor_classes().items() if a not in before)
    if ray_path == "private":
        # Each lane's Ray Train controller ran inside the lane host, not as an actor of its own,
        # with no placement-group cleaner (the host made the placement group), no dataset
        # manager (a lane has no Ray Datasets) and no autoscaling coordinator (no autoscaler).
        helpers = (
            "TrainController",
            "PlacementGroupCleaner",
            "DatasetManager",
            "_AutoscalingCoordinatorActor",
        )
        for helper in helpers:
            assert helper not in made, made
    else:  # Ray Train's own fit(): a controller actor per lane, and its helpers
        assert made.count("TrainController") == 2, made
        assert made.count("PlacementGroupCleaner") == 2, made
    assert made.count("LaneHost") == 1 and made.count("RayTrainWorker") == 2, made
    study = optuna.load_study(study_name="lanes", storage=f"sqlite:///{home}/optuna.db")
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(8))
    assert all(t.state.name == "COMPLETE" for t in trials)
    assert len({t.params["lr"] for t in trials}) == 8
    lanes = {t.user_attrs["sweeps.lane"] for t in trials}
    assert len(lanes) == 2, "both lanes took trials"

    import torch

    from trainer.models import build_model

    for t in trials:
        torch.manual_seed(t.user_attrs["sweeps.seed"])
        m = build_model("mlp", (1, 8, 8), 10, hidden=16, layers=1)
        expect = float(sum(p.double().sum() for p in m.parameters()))
        got = study.trials[t.number].intermediate_values  # reported objective per step
        assert got, "metrics reached Optuna"
        from mlflow.tracking import MlflowClient

        run = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(t.user_attrs["mlflow_run_id"])
        assert run.data.metrics["weights_sum"] == pytest.approx(expect, rel=1e-9)


@pytest.mark.usefixtures("ray_cluster")
def test_lane_survives_a_trial_that_raises(home):
    spec = byo(
        "flaky",
        name="flaky",
        budget={"trials": 6, "parallel": 1},
        sampler={"name": "random", "seed": 11},
        search_space={"lr": {"type": "float", "low": 0.001, "high": 0.02}},
    )
    out = api.run(spec, install_signals=False)
    trials = _trials("flaky")
    states = {t["number"]: t["state"] for t in trials}
    assert len(trials) == 6
    failed = [t for t in trials if t["state"] == "FAIL"]
    ok = [t for t in trials if t["state"] == "COMPLETE"]
    assert failed and ok, states
    assert all(t["params"]["lr"] > 0.01 for t in failed)
    assert all("too hot" in t["error"] for t in failed)
    assert out.state == "finished"


@pytest.mark.usefixtures("ray_cluster")
def test_nan_metric_fails_the_trial_early(home):
    spec = byo("nan_loss", name="nan", budget={"trials": 1}, trainer={"epochs": 6})
    api.run(spec, install_signals=False)
    (t,) = _trials("nan")
    assert t["state"] == "FAIL"
    assert "nan" in t["error"].lower() and "step 2" in t["error"]


@pytest.mark.usefixtures("ray_cluster")
def test_missing_objective_metric_is_a_clear_failure(home):
    spec = byo("no_objective", name="noobj", budget={"trials": 1})
    api.run(spec, install_signals=False)
    (t,) = _trials("noobj")
    assert t["state"] == "FAIL"
    assert (
        "objective metric 'val_accuracy' is not among the reported metrics (accuracy)" in t["error"]
    )


@pytest.mark.usefixtures("ray_cluster")
def test_sigkilled_worker_restarts_the_lane_and_resumes_from_checkpoint(home, tmp_path, ray_path):
    n = 2 if ray_path == "private" else 1  # one restart shows the public path's (~12 s less)
    spec = byo(
        "kill_once",
        name="kill",
        budget={"trials": n, "parallel": 1},
        # Epochs longer than Ray Train's controller poll (0.2 s here): a checkpoint reported
        # the instant before the kill may not be registered yet, an epoch-old one is.
        trainer={"epochs": 4, "params": {"marker_dir": str(tmp_path), "epoch_s": 0.6}},
        resources={"max_failures": 2},
        execution={"checkpoint_min_interval_s": 0},
    )
    out = api.run(spec, install_signals=False)
    trials = _trials("kill")
    assert [t["state"] for t in trials] == ["COMPLETE"] * n, trials
    assert all(t["restarts"] == 1 for t in trials)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    for t in trials:
        run = client.get_run(t["mlflow_run_id"])
        # Killed at the start of epoch 3 after checkpointing epochs 1-2: resumed from a
        # checkpoint of this trial, not from scratch. (Ray Train registers a checkpoint when
        # its controller next polls; epoch 2's, reported just before the kill, may not be.)
        assert run.data.metrics["final_resumed_from"] in (1.0, 2.0)
        assert run.data.tags["sweeps.restarts"] == "1"
        assert "restarted" in run.data.tags["sweeps.problems"]
    assert out.state == "finished"
