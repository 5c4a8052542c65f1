"""Hypothesis: hundreds of invalid specs and arguments; each is one line naming the field, exit 2,
no traceback, nothing written to any store."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import get_args

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sweeps.cli import app
from sweeps.common import names
from sweeps.search.samplers import sampler_option_names
from sweeps.spec.models import Budget, TrainerSpec

BASE = {
    "name": "ok",
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
    "search_space": {
        "lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 64},
        "opt": {"type": "categorical", "choices": ["sgd", "adamw"]},
    },
    "sampler": {"name": "tpe", "seed": 1},
    "pruner": {"name": "median"},
    "budget": {"trials": 3, "parallel": 1},
    "resources": {"workers": 1},
    "trainer": {"model": "mlp", "dataset": "digits", "epochs": 2},
    "tracking": {},
}

word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=3, max_size=12)
# Hypothesis also draws the string constants it finds in our source ("hard", "file", "tpe"), so
# each strategy below leaves out the words that would make a valid spec.
SAMPLERS = tuple(names.SAMPLERS)
PRUNERS = tuple(names.PRUNERS)
MODELS = get_args(TrainerSpec.model_fields["model"].annotation)
DATASETS = get_args(TrainerSpec.model_fields["dataset"].annotation)
bad_int = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=10**13),
    st.just("many"),
    st.just([1, 2]),
    st.just(None),
)


def _set(d: dict, path: str, value) -> dict:
    d = copy.deepcopy(d)
    node = d
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return d


def _del(d: dict, path: str) -> dict:
    d = copy.deepcopy(d)
    node = d
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    del node[keys[-1]]
    return d


# (mutation, the field path the message must name)
mutations = st.one_of(
    word.filter(lambda w: w not in BASE).map(lambda w: (_set(BASE, w, 1), w)),
    st.just((_del(BASE, "name"), "name")),
    bad_int.filter(lambda v: v is not None).map(
        lambda v: (_set(BASE, "budget.trials", v), "budget.trials")
    ),
    st.integers(max_value=0).map(lambda v: (_set(BASE, "budget.parallel", v), "budget.parallel")),
    st.floats(min_value=0.2, max_value=1e6).map(
        lambda v: (_set(BASE, "search_space.lr.low", v), "search_space.lr")
    ),
    st.integers(min_value=65, max_value=10**6).map(
        lambda v: (_set(BASE, "search_space.hidden.low", v), "search_space.hidden")
    ),
    st.just((_set(BASE, "search_space.opt.choices", []), "search_space.opt.choices")),
    st.floats(max_value=0).map(lambda v: (_set(BASE, "search_space.lr.low", v), "search_space.lr")),
    word.filter(lambda w: w not in SAMPLERS).map(
        lambda w: (_set(BASE, "sampler.name", w), "sampler.name")
    ),
    word.filter(lambda w: w not in PRUNERS).map(
        lambda w: (_set(BASE, "pruner.name", w), "pruner.name")
    ),
    word.filter(lambda w: w not in MODELS).map(
        lambda w: (_set(BASE, "trainer.model", w), "trainer.model")
    ),
    word.filter(lambda w: w not in DATASETS).map(
        lambda w: (_set(BASE, "trainer.dataset", w), "trainer.dataset")
    ),
    word.filter(lambda w: w not in ("postgresql", "mysql")).map(
        lambda w: (_set(BASE, "storage", f"{w}://x/y"), "storage")
    ),
    word.filter(lambda w: w != "file").map(
        lambda w: (_set(BASE, "tracking.uri", f"{w}:/nowhere"), "tracking.uri")
    ),
    st.integers(min_value=100_001, max_value=10**15).map(
        lambda v: (_set(BASE, "trainer.epochs", v), "trainer.epochs")
    ),
    st.floats(max_value=-0.001).map(
        lambda v: (_set(BASE, "resources.gpus_per_worker", v), "resources.gpus_per_worker")
    ),
    st.just((_set(BASE, "resources", [1, 2]), "resources")),
    word.filter(lambda w: w not in sampler_option_names("tpe")).map(
        lambda w: (_set(BASE, "sampler.options", {w: 1}), f"sampler.options.{w}")
    ),
    word.map(lambda w: (_set(BASE, "resources.machine_type", w + "-zz"), "resources.machine_type")),
)


@settings(
    max_examples=220,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mutation=mutations)
def test_invalid_specs_are_one_line_exit_2(mutation, tmp_path_factory, monkeypatch):
    raw, field = mutation
    tmp = tmp_path_factory.mktemp("bad")
    home = tmp / "home"
    monkeypatch.setenv("SWEEPS_HOME", str(home))
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["run", str(spec)])
    assert res.exit_code == 2, (raw, res.output)
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    assert field.split(".")[0] in lines[0], (field, lines[0])
    assert "Traceback" not in res.output
    assert not home.exists(), "nothing written to any store"


yaml_garbage = st.sampled_from(
    [
        "name: [",
        "a: b: c",
        "{name: x",
        "- [",
        "name: 'x\n",
        "\t: x",
        "name: x\n  bad indent: 1\n y: 2",
    ]
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=yaml_garbage)
def test_yaml_syntax_errors(text, tmp_path_factory):
    spec = Path(tmp_path_factory.mktemp("y")) / "s.yaml"
    spec.write_text(text)
    res = CliRunner().invoke(app, ["validate", str(spec)])
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    args=st.one_of(
        st.tuples(st.just("--trials"), st.integers(max_value=0).map(str)),
        st.tuples(st.just("--parallel"), st.integers(max_value=0).map(str)),
        st.tuples(st.just("--set"), word),  # no '='
        # A real field (`budget.hard=1`, `budget.target=1`) would be valid and start a sweep.
        st.tuples(
            st.just("--set"),
            word.filter(lambda w: w not in Budget.model_fields).map(lambda w: f"budget.{w}=1"),
        ),
        st.tuples(st.just("--set"), st.just("search_space.lr.low=5")),
    )
)
def test_bad_cli_arguments(args, tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("h") / "home"
    monkeypatch.setenv("SWEEPS_HOME", str(home))
    spec = Path(tmp_path_factory.mktemp("s")) / "s.yaml"
    spec.write_text(yaml.safe_dump(BASE))
    res = CliRunner().invoke(app, ["run", str(spec), *args])
    assert res.exit_code == 2, (args, res.output)
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    assert not home.exists()
