"""The spec: valid files load, bad ones give one line naming the field, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from conftest import ROOT

from sweeps.common.errors import SpecError
from sweeps.search import space
from sweeps.spec import load_spec, spec_from_dict

CONF = ROOT / "conf"


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")))
def test_shipped_specs_validate(path):
    if path.name == "teams.yaml":  # conf/teams.yaml: the teams file, not a spec
        from sweeps.spec.teams import load_teams

        assert load_teams(path).teams == {}
        return
    if path.name == "machines.yaml":
        return
    from sweeps import api

    spec = api.validate(path)
    assert spec.name


def test_quickstart_defaults():
    spec = load_spec(CONF / "quickstart.yaml")
    assert spec.budget.trials >= 12 and spec.budget.parallel == 2
    assert spec.sampler.name == "tpe" and spec.pruner.name == "median"
    assert spec.trainer.dataset == "digits"
    assert set(spec.search_space) >= {"lr", "hidden", "dropout", "batch_size"}


def test_overrides_reach_any_field():
    spec = load_spec(
        CONF / "quickstart.yaml",
        ["budget.trials=3", "trainer.params.optimizer=sgd", "search_space.lr.high=0.5"],
    )
    assert spec.budget.trials == 3
    assert spec.trainer.params["optimizer"] == "sgd"
    assert spec.search_space["lr"].high == 0.5


BAD = [
    ({"name": "x", "bogus": 1}, "bogus: unknown field"),
    (
        {"name": "x", "search_space": {"lr": {"type": "float", "low": 2, "high": 1}}},
        "search_space.lr: low (2.0) must be < high (1.0)",
    ),
    ({"name": "x", "sampler": {"name": "annealing"}}, "sampler.name: unknown value 'annealing'"),
    (
        {"name": "x", "pruner": {"name": "median", "options": {"warmup": 1}}},
        "pruner.options.warmup: unknown option",
    ),
    (
        {"name": "x", "search_space": {"a": {"type": "categorical", "choices": []}}},
        "search_space.a.choices: choices must not be empty",
    ),
    ({"name": "x", "budget": {"trials": -3}}, "budget.trials: Input should be greater than"),
    ({"name": "x", "trainer": {"model": "gpt"}}, "trainer.model: unknown value 'gpt'"),
    ({"name": "x", "trainer": {"dataset": "mnist"}}, "trainer.data_dir: required"),
    ({"name": "bad name!"}, "name: must be"),
    ({"name": "x", "storage": "redis://h"}, "storage: must be an Optuna RDB URL"),
    (
        {
            "name": "x",
            "search_space": {"m": {"type": "float", "low": 0, "high": 1, "when": {"opt": "sgd"}}},
        },
        "search_space.m.when: unknown parameter 'opt'",
    ),
]


@pytest.mark.parametrize(("raw", "expect"), BAD)
def test_bad_specs_name_the_field(raw, expect):
    from sweeps import api

    with pytest.raises(SpecError) as e:
        spec = spec_from_dict(raw)
        api.validate_spec(spec)
    msg = str(e.value)
    assert expect in msg, msg
    assert "\n" not in msg


def _cli(*args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("name: x\nunknown_field: 1\n", "unknown_field: unknown field"),
        ("name: x\nsearch_space:\n  lr: {type: float, low: 1, high: 0.1}\n", "search_space.lr"),
        ("name: x\nsampler: {name: nope}\n", "sampler.name"),
        ("name: x\nsearch_space: [\n", "YAML error at line"),
    ],
)
def test_cli_bad_spec_exit_2_one_line(tmp_path: Path, content: str, needle: str):
    p = tmp_path / "s.yaml"
    p.write_text(content)
    r = _cli("validate", str(p))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_missing_file_and_run_writes_nothing(tmp_path: Path):
    env = {**__import__("os").environ, "SWEEPS_HOME": str(tmp_path / "h")}
    r = _cli("run", str(tmp_path / "missing.yaml"), env=env)
    assert r.returncode == 2 and "spec file not found" in r.stderr
    bad = tmp_path / "b.yaml"
    bad.write_text("name: x\nbudget: {parallel: 0}\n")
    r = _cli("run", str(bad), env=env)
    assert r.returncode == 2 and "budget.parallel" in r.stderr
    assert not (tmp_path / "h").exists(), "a rejected spec must not create any store"


def test_conditional_space_never_samples_inactive_params():
    spec = spec_from_dict(
        {
            "name": "c",
            "search_space": {
                "optimizer": {"type": "categorical", "choices": ["sgd", "adamw"]},
                "momentum": {
                    "type": "float",
                    "low": 0.5,
                    "high": 0.99,
                    "when": {"optimizer": "sgd"},
                },
                "nesterov": {
                    "type": "categorical",
                    "choices": [True, False],
                    "when": {"optimizer": "sgd"},
                },
            },
        }
    )
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=5))
    for _ in range(40):
        t = study.ask()
        p = space.suggest(t, spec)
        if p["optimizer"] == "sgd":
            assert set(p) == {"optimizer", "momentum", "nesterov"}
        else:
            assert set(p) == {"optimizer"}
        study.tell(t, p.get("momentum", 0.3))


def test_circular_conditions_rejected():
    spec = spec_from_dict(
        {
            "name": "c",
            "search_space": {
                "a": {"type": "categorical", "choices": [1, 2], "when": {"b": 1}},
                "b": {"type": "categorical", "choices": [1, 2], "when": {"a": 1}},
            },
        }
    )
    with pytest.raises(SpecError, match="circular"):
        space.order(spec.search_space)
