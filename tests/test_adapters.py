"""The adapters over Optuna's and MLflow's private names fail loudly when an upgrade moves them:
each name used is exercised here against the installed release, which must lie in the range
pyproject pins (the range the adapters were tested on)."""

from __future__ import annotations

import os
import re
import tomllib
from importlib.metadata import version

import optuna
import pytest
from conftest import ROOT, make_spec

from sweeps.execution import raytrain
from sweeps.search import study as st
from tracking import mlflow_compat


def _pinned(package: str) -> tuple[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if re.match(rf"{package}(\[|>|<|=|$)", d))
    low = re.search(r">=\s*([\d.]+)", spec)
    high = re.search(r"<\s*([\d.]+)", spec)
    assert low and high, f"{package} must be pinned with a lower and an upper bound: {spec}"
    return low.group(1), high.group(1)


def _tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


@pytest.mark.parametrize(
    "package,tested",
    [
        ("optuna", st.OPTUNA_TESTED),
        ("mlflow", mlflow_compat.MLFLOW_TESTED),
        ("ray", raytrain.RAY_TESTED),
    ],
)
def test_installed_release_is_the_one_the_adapter_was_tested_on(package, tested):
    low, high = _pinned(package)
    assert (low, high) == tested, "pyproject and the adapter must name the same range"
    assert _tuple(low) <= _tuple(version(package)) < _tuple(high)


def test_optuna_private_names_used_by_the_adapter_exist(tmp_path):
    spec = make_spec(
        name="adapt",
        sampler={"name": "grid"},
        search_space={"lr": {"type": "categorical", "choices": [0.1]}},
    )
    study = st.open_study(spec, f"sqlite:///{tmp_path}/o.db")
    trial = study.ask()
    tid = st.trial_id(trial)
    assert isinstance(tid, int)
    st.set_trial_attr(study, tid, "k", 1)
    assert study.trials[0].user_attrs["k"] == 1
    st.set_trial_attrs(study, tid, {"k": 2, "j": [1, "x"]})  # one transaction, same result
    assert study.trials[0].user_attrs == {"k": 2, "j": [1, "x"]}
    assert st.storage_engine(study) is not None and "sqlite" in str(st.storage_engine(study).url)
    study.set_user_attr("a", 2)
    assert st.fresh_study_attrs(study)["a"] == 2
    trial.suggest_categorical("lr", [0.1])
    stopped = st.tell(study, trial, 1.0)
    assert stopped, "the grid sampler stops the study once every point was told"
    assert st.counted_trials(study) == 1
    study.set_user_attr("sweeps.requeued", 1)  # the COUNT query subtracts what it must
    assert st.counted_trials(study) == 0
    study.set_user_attr("sweeps.requeued", 0)
    d = optuna.distributions.FloatDistribution(0, 1)
    assert st.distribution_contains(d, 0.5) and not st.distribution_contains(d, 2.0)
    other = study.ask()
    assert st.fail_trial(study, st.trial_id(other), "lost")
    assert not st.fail_trial(study, st.trial_id(other), "again"), "already finished"


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_ask_creates_a_claimed_trial_and_still_pops_waiting_ones(db, tmp_path, request):
    """`st.ask`: a new trial carries its attrs from the start; an enqueued (WAITING) trial is
    still taken first, with its fixed params; attrs written at a trial's end are upserts."""
    if db == "sqlite":
        url = f"sqlite:///{tmp_path}/o.db"
    else:
        url = request.getfixturevalue("postgres").create_database("adapter_ask")
    spec = make_spec(name="ask")
    study = st.open_study(spec, url)
    first = st.ask(study, {"sweeps.driver": "d1"})
    frozen = study.trials[0]
    assert frozen.state == optuna.trial.TrialState.RUNNING and frozen.datetime_start
    assert frozen.user_attrs == {"sweeps.driver": "d1"} and first.number == 0
    # The Trial is built without reading its row back: what it holds is what the row says.
    held = first._cached_frozen_trial
    for field in ("number", "state", "user_attrs", "system_attrs", "params", "datetime_start"):
        assert getattr(held, field) == getattr(frozen, field), field
    assert first._trial_id == frozen._trial_id and first.study is study
    study.enqueue_trial({"lr": 0.005})
    popped = st.ask(study, {"sweeps.driver": "d2"})
    assert popped.number == 1 and popped.suggest_float("lr", 0.001, 0.02, log=True) == 0.005
    assert study.trials[1].user_attrs == {"sweeps.driver": "d2"}
    third = st.ask(study, {})
    assert third.number == 2 and st.counted_trials(study) == 3
    tid = st.trial_id(first)
    st.set_trial_attrs(study, tid, {"a": 1, "b": [1, "x"]})
    st.set_trial_attrs(study, tid, {"a": 2})  # an upsert, not a second row
    assert study.trials[0].user_attrs == {"sweeps.driver": "d1", "a": 2, "b": [1, "x"]}
    st.tell(study, first, 0.5)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        st.set_trial_attrs(study, tid, {"a": 3})


