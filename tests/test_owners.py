"""Issue 31 #1: whose sweep it is. The owner and team go on the study when it is first written;
`stop`, `cancel` and `resume` of another owner's sweep are refused (exit 2, one line) unless
the caller is an admin in the teams file. The store is real (an Optuna study in SQLite, as a
driver writes it); no Ray: every refusal ends before a driver would be asked anything."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from sweeps.cli import app
from sweeps.common import names, paths
from sweeps.common.errors import SpecError
from sweeps.search import owners
from sweeps.search.study import open_study
from sweeps.spec import load_spec
from sweeps.spec.teams import Teams, load_teams

QUICKSTART = ROOT / "conf" / "quickstart.yaml"
TEAMS = """admins: [root-admin]
teams:
  vision: {weight: 2, members: [alice, bob]}
  nlp: {members: [carol]}
"""


@pytest.fixture
def teams_file(tmp_path, monkeypatch):
    p = tmp_path / "teams.yaml"
    p.write_text(TEAMS)
    monkeypatch.setenv("SWEEPS_TEAMS", str(p))
    return p


@pytest.fixture
def alices(home, teams_file, monkeypatch):
    """A sweep alice submitted, queued (no driver has started it yet)."""
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "alice")
    study = open_study(load_spec(QUICKSTART), paths.storage_url())
    assert owners.record(study) == ("alice", "vision")
    study.set_user_attr(names.SUBMITTED, 1.0)
    study.set_user_attr(names.STATE, "queued")
    return study


def _cli(user: str, *args: str) -> tuple[int, str]:
    env = {"COLUMNS": "200", "MLFLOW_TRACKING_USERNAME": user}
    r = CliRunner().invoke(app, list(args), env=env)
    return r.exit_code, r.output


def test_teams_file_weights_membership_and_admins(teams_file):
    t = load_teams()
    assert t.weights() == {"vision": 2.0, "nlp": 1.0}
    assert (t.team_of("bob"), t.team_of("carol"), t.team_of("zed")) == ("vision", "nlp", "default")
    assert t.may_control("alice", "alice") and t.may_control("root-admin", "alice")
    assert not t.may_control("bob", "alice")  # a teammate is not the owner
    assert t.may_control("bob", None)  # recorded before owners were: anyone's


def test_a_bad_teams_file_is_one_line(tmp_path, monkeypatch):
    p = tmp_path / "teams.yaml"
    p.write_text("teams:\n  vision: {weight: 0}\n")
    monkeypatch.setenv("SWEEPS_TEAMS", str(p))
    with pytest.raises(SpecError, match=r"teams\.vision\.weight: Input should be greater than 0"):
        load_teams()
    monkeypatch.setenv("SWEEPS_TEAMS", str(tmp_path / "none.yaml"))
    with pytest.raises(SpecError, match="teams file not found"):
        load_teams()


def test_no_teams_file_means_one_default_team(tmp_path, monkeypatch):
    monkeypatch.delenv("SWEEPS_TEAMS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load_teams() == Teams() and Teams().team_of("anyone") == "default"


def test_the_owner_is_recorded_once(alices, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "carol")  # a later driver: an admin's resume
    assert owners.record(alices) == ("alice", "vision")
    assert alices.user_attrs[names.OWNER] == "alice"


def test_a_submitted_driver_records_its_submitter(home, teams_file, monkeypatch):
    monkeypatch.setenv("SWEEPS_OWNER", "bob")  # what `submit` passes its driver
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "svc")  # the driver's own identity
    study = open_study(load_spec(QUICKSTART), paths.storage_url())
    assert owners.record(study) == ("bob", "vision")


@pytest.mark.parametrize("command", ["stop", "cancel", "pause", "resume"])
def test_another_owner_is_refused_with_one_line(alices, command):
    code, text = _cli("bob", command, "quickstart")
    assert code == 2, text
    assert text.strip() == (
        f"error: sweep 'quickstart' is alice's: bob may not {command} it (its owner or an admin "
        "in conf/teams.yaml may)"
    )
    assert names.STOP_REQUESTED not in alices.user_attrs
    assert names.CANCEL_REQUESTED not in alices.user_attrs
    assert names.PAUSE_REQUESTED not in alices.user_attrs


@pytest.mark.parametrize("user", ["alice", "root-admin"])
def test_the_owner_and_an_admin_may_stop_it(alices, user):
    code, text = _cli(user, "stop", "quickstart")
    assert code == 0, text
    assert "stop requested for quickstart" in text
    assert names.STOP_REQUESTED in alices.user_attrs


def test_ls_and_show_name_the_owner(alices):
    code, text = _cli("bob", "ls", "--json")
    assert code == 0, text
    (row,) = json.loads(text)
    assert row["owner"] == "alice"
    code, text = _cli("bob", "ls")
    assert code == 0 and "owner" in text.splitlines()[1] and " alice " in text, text
    code, text = _cli("bob", "show", "quickstart")
    assert code == 0 and "quickstart (queued; alice of team vision)" in text, text


def test_the_team_stack_owner_is_the_user_mlflow_authenticates(tmp_path):
    """A real MLflow server with basic-auth: the user it says the credentials are; wrong
    credentials are one line (exit 2); a server without basic-auth leaves the name as given."""
    from mlflow.server.auth.client import AuthServiceClient
    from services import start_mlflow_server

    from tracking.whoami import checked_user

    server = start_mlflow_server(f"sqlite:///{tmp_path}/s.db", str(tmp_path / "a"), auth=True)
    try:
        import os

        os.environ["MLFLOW_TRACKING_USERNAME"] = server.username
        os.environ["MLFLOW_TRACKING_PASSWORD"] = server.password
        try:
            AuthServiceClient(server.url).create_user("bob", "bob-password-123")
        finally:
            del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]
        assert checked_user(server.url, "bob", "bob-password-123") == "bob"
        with pytest.raises(SpecError, match=r"refused user 'bob': check MLFLOW_TRACKING_USERNAME"):
            checked_user(server.url, "bob", "wrong")
    finally:
        server.stop()
    plain = start_mlflow_server(f"sqlite:///{tmp_path}/p.db", str(tmp_path / "b"))
    try:
        assert checked_user(plain.url, "bob", "anything") is None
    finally:
        plain.stop()
    assert checked_user(f"sqlite:///{tmp_path}/m.db", "bob", "x") is None
