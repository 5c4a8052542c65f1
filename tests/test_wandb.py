"""W&B sweep configs become native specs that validate; what cannot map is named by key path."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT

from sweeps import api
from sweeps.common.errors import SpecError
from sweeps.importers.wandb import to_spec
from sweeps.spec import load_spec, spec_from_dict

ANY = ROOT / "examples" / "any_script"


def _convert(**config):
    base = {
        "program": "train.py",
        "method": "random",
        "metric": {"name": "val_accuracy", "goal": "maximize"},
        "parameters": {"lr": {"min": 0.001, "max": 0.1}},
    }
    return to_spec({**base, **config}, name="w", code_dir=str(ANY))


def test_every_supported_distribution_maps_and_validates():
    raw, notes = _convert(
        method="bayes",
        parameters={
            "a": {"value": 3},
            "b": {"values": ["x", "y"]},
            "c": {"min": 1, "max": 9},
            "d": {"min": 0.1, "max": 0.9},
            "e": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.25},
            "f": {"distribution": "q_uniform", "min": 0, "max": 64, "q": 16},
            "g": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
            "h": {"distribution": "log_uniform", "min": -9.21, "max": -2.3},
            "i": {"distribution": "normal", "mu": 1, "sigma": 0.5},
            "j": {"distribution": "categorical", "values": [True, False]},
            "k": {"distribution": "int_uniform", "min": 2, "max": 4},
            "l": {"distribution": "uniform", "min": -1, "max": 1},
            "m": {"distribution": "constant", "value": "adam"},
        },
    )
    spec = spec_from_dict(raw)
    api.validate_spec(spec)  # sampler, pruner, and train.py is in code_dir
    s = spec.search_space
    assert spec.trainer.params == {"a": 3, "m": "adam"}
    assert s["b"].choices == ["x", "y"] and s["j"].choices == [True, False]
    assert (s["c"].type, s["c"].low, s["c"].high) == ("int", 1, 9)
    assert (s["d"].type, s["d"].low) == ("float", 0.1)
    assert (s["e"].type, s["e"].step) == ("float", 0.25)
    assert (s["f"].type, s["f"].step, s["f"].high) == ("int", 16, 64)
    assert s["g"].log and s["g"].low == 1e-4
    assert s["h"].log and math.isclose(s["h"].low, math.exp(-9.21))
    assert (s["i"].low, s["i"].high) == (-0.5, 2.5)
    assert any("normal(mu=1, sigma=0.5)" in n and "mu ± 3 sigma" in n for n in notes)
    assert (s["k"].low, s["k"].high, s["l"].low) == (2, 4, -1.0)
    assert spec.sampler.name == "tpe" and any("TPE" in n for n in notes)
    assert spec.pruner.name == "none" and spec.budget.trials == 20
    assert spec.trainer.command_line == ["${interpreter}", "${program}", "${args}"]


def test_metric_run_cap_hyperband_and_command():
    raw, _ = _convert(
        metric={"name": "loss", "target": 0.1},
        run_cap=7,
        early_terminate={"type": "hyperband", "max_iter": 27, "s": 2, "eta": 3},
        command=["${env}", "${interpreter}", "${program}", "--fast", "${args_no_hyphens}"],
    )
    spec = spec_from_dict(raw)
    api.validate_spec(spec)
    assert spec.objective.direction == "minimize"  # W&B's default goal
    assert spec.budget.trials == 7 and spec.budget.target == 0.1
    assert spec.pruner.name == "hyperband"
    assert spec.pruner.options == {"reduction_factor": 3, "min_resource": 3, "max_resource": 27}
    assert spec.trainer.command[-1] == "${args_no_hyphens}"
    raw, _ = _convert(early_terminate={"type": "hyperband", "min_iter": 2})
    assert raw["pruner"]["options"] == {
        "reduction_factor": 3,
        "min_resource": 2,
        "max_resource": "auto",
    }


def test_grid_runs_the_grid_once():
    raw, _ = _convert(
        method="grid",
        parameters={"a": {"values": [1, 2, 3]}, "b": {"min": 1, "max": 4}, "c": {"value": 0}},
    )
    spec = spec_from_dict(raw)
    api.validate_spec(spec)
    assert spec.sampler.name == "grid" and spec.budget.trials == 12
    raw, _ = _convert(method="grid", run_cap=5, parameters={"a": {"values": [1, 2, 3, 4, 5, 6]}})
    assert raw["budget"]["trials"] == 5
    with pytest.raises(SpecError, match="parameters.lr: grid search needs values"):
        _convert(method="grid")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"controller": {"type": "local"}}, "controller: not supported"),
        ({"method": "bohb"}, "method: 'bohb' is not supported"),
        ({"metric": {"goal": "maximize"}}, "metric.name: required"),
        ({"metric": {"name": "a", "goal": "up"}}, "metric.goal: 'up'"),
        ({"parameters": {"x": {"parameters": {"y": {"value": 1}}}}}, "parameters.x.parameters:"),
        ({"parameters": {"x": {"values": [1, 2], "probabilities": [0.5, 0.5]}}}, "probabilities"),
        ({"parameters": {"x": {"distribution": "beta", "a": 1}}}, "parameters.x.a: unknown key"),
        (
            {"parameters": {"x": {"distribution": "q_log_uniform_values", "min": 1, "max": 2}}},
            r"parameters.x.distribution: 'q_log_uniform_values'",
        ),  # noqa: E501
        ({"parameters": {"x": {"min": 5, "max": 1}}}, r"parameters.x: min \(5\) must be < max"),
        ({"parameters": {"x": {"values": [[1, 2]]}}}, r"parameters.x.values\[0\]"),
        ({"early_terminate": {"type": "envelope"}}, "early_terminate.type: 'envelope'"),
        ({"early_terminate": {"type": "hyperband", "eta": 3}}, "give min_iter, or max_iter and s"),
        ({"run_cap": 0}, "run_cap: an integer"),
        ({"program": None}, "program: required"),
        ({"command": ["${python}", "${program}"]}, r"trainer.command\[0\]: unknown macro"),
    ],
)
def test_unsupported_keys_are_named_by_their_path(config, message):
    with pytest.raises(SpecError, match=message):
        raw, _ = _convert(**config)
        spec_from_dict(raw)


def test_import_wandb_round_trip(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SWEEPS_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "sweeps.cli"]
    out = tmp_path / "native.yaml"
    with out.open("w") as f:  # `sweeps import-wandb ... > native.yaml`, as a shell does it
        r = subprocess.run(
            [*cmd, "import-wandb", str(ANY / "wandb-sweep.yaml")],
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    assert r.returncode == 0, r.stderr
    assert "method bayes: searched with Optuna's TPE" in r.stderr
    spec = load_spec(out)
    assert spec.name == "wandb-sweep" and spec.trainer.code_dir == str(ANY)
    assert spec.trainer.params == {"epochs": 6} and spec.budget.trials == 6
    v = subprocess.run(
        [*cmd, "validate", str(out)], capture_output=True, text=True, env=env, timeout=120
    )
    assert v.returncode == 0 and v.stdout.startswith("ok: wandb-sweep"), v.stderr
    # A program that is not there: one line, exit 2, before anything runs.
    raw = yaml.safe_load(out.read_text())
    raw["trainer"]["program"] = "missing.py"
    out.write_text(yaml.safe_dump(raw))
    v = subprocess.run(
        [*cmd, "validate", str(out)], capture_output=True, text=True, env=env, timeout=120
    )
    assert v.returncode == 2 and "trainer.command: missing.py not found in" in v.stderr
    assert len(v.stderr.strip().splitlines()) == 1
