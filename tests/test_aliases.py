"""Issue 29 item 18: `promote` without --if-better leaves no version holding both `challenger`
and `champion`, and keeps each earlier decision. On a real MLflow registry (SQLite), no Ray."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from sweeps.common import names
from tracking.registry import _register_and_move

MODEL = "digits-mlp"


@pytest.fixture
def client(tmp_path):
    c = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    c.create_registered_model(MODEL)
    for _ in range(2):
        c.create_model_version(MODEL, source=str(tmp_path), run_id=None)
    return c


def _aliases(c: MlflowClient) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for alias, version in c.get_registered_model(MODEL).aliases.items():
        out.setdefault(str(version), []).append(alias)
    return out


def _move(c, version, move, holder, reason):
    args = (c, MODEL, "champion", None, "run", {}, version, move, holder, reason)
    assert _register_and_move(*args) == version


def test_a_promoted_challenger_is_champion_only_and_keeps_its_earlier_decision(client):
    _move(client, "1", True, None, "no current holder")
    # v2 came second and lost the gate (promote --if-better): the challenger, kept out.
    client.set_registered_model_alias(MODEL, "challenger", "2")
    client.set_model_version_tag(MODEL, "2", names.DECISION, "kept: 0.9 does not beat 0.95")
    _move(client, "2", True, "1", "moved without comparison (no --if-better)")  # no --if-better
    assert _aliases(client) == {"2": ["champion"]}, "one version never holds both aliases"
    lines = client.get_model_version(MODEL, "2").tags[names.DECISION].splitlines()
    assert lines[0] == "kept: 0.9 does not beat 0.95", lines  # the earlier decision stays
    assert lines[-1].endswith("champion: moved without comparison (no --if-better)"), lines
    # Kept again by the gate: v1 is the challenger; the champion stays v2.
    _move(client, "1", False, "2", "kept")
    assert _aliases(client) == {"2": ["champion"], "1": ["challenger"]}


def test_models_shows_the_latest_decision_and_json_all_of_them(client, monkeypatch):
    from tracking.registry import versions

    _move(client, "1", True, None, "no current holder")
    _move(client, "2", True, "1", "moved without comparison (no --if-better)")
    _move(client, "1", True, "2", "rolled forward")
    monkeypatch.setattr("tracking.registry._client", lambda uri: client)
    (v1, _) = versions(MODEL, tracking_uri="unused")
    assert v1["decision"].endswith("champion: rolled forward")
    assert [d.split(": ", 1)[1] for d in v1["decisions"]] == ["no current holder", "rolled forward"]
