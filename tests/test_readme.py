"""The README's and docs' recipes hold as written: every full spec in a ```yaml block validates,
every `sweeps` command line in a code block names a real command, real options and files that
exist, and every spec file a `sweeps run`/`submit`/`validate` line names validates.

Running every recipe would take the suite's whole budget; the runs themselves are tested where
their features are (the quickstart, W&B, AI Platform, Ray Train, Optuna, the registry).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
import yaml
from conftest import ROOT

from sweeps.cli import app
from sweeps.spec import load_spec, spec_from_dict

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def _blocks(doc: Path, lang: str | None = None) -> list[str]:
    return [body for kind, body in BLOCK.findall(doc.read_text()) if lang in (None, kind)]


def _specs() -> list[tuple[str, dict]]:
    found = []
    for doc in DOCS:
        for i, body in enumerate(_blocks(doc, "yaml")):
            raw = yaml.safe_load(body)
            if isinstance(raw, dict) and "objective" in raw:  # a whole spec, not a fragment
                found.append((f"{doc.name}#yaml{i}", raw))
    return found


@pytest.mark.parametrize(("where", "raw"), _specs(), ids=[w for w, _ in _specs()])
def test_every_spec_in_the_docs_validates(where, raw):
    spec_from_dict(raw)


def _command_lines() -> list[tuple[str, Path, list[str]]]:
    """(where, folder it runs in, argv after `sweeps`) for each command line in a code block."""
    found = []
    for doc in DOCS:
        for kind, body in BLOCK.findall(doc.read_text()):
            cwd = ROOT
            for line in body.replace("\\\n", " ").splitlines():
                if kind not in ("bash", "sh") and not line.startswith("$ "):
                    continue  # output, not a command
                line = line.removeprefix("$ ").strip()
                if line.startswith("cd "):
                    cwd = (cwd / line[3:].strip()).resolve()
                    continue
                argv = shlex.split(line, comments=True) if line else []
                for i, word in enumerate(argv):
                    # `docker compose run sweeps sweeps ls`: the service, then the command
                    if word in ("sweeps", ".venv/bin/sweeps") and argv[i + 1 : i + 2] not in (
                        [],
                        ["sweeps"],
                    ):
                        found.append((f"{doc.name}: {line}", cwd, argv[i + 1 :]))
                        break
    return found


def _check(cwd: Path, argv: list[str]) -> None:
    name = argv[0]
    assert name in COMMANDS, f"no command `sweeps {name}`"
    command = COMMANDS[name]
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    if hasattr(command, "commands"):  # a group: the next word is its subcommand
        return
    for word in argv[1:]:
        if word == "--":  # the user's own arguments follow
            break
        if word.startswith("-"):
            assert word.split("=")[0] in options, f"`sweeps {name}` has no option {word}"
        elif word.endswith((".yaml", ".yml", ".py", ".json")) and "/" in word:
            assert (cwd / word).exists(), f"{word}: not found (from {cwd.relative_to(ROOT)})"


LINES = _command_lines()


@pytest.mark.parametrize(("where", "cwd", "argv"), LINES, ids=[w for w, _, _ in LINES])
def test_every_sweeps_command_in_the_docs_exists_as_written(where, cwd, argv):
    _check(cwd, argv)


def test_the_spec_files_the_readme_runs_validate():
    runs = [
        (cwd, argv)
        for where, cwd, argv in LINES
        if where.startswith("README.md") and argv[0] in ("run", "submit", "validate")
    ]
    assert runs, "the README runs something"
    checked = 0
    for cwd, argv in runs:
        if any(a.startswith(("--wandb", "--aiplatform")) for a in argv):
            continue  # another tool's config: its importer's tests run it
        spec = next((a for a in argv[1:] if a.endswith((".yaml", ".yml"))), None)
        if spec:
            load_spec(cwd / spec)
            checked += 1
    assert checked, runs


def test_the_readme_starts_with_the_two_commands_for_a_fresh_machine():
    first = _blocks(ROOT / "README.md", "bash")[0].strip().splitlines()
    assert len(first) == 2, first
    assert first[0].endswith(".venv/bin/sweeps run conf/quickstart.yaml"), first[0]
    assert first[1].endswith(".venv/bin/pytest -q"), first[1]
    load_spec(ROOT / "conf" / "quickstart.yaml")