def test_mlflow_internal_names_used_by_the_adapter_exist(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    import mlflow

    with mlflow_compat.scoped_tracking_uri(uri):
        assert mlflow.get_tracking_uri() == uri
    mlflow_compat.reset_tracking_uri()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("x"))
    monitor = mlflow_compat.system_metrics_monitor(run.info.run_id, uri)
    assert hasattr(monitor, "start") and hasattr(monitor, "finish")


def test_ray_train_private_names_used_by_the_lane_trainer_exist():
    import inspect

    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2._internal.execution.scaling_policy.fixed import FixedScalingPolicy

    trainer = raytrain.in_process_trainer_class()
    base = trainer.__mro__[1]
    for name in ("_create_default_callbacks", "_initialize_and_run_controller"):
        assert callable(getattr(base, name, None)), f"TorchTrainer.{name} is gone"
    params = inspect.signature(base._initialize_and_run_controller).parameters
    assert any(p.kind is p.VAR_KEYWORD for p in params.values()), "takes the controller's kwargs"
    assert inspect.iscoroutinefunction(TrainController.run), "run() is awaited in-process"
    assert callable(TrainController.get_result)
    for name in ("after_controller_start", "_maybe_send_resource_request"):
        assert callable(getattr(FixedScalingPolicy, name, None)), f"FixedScalingPolicy.{name}"


@pytest.mark.usefixtures("ray_cluster")
def test_lanes_in_one_host_keep_the_hosts_logging_and_name_their_records(tmp_path, monkeypatch):
    """Ray Train's controller ran dictConfig as it was made. With two lanes starting together in
    one host, one lane's dictConfig (holding logging's module lock) waited for a file handler's
    lock, held by the other lane opening that handler's file for its first record (which waits
    for the module lock): both lanes hung, and a CI sweep waited 600 s for its first trial.
    The host now sets the logger up once; a lane's controller must leave it as it is."""
    import json
    import logging
    import threading

    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.constants import ENABLE_CONTROLLER_STRUCTURED_LOGGING_ENV_VAR
    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2._internal.execution.failure_handling import create_failure_policy
    from ray.train.v2._internal.execution.scaling_policy import create_scaling_policy
    from ray.train.v2._internal.util import ObjectRefWrapper

    log = logging.getLogger("ray.train")
    saved = (log.handlers[:], log.level, log.propagate)
    monkeypatch.setenv(ENABLE_CONTROLLER_STRUCTURED_LOGGING_ENV_VAR, "1")  # restored after
    try:
        raytrain.configure_host_logging()  # what the lane host does as it is made
        ours = log.handlers[:]
        paths = [h.get_log_file_path() for h in ours if hasattr(h, "get_log_file_path")]
        assert len(paths) == 2 and all(os.path.exists(p) for p in paths), "opened up front"

        def start_lane(name: str) -> None:  # what fit() does first, in a lane's thread
            raytrain.LANE_NAME.set(name)
            trainer = TorchTrainer(
                lambda: None,
                scaling_config=ScalingConfig(num_workers=1),
                run_config=RunConfig(name=name, storage_path=str(tmp_path)),
            )
            TrainController(
                train_fn_ref=ObjectRefWrapper(lambda: None),
                train_run_context=trainer.train_run_context,
                scaling_policy=create_scaling_policy(trainer.scaling_config),
                failure_policy=create_failure_policy(trainer.run_config.failure_config),
            )

        lanes = [threading.Thread(target=start_lane, args=(f"lane{i}",)) for i in range(2)]
        for t in lanes:
            t.start()
        for t in lanes:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in lanes), "a lane's controller never got made"
        assert log.handlers == ours, "a lane's controller set the host's logger up again"
        sys_log = next(p for p in paths if "-sys-" in p)
        with open(sys_log) as f:
            names = {json.loads(line).get("run_name") for line in f}
        assert {"lane0", "lane1"} <= names, names  # each record names its own lane
    finally:
        for h in log.handlers:
            if h not in saved[0]:
                h.close()
        log.handlers[:], log.level, log.propagate = saved
