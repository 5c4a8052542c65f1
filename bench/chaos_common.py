"""What the chaos report's fault modules share: running the CLI on a home, a spec for the
tests' BYO trainers, the audit of a sweep in both stores, a poll, and merging one row into the
table already written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BYO = ROOT / "tests" / "byo"


def cli(home: Path, *args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    e = {**os.environ, "SWEEPS_HOME": str(home), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args], env=e, capture_output=True, text=True, **kw
    )


def spec(
    home: Path,
    name: str,
    fn: str,
    trials: int,
    extra: str = "",
    epochs: int = 3,
    params: str = "{}",
) -> Path:
    p = home.parent / f"{name}.yaml"
    p.write_text(
        f"name: {name}\nsearch_space: {{lr: {{type: float, low: 0.001, high: 0.02}}}}\n"
        "sampler: {name: random, seed: 1}\npruner: {name: none}\n"
        f"budget: {{trials: {trials}, parallel: 1}}\n{extra}"
        f"trainer: {{entrypoint: 'byo_tasks:{fn}', code_dir: '{BYO}', epochs: {epochs}, "
        f"params: {params}}}\n"
    )
    return p


def audit(home: Path, name: str) -> tuple[int, int, dict]:
    """(trials lost, left RUNNING, state counts) for a sweep in both stores."""
    return audit_with(f"sqlite:///{home}/optuna.db", f"sqlite:///{home}/mlflow.db", name)


def audit_with(storage: str, tracking: str, name: str) -> tuple[int, int, dict]:
    from mlflow.tracking import MlflowClient

    from sweeps import api

    doc = api.show(name, storage)
    client = MlflowClient(tracking)
    lost = running = 0
    counts: dict[str, int] = {}
    for t in doc["trials"]:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
        if t["state"] == "RUNNING":
            running += 1
        if not t["mlflow_run_id"]:
            lost += t["state"] == "COMPLETE"
            continue
        run = client.get_run(t["mlflow_run_id"])
        if run.info.status == "RUNNING":
            running += 1
        if t["state"] == "COMPLETE" and run.info.status != "FINISHED":
            lost += 1
    return lost, running, counts


def wait_for(pred, timeout: float = 240) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise TimeoutError


def merge_row(path: str, row: tuple, only: str = "node-lost") -> None:
    """Replace (or add) one fault's row in the chaos table already written to `path`."""
    import re

    from bench.results import write_section

    body = Path(path).read_text()
    m = re.search(r"<!-- chaos_report:start -->\n(.*?)\n<!-- chaos_report:end -->", body, re.S)
    note = f'Row "{row[0]}"'
    lines = [ln for ln in m.group(1).splitlines() if not ln.startswith((f"| {row[0]} |", note))]
    last = max(i for i, ln in enumerate(lines) if ln.startswith("|"))  # the table's end
    lines.insert(last + 1, "| " + " | ".join(str(x) for x in row) + " |")
    while lines and not lines[-1]:
        lines.pop()
    lines += ["", f"{note} from `--only {only}`, {time.strftime('%Y-%m-%d')}."]
    write_section(path, "chaos_report", "\n".join(lines))
