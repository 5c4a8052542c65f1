"""What the user reads of a driver's log and of a sweep's end: the sweep's lines, not Ray's."""

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from typer.testing import CliRunner

from sweeps import api
from sweeps.cli import app
from sweeps.common.quietlogs import DriverLogFilter
from sweeps.driver.summary import counts_text

ROOT = Path(__file__).resolve().parents[1]
LOG = (
    "2026-12-03 16:53:15,286\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
    "Running entrypoint for job sweeps-qs-79ac26: python -m sweeps.jobs .sweeps-spec.yaml\n"
    "\x1b[33m(raylet)\x1b[0m WARNING: 8 PYTHON worker processes have been started on node: x\n"
    "note: 2 trials left RUNNING by a dead driver were re-queued\n"
    "qs: finished (budget reached: 12/12 trials); complete 9, pruned 3\n"
)


def test_driver_log_keeps_the_sweep_and_drops_ray_lines_split_anywhere() -> None:
    want = (
        "note: 2 trials left RUNNING by a dead driver were re-queued\n"
        "qs: finished (budget reached: 12/12 trials); complete 9, pruned 3\n"
    )
    for size in (1, 7, 50, len(LOG)):  # chunk boundaries fall mid-line
        f = DriverLogFilter()
        got = "".join(f.feed(LOG[i : i + size]) for i in range(0, len(LOG), size)) + f.close()
        assert got == want, size


def test_driver_log_unterminated_last_line_and_verbose() -> None:
    f = DriverLogFilter()
    assert f.feed("qs: running") == ""
    assert f.close() == "qs: running"
    assert DriverLogFilter(keep_all=True).feed(LOG) == LOG


def test_counts_text() -> None:
    assert counts_text({"PRUNED": 3, "COMPLETE": 9}) == "complete 9, pruned 3"
    assert counts_text({}) == "no trials"


def test_run_json_stdout_is_one_document_whatever_ray_prints(home, monkeypatch) -> None:
    """Ray's error thread prints "(raylet) The node ... marked dead" on stdout while a sweep runs
    and after it (seen in the lost-node test); `run --json` keeps stdout for its document."""
    late = threading.Event()

    def fake_run(spec: Any, **_kw: Any) -> Any:
        print("\x1b[33m(raylet)\x1b[0m The node with node id: 4a92 has been marked dead")
        # and once more after the sweep, from another thread, as Ray's listener does
        threading.Thread(target=lambda: (late.wait(5), print("(raylet) late"))).start()
        return SimpleNamespace(
            name=spec.name, storage_url="x", errors=[], state="finished", reason="budget reached"
        )

    def fake_show(name: str, _url: str) -> dict:
        late.set()
        time.sleep(0.2)  # the late line is printed while the document is being written
        keys = ("best", "trials", "mlflow_experiment_id", "parent_run_id")
        return {"name": name} | dict.fromkeys(keys)

    monkeypatch.setattr(api, "run", fake_run)
    monkeypatch.setattr(api, "show", fake_show)
    r = CliRunner().invoke(app, ["run", str(ROOT / "conf/quickstart.yaml"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["state"] == "finished"
    assert "marked dead" in r.stderr and "late" in r.stderr
