"""Which `.sweeps` store a command uses without SWEEPS_HOME: the project's one, found from the
working directory as git finds `.git`, so `cd examples/aiplatform_trainer` (the README's AI
Platform recipe) keeps writing where `sweeps ls` and `sweeps ui` at the project's root read."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from sweeps.common import paths


@pytest.fixture
def no_home(monkeypatch):
    for var in ("SWEEPS_HOME", "SWEEPS_STORAGE", "OPTUNA_STORAGE", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _tree(tmp_path: Path, *folders: str) -> Path:
    for f in folders:
        (tmp_path / f).mkdir(parents=True, exist_ok=True)
    return tmp_path


def test_a_subfolder_uses_the_store_of_a_folder_above(no_home, tmp_path):
    top = _tree(tmp_path, "proj/.git", "proj/.sweeps", "proj/examples/job")
    no_home.chdir(top / "proj" / "examples" / "job")
    store = top / "proj" / ".sweeps"
    assert paths.home() == store
    assert paths.storage_url() == f"sqlite:///{store / 'optuna.db'}"
    assert paths.tracking_uri() == f"sqlite:///{store / 'mlflow.db'}"
    assert paths.checkpoint_root() == str(store / "checkpoints")
    # the nearest store wins, as the nearest .git does
    (top / "proj" / "examples" / ".sweeps").mkdir()
    assert paths.home() == top / "proj" / "examples" / ".sweeps"


def test_a_new_store_goes_at_the_top_of_the_work_tree(no_home, tmp_path):
    top = _tree(tmp_path, "proj/.git", "proj/a/b")
    assert paths.find_home(top / "proj" / "a" / "b") == top / "proj" / ".sweeps"
    # a git worktree or submodule has a .git file, not a folder: its top all the same
    _tree(tmp_path, "sub/x")
    (tmp_path / "sub" / ".git").write_text("gitdir: ../proj/.git/worktrees/sub\n")
    assert paths.find_home(tmp_path / "sub" / "x") == tmp_path / "sub" / ".sweeps"


def test_a_store_above_the_work_tree_is_not_the_projects(no_home, tmp_path):
    top = _tree(tmp_path, ".sweeps", "proj/.git", "proj/src")
    assert paths.find_home(top / "proj" / "src") == top / "proj" / ".sweeps"


def test_outside_a_work_tree_the_nearest_store_above_else_the_working_folder(no_home, tmp_path):
    top = _tree(tmp_path, "plain/deep")
    assert paths.find_home(top / "plain" / "deep") == top / "plain" / "deep" / ".sweeps"
    (top / "plain" / ".sweeps").mkdir()
    assert paths.find_home(top / "plain" / "deep") == top / "plain" / ".sweeps"
    # a file named .sweeps is not a store
    (top / "plain" / "deep" / ".sweeps").write_text("")
    assert paths.find_home(top / "plain" / "deep") == top / "plain" / ".sweeps"


def test_sweeps_home_still_decides(no_home, tmp_path):
    _tree(tmp_path, "proj/.git", "proj/.sweeps", "proj/sub")
    no_home.chdir(tmp_path / "proj" / "sub")
    no_home.setenv("SWEEPS_HOME", str(tmp_path / "elsewhere"))
    assert paths.home() == tmp_path / "elsewhere"


def test_the_readme_ai_platform_folder_uses_the_repositorys_store(no_home):
    """The README's `cd examples/aiplatform_trainer`: its sweep lands in the root's store."""
    readme = (ROOT / "README.md").read_text()
    assert "$ cd examples/aiplatform_trainer" in readme
    no_home.chdir(ROOT / "examples" / "aiplatform_trainer")
    assert paths.home() == ROOT / ".sweeps"
    no_home.chdir(ROOT)
    assert paths.home() == ROOT / ".sweeps"
