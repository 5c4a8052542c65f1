"""What the service's zygote does before it forks, so that its forks start at once (issue 30).

A driver the zygote forked has the zygote fork its MLflow writer process too
(tracking/writer_fork.py): MLflow is imported there already, so the writer does not spend ~2 s
of CPU importing it beside a warm sweep's first trials. The writer has a session of its own,
and writes: it makes the MLflow store's schema while the driver waits in `ray.init` on a Ray
address nobody answers. A fork opens its first Optuna store with nothing left to import
(`submit`'s record, the driver's study), and its GC leaves the zygote's objects alone. No Ray.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from services import free_port

pytestmark = pytest.mark.timeout(120)

SUPERVISOR = """
import sys
from sweeps.service import zygote
child = zygote.spawn(sys.argv[1], "sweeps.jobs", sys.argv[2:])
assert child is not None, "the zygote did not answer"
print("PID", child.pid, flush=True)
sys.exit(child.wait())
"""


def _children(pid: int) -> set[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return {int(x) for x in out.stdout.split()}


def _has_schema(db: Path) -> bool:
    """MLflow's tables are there: the writer made them (the driver only opens the file)."""
    if not db.exists():
        return False
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            conn.execute("SELECT COUNT(*) FROM runs").fetchone()
        return True
    except sqlite3.Error:
        return False  # not made yet


def test_a_forked_drivers_writer_is_forked_by_the_zygote_and_writes(tmp_path):
    sock = tmp_path / "z.sock"
    zyg = subprocess.Popen(
        [sys.executable, "-m", "sweeps.service.zygote", str(sock)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
    )
    sup = None
    try:
        deadline = time.monotonic() + 90
        while not sock.exists():
            assert zyg.poll() is None and time.monotonic() < deadline, "the zygote never listened"
            time.sleep(0.1)
        before = _children(zyg.pid)
        job = tmp_path / "job"
        job.mkdir()
        (job / "spec.yaml").write_text((ROOT / "conf" / "quickstart.yaml").read_text())
        home = tmp_path / "home"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SWEEPS_HOME": str(home),
            "RAY_ADDRESS": f"127.0.0.1:{free_port()}",  # ray.init waits: the test ends first
        }
        sup = subprocess.Popen(
            [sys.executable, "-c", SUPERVISOR, str(sock), "--drive", "spec.yaml"],
            cwd=job,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        driver = int(sup.stdout.readline().split()[1])
        deadline = time.monotonic() + 60
        while not _has_schema(home / "mlflow.db"):
            assert sup.poll() is None, "the driver ended"
            assert time.monotonic() < deadline, "the writer made no MLflow store"
            time.sleep(0.2)
        writers = _children(zyg.pid) - before - {driver}
        assert len(writers) == 1, f"one writer forked by the zygote: {writers}"
        writer = writers.pop()
        assert not _children(driver), "the driver started no writer of its own"
        assert os.getsid(writer) == writer, "a session of its own, as the Popen'd writer"
    finally:
        if sup is not None:
            sup.kill()
            sup.wait()
        os.killpg(zyg.pid, signal.SIGKILL)
        zyg.wait()


WARM_OPEN = """
import sys
from sweeps.service import zygote
zygote.warm_up()
import gc
from sweeps.search.study import open_storage
before = set(sys.modules)
open_storage("sqlite:///" + sys.argv[1]).engine.dispose()
print(gc.get_freeze_count(), sorted(set(sys.modules) - before))
"""


def test_after_the_zygotes_warm_up_a_store_opens_with_nothing_to_import_and_gc_spares_it(
    tmp_path,
):
    """Nothing left to import on a fork's first Optuna store; and what the zygote made is
    frozen, so a fork's full collections do not walk (and copy) it."""
    out = subprocess.run(
        [sys.executable, "-c", WARM_OPEN, str(tmp_path / "optuna.db")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    frozen, imported = out.stdout.split(" ", 1)
    assert imported.strip() == "[]", "imported on the first open: " + imported
    assert int(frozen) > 100_000, "the warm-up's objects are frozen for the GC"
