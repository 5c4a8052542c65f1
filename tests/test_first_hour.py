"""Issue 29, what a new user meets in the first hour: help without placeholders on flags,
counts in English, a hint for an unknown field, an objective the built-in trainer never reports,
an install hint that names this checkout, and importers whose spec is portable. No Ray here."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import ROOT
from typer.testing import CliRunner

from sweeps.cli import app
from sweeps.common.errors import SpecError
from sweeps.spec import spec_from_dict

QUICKSTART = str(ROOT / "conf" / "quickstart.yaml")


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return r.exit_code, r.output


@pytest.mark.parametrize("command", [[], ["run"], ["ls"], ["validate"], ["submit"]])
def test_help_has_no_bool_placeholder(command):
    code, text = _cli(*command, "--help")
    assert code == 0, text
    assert "<bool>" not in text
    if command == ["run"]:
        assert re.search(r"--trials\s+<int>", text)  # options that take a value keep theirs
        assert re.search(r"--json\s+Print the result", text)


def test_counts_are_singular_for_one(tmp_path, monkeypatch):
    from sweeps.common.words import plural
    from tracking.report import per_trial

    assert plural(1, "worker") == "1 worker" and plural(2, "worker") == "2 workers"
    assert plural(1.0, "CPU") == "1 CPU" and plural(0.5, "GPU") == "0.5 GPUs"
    r = {"workers": 1, "cpus_per_worker": 1.0, "gpus_per_worker": 0.0, "machine_type": "local"}
    assert per_trial(r) == "1 worker × 1 CPU, 0 GPUs each, machine type local"
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path))
    code, text = _cli("validate", QUICKSTART, "--set", "budget.trials=1")
    assert code == 0 and "4 parameters, 1 trial, 2 parallel" in text, text


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        (
            {"trainer": {"program": "t.py", "metrics": {"source": "file"}}},
            "did you mean 'collector'?",
        ),
        ({"budjet": {"trials": 2}}, "budjet: unknown field; did you mean 'budget'?"),
        ({"warm_start": {"from": ["a"], "topk": 2}}, "did you mean 'top_k'?"),
        (
            {"search_space": {"lr": {"type": "float", "low": 0.1, "high": 1, "logg": True}}},
            "search_space.lr.logg: unknown field; did you mean 'log'?",
        ),
        ({"objectives": [{"metric": "a", "dirction": "maximize"}, {"metric": "b"}]}, "'direction'"),
        ({"zzz": 1}, "zzz: unknown field; known fields: name, objective,"),
    ],
)
def test_unknown_field_gets_a_hint(raw, hint):
    with pytest.raises(SpecError) as e:
        spec_from_dict({"name": "x", **raw})
    assert hint in str(e.value)


def test_validate_rejects_an_objective_the_trainer_never_reports(tmp_path, monkeypatch):
    from sweeps import api
    from sweeps.spec import TRAINER_METRICS, check_reported

    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path))
    code, text = _cli("validate", QUICKSTART, "--set", "objective.metric=val_acc")
    assert code == 2, text
    assert text.count("\n") == 1 and "objective.metric" in text
    assert "does not report 'val_acc'; did you mean 'val_accuracy'?" in text
    # Metrics it does report, and those the driver computes, pass; so does any metric of the
    # user's own code.
    for metric in ("val_loss", "cost_usd", "param_count"):
        assert _cli("validate", QUICKSTART, "--set", f"objective.metric={metric}")[0] == 0
    own = spec_from_dict(
        {"name": "x", "objective": {"metric": "score"}, "trainer": {"program": "t.py"}}
    )
    check_reported(own)  # no error
    multi = {"name": "x", "objectives": [{"metric": "val_loss"}, {"metric": "acc"}]}
    with pytest.raises(SpecError, match=r"^objectives\.1\.metric: .* 'acc'"):
        api.validate_spec(spec_from_dict(multi))
    assert "val_accuracy" in TRAINER_METRICS


def test_trainer_reports_exactly_the_shared_list():
    """The list `validate` checks against is the one the built-in trainer reports from."""
    from sweeps.common.names import TRAINER_EPOCH_METRICS
    from trainer import loop

    val = {"val_loss": 0.5, "val_accuracy": 0.9}
    shards = loop._check_shards(torch.arange(8), 8, 1)
    out = loop._epoch_metrics(
        0, 0.0, 1.0, val, torch.tensor(4.0), 8, shards, 1, torch.device("cpu")
    )
    assert set(out) == set(TRAINER_EPOCH_METRICS)


def test_install_hint_names_this_checkout_not_the_index():
    from sweeps.common.extras import install_hint

    hint = install_hint("aiplatform")
    # `sweeps` on the package index is another project: never `pip install 'sweeps[...]'`.
    assert "'sweeps[" not in hint and "pip install" in hint
    assert hint.endswith(f"-e '{ROOT}[aiplatform]'"), hint


def test_no_doc_or_message_installs_the_unrelated_sweeps_from_the_index():
    """No doc installs an extra as `sweeps[...]` from the index (messages: the hint above)."""
    found = [
        f"{p.relative_to(ROOT)}: {line.strip()}"
        for p in ROOT.glob("**/*.md")
        if ".venv" not in p.parts and "node_modules" not in p.parts
        for line in p.read_text(errors="replace").splitlines()
        if re.search(r"pip install +['\"]?sweeps\[", line)
    ]
    assert not found, "\n".join(found)


AIP = ROOT / "examples" / "aiplatform_trainer"
WANDB = ROOT / "examples" / "any_script" / "wandb-sweep.yaml"


def test_imported_specs_are_portable_and_end_in_a_newline(tmp_path, monkeypatch):
    """`import-wandb > dir/spec.yaml` and `import-aiplatform -o dir/spec.yaml`: folders relative
    to the spec file, which `load_spec` reads them from; the spec moves with its code."""
    import os
    import subprocess
    import sys

    from sweeps.spec import load_spec

    (tmp_path / "specs").mkdir()
    printed = tmp_path / "specs" / "wandb.yaml"
    with printed.open("w") as f:  # the shell's `>`: stdout is that file
        r = subprocess.run(
            [sys.executable, "-m", "sweeps.cli", "import-wandb", str(WANDB)],
            stdout=f,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "SWEEPS_HOME": str(tmp_path / "h")},
            timeout=120,
        )
    assert r.returncode == 0, r.stderr
    text = printed.read_text()
    assert text.endswith("\n") and "code_dir: ../" in text and f": {ROOT}" not in text
    assert load_spec(printed).trainer.code_dir == str(WANDB.parent)

    monkeypatch.chdir(AIP)  # the README's AI Platform recipe, with its gcloud JOB name
    written = tmp_path / "specs" / "legacy.yaml"
    code, out = _cli(
        "import-aiplatform", "legacy_job", "--config", "config.yaml",
        "--package-path", "trainer/", "-o", str(written), "--", "--epochs=3",
    )  # fmt: skip
    assert code == 0, out
    text = written.read_text()
    assert text.endswith("\n") and f": {ROOT}" not in text and "package_path: ../" in text
    spec = load_spec(written)
    # Named as `sweeps run --aiplatform legacy_job --config config.yaml ...` names it.
    assert spec.name == "legacy_job"
    assert spec.trainer.code_dir == str(AIP) == spec.trainer.params["package_path"]
    assert spec.trainer.params["user_args"] == ["--epochs=3"]
    # Moved with its code, it still finds it.
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    code, out = _cli("import-aiplatform", "config.yaml", "-o", str(moved / "s.yaml"))
    assert code == 0 and load_spec(moved / "s.yaml").trainer.code_dir == str(AIP), out
