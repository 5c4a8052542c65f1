"""Issue 32 #1 on a real local Ray: an 8-member PBT sweep on digits whose bottom members continue
from top members' checkpoints. The lineage is read back from Optuna and MLflow, and the weights
a child trained are checked to come from its parent's checkpoint."""

from __future__ import annotations

import json
import os

import torch
from conftest import make_spec
from mlflow.tracking import MlflowClient

from sweeps import api
from sweeps.common import names
from sweeps.search.study import load_study


def _state(checkpoint: str) -> dict:
    return torch.load(os.path.join(checkpoint, "state.pt"), map_location="cpu")


def _distance(a: dict, b: dict) -> float:
    return sum(float((a[k].float() - b[k].float()).norm()) for k in a)


def test_pbt_members_exploit_top_members_checkpoints(ray_cluster, home):
    spec = make_spec(
        name="pbt",
        search_space={"lr": {"type": "float", "low": 0.0001, "high": 0.003, "log": True}},
        search={
            "name": "pbt",
            "population": 8,
            "interval_epochs": 1,
            "quantile": 0.25,
            "perturb": {"lr": [0.8, 1.2]},
            "resample_probability": 0.25,
            "synch": True,  # every member ranked at the boundary: two exploits for sure
        },
        sampler={"name": "random", "seed": 3},
        budget={"trials": 16, "parallel": 2},
        trainer={"epochs": 2, "params": {"hidden": 32}, "limit": 400},
        tracking={"log_models": False},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason

    study = load_study("pbt", f"sqlite:///{home}/optuna.db")
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 16 and all(t.state.name == "COMPLETE" for t in trials)
    by_number = {t.number: t for t in trials}
    first = {
        t.user_attrs[names.PBT_MEMBER]: t
        for t in trials
        if not t.user_attrs.get(names.PBT_GENERATION)
    }
    second = [t for t in trials if t.user_attrs.get(names.PBT_GENERATION) == 1]
    assert sorted(first) == list(range(8)) and len(second) == 8
    assert all(t.user_attrs[names.PBT_FINAL] for t in second)

    # Generation 0 ranked: the bottom two (ceil(8 * 0.25)) exploit, the rest go on as they were.
    ranked = sorted(first.values(), key=lambda t: (t.value, t.user_attrs[names.PBT_MEMBER]))
    bottom = {t.user_attrs[names.PBT_MEMBER] for t in ranked[:2]}
    top = {t.user_attrs[names.PBT_MEMBER] for t in ranked[-2:]}
    exploits = [
        t for t in second if t.user_attrs[names.PBT_CLONED] != t.user_attrs[names.PBT_MEMBER]
    ]
    assert {t.user_attrs[names.PBT_MEMBER] for t in exploits} == bottom
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    for child in second:
        member = child.user_attrs[names.PBT_MEMBER]
        parent = by_number[child.user_attrs[names.PBT_PARENT]]
        own = first[member]
        if child in exploits:
            assert child.user_attrs[names.PBT_CLONED] in top
            assert parent.user_attrs[names.PBT_MEMBER] == child.user_attrs[names.PBT_CLONED]
            assert child.params["lr"] != parent.params["lr"], "explored, not copied"
        else:
            assert parent.number == own.number and child.params == own.params
        # It started from its parent's last checkpoint (epoch 1), not from scratch.
        assert child.user_attrs[names.RESUME_CHECKPOINT] == parent.user_attrs[names.CHECKPOINT]
        assert child.user_attrs[names.RESUME_STEP] == 1
        start, end = (
            _state(parent.user_attrs[names.CHECKPOINT]),
            _state(child.user_attrs[names.CHECKPOINT]),
        )
        assert start["epoch"] == 1 and end["epoch"] == 2
        # One epoch from the parent's weights: nearer those than any other member's.
        others = [
            _distance(end["model"], _state(t.user_attrs[names.CHECKPOINT])["model"])
            for t in first.values()
            if t.number != parent.number
        ]
        assert _distance(end["model"], start["model"]) < min(others)
        # The perturbed lr trained the segment, not the checkpoint's optimizer state.
        assert end["optimizer"]["param_groups"][0]["lr"] == child.params["lr"]

        # MLflow: the run continues its parent's, tagged with it and its checkpoint.
        run = client.get_run(child.user_attrs["mlflow_run_id"])
        assert run.data.tags[names.EXTENDS_RUN] == parent.user_attrs["mlflow_run_id"]
        assert run.data.tags[names.RESUMED_FROM_CHECKPOINT] == parent.user_attrs[names.CHECKPOINT]
        epochs = client.get_metric_history(run.info.run_id, "epoch")
        assert [(m.step, m.value) for m in epochs] == [(2, 2.0)]
        lr = client.get_metric_history(run.info.run_id, "pbt.lr")
        assert [(m.step, m.value) for m in lr] == [(2, child.params["lr"])]
        schedule = json.loads(child.user_attrs[names.PBT_SCHEDULE])
        assert schedule == [[0, parent.params], [1, child.params]]

    # The sweep's best is a member's final segment, with its whole schedule.
    best = api.show("pbt")["best"]
    assert best["number"] == out.summary.best_number
    assert best["value"] == max(t.value for t in second)
    assert by_number[best["number"]].user_attrs[names.PBT_FINAL]


def test_pbt_on_two_workers_per_trial(ray_cluster, home):
    """Each segment a 2-worker DDP trial: the continuing segment starts, on every rank, from its
    parent's checkpoint."""
    spec = make_spec(
        name="pbt2w",
        search_space={"lr": {"type": "float", "low": 0.0001, "high": 0.003, "log": True}},
        search={
            "name": "pbt",
            "population": 4,
            "interval_epochs": 1,
            "perturb": {"lr": [0.8, 1.2]},
            "resample_probability": 0.0,
            "synch": True,  # ceil(4 * 0.25) = 1 exploit at the boundary
        },
        sampler={"name": "random", "seed": 5},
        budget={"trials": 8, "parallel": 1},
        resources={"workers": 2, "cpus_per_worker": 1},
        trainer={"epochs": 2, "params": {"hidden": 32}, "limit": 400},
        tracking={"log_models": False},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason
    trials = load_study("pbt2w", f"sqlite:///{home}/optuna.db").get_trials(deepcopy=False)
    assert len(trials) == 8 and all(t.state.name == "COMPLETE" for t in trials)
    by_number = {t.number: t for t in trials}
    second = [t for t in trials if t.user_attrs.get(names.PBT_GENERATION) == 1]
    exploits = [
        t for t in second if t.user_attrs[names.PBT_CLONED] != t.user_attrs[names.PBT_MEMBER]
    ]
    assert len(second) == 4 and len(exploits) == 1
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    for child in second:
        parent = by_number[child.user_attrs[names.PBT_PARENT]]
        start = _state(parent.user_attrs[names.CHECKPOINT])
        end = _state(child.user_attrs[names.CHECKPOINT])
        assert (start["epoch"], end["epoch"]) == (1, 2)
        others = [
            _distance(end["model"], _state(t.user_attrs[names.CHECKPOINT])["model"])
            for t in trials
            if t.user_attrs.get(names.PBT_GENERATION) == 0 and t.number != parent.number
        ]
        assert _distance(end["model"], start["model"]) < min(others)
        world = client.get_metric_history(child.user_attrs["mlflow_run_id"], "world_size")
        assert [m.value for m in world] == [2.0]
