"""A service's claim on its stores (sweeps/service/claim.py): the policy as pure functions, and
the holder process for real on a SQLite store (no Ray): a second claim is refused naming the
first, a killed holder's claim is taken over saying so, and a holder whose service is gone lets
go by itself. Two real services on one store: tests/test_service.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.service import claim
from sweeps.service.claim import Holder, Target

ME = Holder("/home/b/.sweeps", "hostb", 20, 2000.0)
FIRST = Holder("/home/a/.sweeps", "hosta", 10, 1_765_000_000.0)
DB = Target("sqlite", "/x/optuna.db.sweeps-service", "/x/optuna.db")


def test_the_stores_a_service_claims_each_once(tmp_path):
    db = tmp_path / "optuna.db"
    pg = "postgresql+psycopg://sweeps:secret@db.lan:5433/optuna"
    got = claim.targets(
        [f"sqlite:///{db}", f"sqlite:///{tmp_path}/./optuna.db", pg, "http://mlflow:5000"]
    )
    assert got == [
        Target("sqlite", f"{db}{names.CLAIM_SUFFIX}", str(db)),
        Target("postgresql", pg, "postgresql://db.lan:5433/optuna"),
    ]
    assert claim.targets(["sqlite:///:memory:", "file:///tmp/mlruns", "http://x:5000"]) == []


def test_a_claim_held_now_is_refused_in_one_line_naming_its_holder():
    what, line = claim.verdict(DB, ME, FIRST, locked=True)
    assert what == "refuse" and "\n" not in line
    assert line.startswith(
        "store /x/optuna.db is claimed by the sweeps service of /home/a/.sweeps on hosta "
        "(pid 10), up since 2025-12-06 05:46:40 UTC: "
    ), line
    assert "sweeps down" in line
    what, line = claim.verdict(DB, ME, None, locked=True)
    assert what == "refuse" and "claimed by another sweeps service" in line


def test_a_stale_claim_is_taken_over_saying_so_and_a_free_one_silently():
    what, line = claim.verdict(DB, ME, FIRST, locked=False)
    assert what == "take" and line.startswith("warning: store /x/optuna.db: taking over")
    assert "whose service is gone" in line and "/home/a/.sweeps" in line
    assert claim.verdict(DB, ME, None, locked=False) == ("take", "")
    assert claim.verdict(DB, ME, ME, locked=False) == ("take", "")


def test_a_holder_lets_go_once_its_service_and_its_up_are_gone():
    assert claim.keep_holding(service_alive=True, up_alive=False)
    assert claim.keep_holding(service_alive=False, up_alive=True)  # `up` still starting it
    assert not claim.keep_holding(service_alive=False, up_alive=False)


def test_a_holder_record_reads_back_or_is_none():
    assert Holder.parse(json.dumps(FIRST.__dict__)) == FIRST
    assert Holder.parse(b"") is None and Holder.parse(None) is None
    assert Holder.parse('{"home": "x"}') is None  # half a record: no holder named


def _keeper(home: Path, up_pid: int, url: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", names.CLAIM_MODULE, str(home), str(up_pid), url]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)


def test_holders_on_one_sqlite_store_for_real(tmp_path, capfd):
    url = f"sqlite:///{tmp_path}/optuna.db"
    lock = tmp_path / f"optuna.db{names.CLAIM_SUFFIX}"
    first = claim.hold(tmp_path / "a", [url], tmp_path / "a.log")
    assert first and json.loads(lock.read_text())["home"] == str(tmp_path / "a")
    second = None
    try:
        with pytest.raises(SpecError, match=rf"claimed by the sweeps service of {tmp_path}/a on"):
            claim.hold(tmp_path / "b", [url], tmp_path / "b.log")
        assert json.loads(lock.read_text())["pid"] == first, "the first claim is untouched"
        os.kill(first, signal.SIGKILL)  # a killed service: its record stays, its lock goes
        _wait_gone(first)
        capfd.readouterr()
        second = claim.hold(tmp_path / "b", [url], tmp_path / "b.log")
        err = capfd.readouterr().err
        assert f"taking over the claim of the sweeps service of {tmp_path}/a" in err, err
        assert json.loads(lock.read_text())["home"] == str(tmp_path / "b")
        os.kill(second, signal.SIGTERM)  # `sweeps down`: lets go cleanly, no stale record
        _wait_gone(second)
        assert lock.read_text() == ""
    finally:
        for pid in (first, second):
            if pid:
                _kill(pid)


def test_holders_on_one_postgres_database_for_real(postgres, tmp_path, capfd):
    """PostgreSQL: the lease is a session advisory lock, the record a row beside it; a killed
    holder's lock goes with its connection and its row is taken over, saying so."""
    url = postgres.create_database("claimed")
    first = claim.hold(tmp_path / "a", [url], tmp_path / "a.log")
    second = None
    try:
        with pytest.raises(SpecError) as refused:
            claim.hold(tmp_path / "b", [url], tmp_path / "b.log")
        line = str(refused.value)
        assert line.startswith(
            f"store postgresql://127.0.0.1:{postgres.port}/claimed is claimed by the sweeps "
            f"service of {tmp_path}/a on {socket.gethostname()} (pid {first}), up since "
        ), line
        assert "secret" not in line and postgres.password not in line
        os.kill(first, signal.SIGKILL)
        _wait_gone(first)
        capfd.readouterr()
        end = time.monotonic() + 10  # the server ends the dead session's lock as it notices
        while second is None:
            try:
                second = claim.hold(tmp_path / "b", [url], tmp_path / "b.log")
            except SpecError:
                assert time.monotonic() < end, "the killed holder's lock stayed"
                time.sleep(0.2)
        err = capfd.readouterr().err
        assert f"taking over the claim of the sweeps service of {tmp_path}/a" in err, err
        os.kill(second, signal.SIGTERM)  # `sweeps down`: the row goes with a clean release
        _wait_gone(second)
        third = claim.hold(tmp_path / "c", [url], tmp_path / "c.log")
        assert "taking over" not in capfd.readouterr().err
        _kill(third)
    finally:
        for pid in (first, second):
            if pid:
                _kill(pid)


def test_a_holder_whose_up_and_service_are_gone_lets_go(tmp_path):
    url = f"sqlite:///{tmp_path}/mlflow.db"
    up = subprocess.Popen(["sleep", "60"])
    keeper = _keeper(tmp_path / "a", up.pid, url)
    try:
        assert keeper.stdout is not None and keeper.stdout.readline() == "ok\n"
        time.sleep(claim.POLL_S * 1.5)
        assert keeper.poll() is None, "held while `up` runs"
        up.kill()
        up.wait()
        assert keeper.wait(timeout=10) == 0
        assert (tmp_path / f"mlflow.db{names.CLAIM_SUFFIX}").read_text() == ""
    finally:
        up.kill()
        keeper.kill()


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still runs")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
