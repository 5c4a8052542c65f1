"""Extension points: a metric collector, an importer or a search strategy is one module with one
base class, registered in one table (`sweeps.common.names`). The toy ones in tests/extensions
are written as a newcomer would, from docs/ARCHITECTURE.md."""

from __future__ import annotations

import importlib
import inspect
import sys

import optuna
import pytest
from conftest import ROOT, make_spec
from typer.testing import CliRunner

from sweeps.cli import app
from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.importers.base import Importer
from sweeps.search.samplers import make_sampler
from sweeps.worker import collectors
from sweeps.worker.collectors.base import Collector

EXT = ROOT / "tests" / "extensions"


@pytest.fixture
def toys(monkeypatch):
    monkeypatch.syspath_prepend(str(EXT))
    monkeypatch.setitem(names.COLLECTORS, "bracket", "toy_collector:BracketCollector")
    monkeypatch.setitem(names.IMPORTERS, "ranges", "toy_importer:RangesImporter")
    monkeypatch.setitem(names.SAMPLERS, "lowest", "toy_sampler:LowestSampler")
    yield
    for mod in ("toy_collector", "toy_importer", "toy_sampler"):
        sys.modules.pop(mod, None)


def _target(ref: str) -> type:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@pytest.mark.parametrize(
    "table,base",
    [
        (names.COLLECTORS, Collector),
        (names.IMPORTERS, Importer),
        (names.SAMPLERS, optuna.samplers.BaseSampler),
        (names.PRUNERS, optuna.pruners.BasePruner),
    ],
)
def test_every_registered_extension_implements_its_base_class(table, base):
    for key, ref in table.items():
        cls = _target(ref)
        assert inspect.isclass(cls) and issubclass(cls, base), key
        if base in (Collector, Importer):
            assert getattr(cls, "kind", getattr(cls, "name", None)) == key, ref


def test_a_new_collector_is_accepted_by_the_spec_and_built_for_a_trial(toys):
    spec = make_spec(
        trainer={"command": ["python", "t.py", "${args}"], "metrics": {"collector": "bracket"}}
    )
    assert spec.trainer.metrics.collector == "bracket"
    c = collectors.make(
        spec.trainer.metrics.model_dump(), objective="acc", trial_dir=".", hypertune_file="x"
    )
    assert c.feed_all(["noise", "[epoch 2] acc 0.75"]) == [(2, {"acc": 0.75})]


def test_an_unregistered_collector_is_refused_by_name(toys):
    with pytest.raises(SpecError, match=r"trainer.metrics.collector: unknown value 'angle'.*"):
        make_spec(trainer={"command": ["python", "t.py"], "metrics": {"collector": "angle"}})


def test_a_new_search_strategy_is_validated_and_drives_the_study(toys):
    spec = make_spec(sampler={"name": "lowest", "options": {"shift": 2}})
    sampler = make_sampler(spec)
    study = optuna.create_study(sampler=sampler)
    trial = study.ask()
    assert trial.suggest_float("lr", 0.001, 0.02) == pytest.approx(0.201)
    with pytest.raises(SpecError, match=r"sampler.options.speed: unknown option \(allowed: shift"):
        make_sampler(make_spec(sampler={"name": "lowest", "options": {"speed": 1}}))


def test_a_new_importer_runs_as_sweeps_import(toys, tmp_path):
    cfg = tmp_path / "mysweep.ranges"
    cfg.write_text("lr = 0.001..0.1\ndropout = 0..0.5\n")
    res = CliRunner().invoke(app, ["import", "ranges", str(cfg)])
    assert res.exit_code == 0, res.output
    assert "name: mysweep" in res.stdout and "dropout:" in res.stdout
    assert "note: built-in trainer used" in res.stderr
    cfg.write_text("lr 0.001\n")
    bad = CliRunner().invoke(app, ["import", "ranges", str(cfg)])
    assert bad.exit_code == 2 and "mysweep.ranges:1: expected" in bad.output


def test_an_unknown_importer_is_exit_2_naming_the_known_ones():
    res = CliRunner().invoke(app, ["import", "katib", "x.yaml"])
    assert res.exit_code == 2
    assert "no importer 'katib' (one of: wandb, aiplatform)" in res.output


@pytest.mark.parametrize(
    "kind,command,config",
    [
        ("wandb", "import-wandb", "examples/any_script/wandb-sweep.yaml"),
        ("aiplatform", "import-aiplatform", "examples/aiplatform_trainer/config.yaml"),
    ],
)
def test_the_built_in_importers_print_what_their_own_commands_print(kind, command, config):
    path = str(ROOT / config)
    generic = CliRunner().invoke(app, ["import", kind, path])
    own = CliRunner().invoke(app, [command, path])
    assert generic.exit_code == own.exit_code == 0, generic.output + own.output
    assert generic.stdout == own.stdout and "name:" in generic.stdout
