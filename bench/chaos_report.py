"""Inject the faults a long sweep meets and count what survived.

    .venv/bin/python bench/chaos_report.py [--out bench/RESULTS.md] [--only node-lost]

`--only node-lost` runs that fault alone and merges its row into the table already in `--out`;
`--only retries`, `--only checkpoints` (full disk, torn checkpoint, pause; then the retries'
rows) and `--only preempt` (a trial parked for a high-priority sweep, on a service) do the same
with theirs.

Prints: fault, times injected, survived, trials lost, runs left RUNNING. A trial is lost when a
finished Optuna trial has no closed MLflow run (or a COMPLETE one vanished); "left RUNNING"
counts Optuna trials and MLflow runs still RUNNING after the fault and its recovery.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BYO = ROOT / "tests" / "byo"
sys.path.insert(0, str(ROOT))

from bench.chaos_checkpoints import checkpoint_rows  # noqa: E402
from bench.chaos_common import audit, audit_with, cli, merge_row, spec, wait_for  # noqa: E402
from bench.chaos_node import node_lost  # noqa: E402
from bench.chaos_preempt import preempt_row  # noqa: E402
from bench.chaos_retries import retry_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--only", choices=["node-lost", "retries", "checkpoints", "preempt"])
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="sweeps-chaos-"))

    def home(name: str) -> Path:
        h = base / name / "home"
        h.parent.mkdir(parents=True)
        return h

    if args.only:
        if args.only == "node-lost":
            only = [node_lost(base)]
        elif args.only == "checkpoints":
            only = checkpoint_rows(home, cli, audit) + retry_rows(home, cli, audit)
        elif args.only == "preempt":
            only = [preempt_row(home, audit)]
        else:
            only = retry_rows(home, cli, audit)
        for row in only:
            print("| " + " | ".join(str(x) for x in row) + " |")
            if args.out:
                merge_row(args.out, row, args.only)
        return
    rows = []

    # 1. worker SIGKILLed mid-epoch (once per trial): resumed from a checkpoint
    h = home("worker")
    marker = base / "markers"
    marker.mkdir()
    s = spec(
        h,
        "worker",
        "kill_once",
        3,
        epochs=4,
        params=f"{{marker_dir: '{marker}'}}",
        extra="execution: {checkpoint_min_interval_s: 0}\n",
    )
    cli(h, "run", str(s), timeout=600)
    lost, left, c = audit(h, "worker")
    rows.append(("worker killed", 3, c.get("COMPLETE", 0), lost, left))

    rows += retry_rows(home, cli, audit)  # a killed worker retried; a trial timed out
    rows += checkpoint_rows(home, cli, audit)  # full disk, torn checkpoint, pause and resume
    rows.append(preempt_row(home, audit))  # a trial parked for a high-priority sweep

    # 2. exception in user code, 3. NaN loss
    h = home("error")
    s = spec(h, "error", "flaky", 6)  # raises on every rank when lr > 0.01
    cli(h, "run", str(s), timeout=600)
    lost, left, c = audit(h, "error")
    rows.append(
        ("trial raises", c.get("FAIL", 0), c.get("FAIL", 0) + c.get("COMPLETE", 0), lost, left)
    )
    h = home("nan")
    cli(h, "run", str(spec(h, "nan", "nan_loss", 2, epochs=5)), timeout=600)
    lost, left, c = audit(h, "nan")
    rows.append(("NaN loss", 2, c.get("FAIL", 0), lost, left))

    # 4. driver SIGKILLed mid-sweep, then `sweeps resume`
    h = home("driver")
    s = spec(h, "driver", "slow", 4, epochs=6, params="{sleep: 0.4}")
    e = {**os.environ, "SWEEPS_HOME": str(h)}
    p = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", str(s)],
        env=e,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    from sweeps import api

    url = f"sqlite:///{h}/optuna.db"
    wait_for(
        lambda: (
            any(t["state"] == "COMPLETE" for t in api.show("driver", url)["trials"])
            and any(t["state"] == "RUNNING" for t in api.show("driver", url)["trials"])
        )
    )
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    cli(h, "resume", "driver", timeout=600)
    lost, left, c = audit(h, "driver")
    rows.append(("driver killed + resume", 1, int(c.get("COMPLETE", 0) == 4), lost, left))

    # 4b. a whole Ray node lost mid-trial (the two-node cluster of tests/test_zz_cluster.py)
    rows.append(node_lost(base))

    # 5. Ctrl-C once: running trial finishes, exit 130
    h = home("sigint")
    s = spec(h, "sigint", "slow", 20, epochs=4, params="{sleep: 0.3}")
    p = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", str(s)],
        env={**os.environ, "SWEEPS_HOME": str(h)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"sqlite:///{h}/optuna.db"
    wait_for(lambda: any(t["state"] == "COMPLETE" for t in api.show("sigint", url)["trials"]))
    p.send_signal(signal.SIGINT)
    p.wait(timeout=300)
    lost, left, c = audit(h, "sigint")
    rows.append(("Ctrl-C", 1, int(p.returncode == 130), lost, left))

    # 6. tracking server unreachable at start
    h = home("mlflowdown")
    r = cli(
        h,
        "run",
        str(spec(h, "down", "curve", 2)),
        env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
        timeout=120,
    )
    rows.append(
        (
            "tracking server down at start",
            1,
            int(r.returncode == 1 and "unreachable" in r.stderr),
            0,
            0,
        )
    )

    # 6b. tracking server lost mid-sweep, 6c. Optuna database lost mid-sweep: both pause + retry
    sys.path.insert(0, str(ROOT / "tests"))
    from urllib.parse import urlparse

    from services import postgres_server, start_mlflow_server

    def outage(name: str, env: dict, cut, heal) -> tuple[int, int, int]:
        h = home(name)
        s = spec(h, name, "slow", 6, params="{sleep: 0.3}")
        p = subprocess.Popen(
            [sys.executable, "-m", "sweeps.cli", "run", str(s)],
            env={**os.environ, "SWEEPS_HOME": str(h), **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = env.get("SWEEPS_STORAGE", f"sqlite:///{h}/optuna.db")
        wait_for(lambda: sum(t["state"] == "COMPLETE" for t in api.show(name, url)["trials"]) >= 2)
        cut()
        time.sleep(4)
        heal()
        p.wait(timeout=600)
        return h, url, p.returncode

    srv = [start_mlflow_server(f"sqlite:///{base}/srv.db", str(base / "srv-art"))]
    port = urlparse(srv[0].url).port
    h, url, rc = outage(
        "mlflowlost",
        {"MLFLOW_TRACKING_URI": srv[0].url},
        lambda: srv[0].stop(),
        lambda: srv.append(
            start_mlflow_server(f"sqlite:///{base}/srv.db", str(base / "srv-art"), port=port)
        ),
    )
    lost, left, c = audit_with(url, srv[-1].url, "mlflowlost")
    srv[-1].stop()
    rows.append(
        (
            "tracking server lost mid-sweep (4 s)",
            1,
            int(rc == 0 and c.get("COMPLETE") == 6),
            lost,
            left,
        )
    )
    with postgres_server() as pg:
        db = pg.create_database("chaos")
        h, url, rc = outage("dblost", {"SWEEPS_STORAGE": db}, pg.stop, pg.start)
        lost, left, c = audit_with(url, f"sqlite:///{h}/mlflow.db", "dblost")
    rows.append(
        (
            "Optuna database lost mid-sweep (4 s)",
            1,
            int(rc == 0 and c.get("COMPLETE") == 6),
            lost,
            left,
        )
    )

    # 8. load: 4 drivers x 50 trials on one PostgreSQL study (driver processes, one Ray each)
    with postgres_server() as pg:
        db, mdb = pg.create_database("load"), pg.create_database("loadml")
        h = home("load")
        s = spec(h, "load", "curve", 200, epochs=1)
        e = {**os.environ, "SWEEPS_HOME": str(h), "SWEEPS_STORAGE": db, "MLFLOW_TRACKING_URI": mdb}
        first = subprocess.Popen(
            [sys.executable, "-m", "sweeps.cli", "run", str(s)],
            env=e,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: api.show("load", db)["trials"])
        rest = [
            subprocess.Popen(
                [sys.executable, "-m", "sweeps.cli", "run", str(s), "--join"],
                env=e,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(3)
        ]
        rcs = [p.wait(timeout=1200) for p in [first, *rest]]
        lost, left, c = audit_with(db, mdb, "load")
        doc = api.show("load", db)
        numbers = [t["number"] for t in doc["trials"]]
        ok = (
            rcs == [0] * 4
            and len(numbers) == 200 == len(set(numbers))
            and len({t["mlflow_run_id"] for t in doc["trials"]}) == 200
        )
    rows.append(
        (
            "load: 4 drivers x 50 trials, one PostgreSQL study",
            200,
            200 if ok else c.get("COMPLETE", 0),
            lost,
            left,
        )
    )

    # 9. secrets: values under secret-looking keys never reach a store, report or output
    h = home("secrets")
    secret = "sk-chaos-9f8e7d6c5b4a"
    s = spec(h, "secrets", "curve", 2, params=f"{{api_key: {secret}, db_password: {secret}}}")
    r = cli(h, "run", str(s), "--json", timeout=600)
    rep = cli(h, "report", "secrets", timeout=300)
    blobs = [r.stdout, r.stderr, rep.stdout]
    blobs += [p.read_bytes().decode("latin-1") for p in h.rglob("*") if p.is_file()]
    leaks = sum(secret in b for b in blobs)
    lost, left, _ = audit(h, "secrets")
    rows.append(
        ("secrets in spec fields (stores, report, output grepped)", 1, int(leaks == 0), lost, left)
    )

    # 7. bad input: invalid specs and arguments
    bad = [
        "budget.trials=-1",
        "budget.parallel=0",
        "search_space.lr.low=5",
        "sampler.name=x",
        "pruner.name=y",
        "trainer.model=gpt",
        "trainer.epochs=1e12",
        "resources=[1]",
        "storage=redis://x",
        "tracking.uri=ftp:/x",
        "name=bad name",
        "nosuch=1",
        "resources.machine_type=zz",
        "sampler.options.nope=1",
        "trainer.dataset=imagenet",
    ]
    h = home("bad")
    ok = 0
    for b in bad:
        r = cli(h, "run", str(spec(h, "bad", "curve", 1)), "--set", b, timeout=60)
        ok += r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    rows.append(
        (
            "bad input (one-line, exit 2, nothing written)",
            len(bad),
            ok if not h.exists() else 0,
            0,
            0,
        )
    )

    lines = [
        f"### chaos_report ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs)",
        "",
        "| fault | times injected | survived | trials lost | runs left RUNNING |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {f} | {n} | {s} | {lost} | {left} |" for f, n, s, lost, left in rows]
    text = "\n".join(lines)
    from bench.results import publish

    publish(text, args.out, "chaos_report")


if __name__ == "__main__":
    main()
