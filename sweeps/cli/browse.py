"""Commands that read the learning log: ls, show, stop, logs, report, note, compare, ui."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from sweeps.cli._app import app, err, fmt, out
from sweeps.cli.tables import print_table

STORAGE = typer.Option(None, "--storage", help="Optuna storage URL (default: embedded).")


@app.command("ls")
def ls_(
    storage: str | None = STORAGE,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List sweeps: state, trials by state, best value, cost, wall time (command start to end,
    set-up included) and the trials' own time."""
    from sweeps import queries  # what `api.ls` is, without the spec models `api` imports

    rows = queries.ls(storage)
    if as_json:
        print(json.dumps(rows, indent=2, default=str))  # as `api.dumps`
        return
    headers = ["sweep", "state", "owner", *STATE_WORDS.values(), "best", "cost $", "wall s"]
    cells = [
        [
            r["name"],
            r["state"],
            r.get("owner") or "-",
            *(str(r["trials"].get(k, 0)) for k in STATE_WORDS),
            fmt(r["best"]),
            fmt(r["cost_usd"]),
            fmt(r["wall_s"]),
            fmt(r["trial_s"]),
        ]
        for r in rows
    ]
    print_table(out, [*headers, "trial s"], cells)  # rich's look, line by line (`cli.tables`)


def interval_text(r: dict[str, Any]) -> str:
    """'0.9512 ± 0.0081 (95% CI, n=5)', or the mean alone where n < 2."""
    if r.get("ci95_low") is None or r.get("ci95_high") is None:
        return f"{r['mean']:.4f} (n={r['n']}, no interval)"
    half = (r["ci95_high"] - r["ci95_low"]) / 2
    return f"{r['mean']:.4f} ± {half:.4f} (95% CI, n={r['n']})"


def _owned(doc: dict) -> str:
    """`; alice of team vision` for a sweep with an owner on record."""
    if not doc.get("owner"):
        return ""
    return f"; {doc['owner']}" + (f" of team {doc['team']}" if doc.get("team") else "")


# A trial state as ls, compare and show's lines name it.
STATE_WORDS = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running"}


@app.command()
def show(
    name: str = typer.Argument(...),
    storage: str | None = STORAGE,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One sweep: every trial with its state, value, params and MLflow run."""
    from sweeps import queries  # what `api.show` is, without the spec models `api` imports
    from sweeps.common.errors import error_summary

    doc = queries.show(name, storage)
    if as_json:
        print(json.dumps(doc, indent=2, default=str))  # as `api.dumps`
        return
    cells = [
        [
            str(t["number"]),
            t["state"],
            fmt(t["value"]),
            json.dumps(t["params"]),
            fmt(t["duration_s"]),
            (t["mlflow_run_id"] or "-")[:12],
        ]
        for t in doc["trials"]
    ]
    headers = ["#", "state", doc["objective"] or "value", "params", "s", "mlflow run"]
    print_table(out, headers, cells, f"{name} ({doc['state']}{_owned(doc)})")  # 10,000 rows: < 1 s
    for t in doc["trials"]:
        if t.get("retry_of") is not None:  # a retry: which attempt of whose params
            line = f"#{t['number']} attempt {t['attempt']}, retrying #{t['retry_of']}"
            out.print(line, highlight=False, markup=False)
        if t.get("error"):
            state = STATE_WORDS.get(t["state"], t["state"].lower())
            cause = f" ({t['failure_cause']}; retried)" if t.get("retried") else ""
            line = f"#{t['number']} {state}{cause}: {error_summary(t['error'])}"
            out.print(line, highlight=False, markup=False)
        if t.get("infeasible"):  # broke a constraint: never the best
            line = f"#{t['number']} infeasible: {'; '.join(t['infeasible'])}"
            out.print(line, highlight=False, markup=False)
    for r in doc.get("replicated") or []:  # `evaluate`: ranked by the mean, not one seed
        out.print(f"replicates of #{r['number']}: {interval_text(r)}", highlight=False)
    best = doc["best"]
    if best and best.get("replicates"):
        line = f"best by replicate mean: #{best['number']} = {interval_text(best['replicates'])}"
        out.print(f"{line}; its own run {fmt(best['value'])}", highlight=False)
    elif best:
        out.print(f"best: #{best['number']} = {fmt(best['value'])}", highlight=False)
    if doc.get("stop_reason"):  # how it ended: "converged: no improvement ... in the last 5 trials"
        out.print(f"ended: {doc['stop_reason']}", highlight=False, markup=False, soft_wrap=True)
    if doc.get("checkpoint_bytes") is not None:  # recorded as trials end (`checkpoints:`)
        out.print(f"checkpoints: {doc['checkpoint_bytes'] / 1e6:.1f} MB", highlight=False)


@app.command()
def stop(name: str = typer.Argument(...), storage: str | None = STORAGE) -> None:
    """Ask a running sweep (from any terminal or machine) to stop launching trials."""
    from sweeps import api

    state = api.stop(name, storage)
    if state in ("running", "queued"):
        out.print(f"stop requested for {name}: running trials finish, no new ones start")
    elif state == "finished":
        out.print(f"{name} already finished: nothing to stop", highlight=False)
    else:
        out.print(f"{name} is not running (it is {state}): nothing to stop", highlight=False)


@app.command()
def pause(name: str = typer.Argument(...), storage: str | None = STORAGE) -> None:
    """Park a running sweep: each running trial ends at its next checkpoint, its lanes are
    released (kept warm on a service), and the sweep ends `paused`. `sweeps resume NAME`
    continues every parked trial from its checkpoint, then runs the rest of the budget."""
    from sweeps import api

    state = api.pause(name, storage)
    if state != "running":
        err.print(f"{name} is not running (it is {state}): nothing to pause", highlight=False)
        raise typer.Exit(2)
    out.print(
        f"pause requested for {name}: running trials park at their next checkpoint; "
        f"sweeps resume {name} continues them",
        highlight=False,
    )


@app.command()
def report(
    name: str = typer.Argument(...),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Folder (default .sweeps/reports/NAME)."
    ),
    storage: str | None = STORAGE,
) -> None:
    """Write the learning log: Markdown + HTML with the plots embedded."""
    from sweeps import api

    files = api.report(name, str(out_dir) if out_dir else None, storage)
    out.print(f"report: {files['markdown']}\n        {files['html']}", highlight=False)


@app.command()
def note(
    name: str = typer.Argument(...),
    text: str = typer.Argument(..., help="What went wrong and how it was solved."),
    trial: int | None = typer.Option(None, help="Attach to this trial's run (default: the sweep)."),
    storage: str | None = STORAGE,
) -> None:
    """Record a problem/solution note (an MLflow run note; it appears in the report)."""
    from sweeps import api

    run_id = api.note(name, text, trial, storage)
    out.print(f"noted on run {run_id}")


@app.command()
def compare(
    a: str = typer.Argument(...),
    b: str = typer.Argument(...),
    storage: str | None = STORAGE,
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Two sweeps side by side: best value, params, cost, wall time, trials by state."""
    from sweeps import api

    doc = api.compare(a, b, storage)
    if as_json:
        print(api.dumps(doc))
        return
    table = Table("", a, b)
    da, db = doc[a], doc[b]
    table.add_row("objective", fmt(da["objective"]), fmt(db["objective"]))
    table.add_row("best", fmt(da["best"]), fmt(db["best"]))
    table.add_row("cost $", fmt(da["cost_usd"]), fmt(db["cost_usd"]))
    table.add_row("wall s", fmt(da["wall_s"]), fmt(db["wall_s"]))
    table.add_row("trial s", fmt(da["trial_s"]), fmt(db["trial_s"]))
    for state in sorted(set(da["trials"]) | set(db["trials"])):
        table.add_row(
            STATE_WORDS.get(state, state.lower()),
            str(da["trials"].get(state, 0)),
            str(db["trials"].get(state, 0)),
        )
    for k in sorted(set(da["best_params"]) | set(db["best_params"])):
        table.add_row(f"best {k}", fmt(da["best_params"].get(k)), fmt(db["best_params"].get(k)))
    out.print(table)


@app.command()
def logs(
    name: str = typer.Argument(...),
    trial: int | None = typer.Option(None, help="Trial number (default: the latest)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing while it runs."),
    driver: bool = typer.Option(False, "--driver", help="The driver's job log (submitted)."),
    storage: str | None = STORAGE,
    address: str | None = typer.Option(None, "--address", help="Jobs API, http://HOST:8265."),
) -> None:
    """Print a trial's output (every rank's stdout/stderr), or with --driver the driver's."""
    import time

    from sweeps import api
    from sweeps.common.errors import NotFoundError

    if driver:
        from sweeps.common.quietlogs import DriverLogFilter, verbose

        shown = DriverLogFilter(keep_all=verbose())  # Ray's job-supervisor lines only with -v
        for chunk in api.driver_logs(name, follow, storage, address):
            sys.stdout.write(shown.feed(chunk))
            sys.stdout.flush()
        sys.stdout.write(shown.close())
        return
    while True:  # -f before the first trial: wait for one
        try:
            number, text = api.logs(name, trial, storage)
            break
        except NotFoundError as e:
            if not follow or "no trials yet" not in str(e):
                raise
            time.sleep(1.0)
    trial_doc = _trial(api.show(name, storage), number)
    # Which trial this is goes to stderr: stdout stays the trial's own output.
    err.print(f"{name} trial #{number} ({trial_doc.get('state', '?')})", highlight=False)
    sys.stdout.write(text)
    shown = len(text)
    while follow:
        time.sleep(1.0)
        doc = api.show(name, storage)
        state = next((t["state"] for t in doc["trials"] if t["number"] == number), "")
        _, text = api.logs(name, number, storage)
        sys.stdout.write(text[shown:])
        sys.stdout.flush()
        shown = len(text)
        if state != "RUNNING":
            trial_doc = _trial(doc, number)
            break
    if trial_doc.get("error"):
        from sweeps.common.errors import error_summary

        err.print(f"#{number} failed: {error_summary(trial_doc['error'])}", markup=False)


def _trial(doc: dict[str, Any], number: int) -> dict[str, Any]:
    return next((t for t in doc["trials"] if t["number"] == number), {})


@app.command()
def ui(
    port: int = typer.Option(5000, help="MLflow UI port."),
    dashboard_port: int = typer.Option(8080, help="optuna-dashboard port."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback unless you say so)."),
    storage: str | None = STORAGE,
) -> None:
    """Start the MLflow UI and optuna-dashboard on the embedded stores; Ctrl-C or SIGTERM
    stops both. Their URLs are printed once they answer; a taken port is refused first."""
    import os

    from sweeps.common import paths
    from sweeps.service import ui as servers

    uri = paths.tracking_uri()
    url = paths.storage_url(storage)
    bindir = Path(sys.executable).parent
    verbose = os.environ.get("SWEEPS_VERBOSE") == "1"
    todo = []
    if uri.startswith(("sqlite", "postgresql", "file:", "/")):
        cmd = [str(bindir / "mlflow"), "ui", "--backend-store-uri", uri, "--workers", "1"]
        cmd += ["--host", host, "--port", str(port)]
        # No GenAI job runner: a UI for one user (as `sweeps up` serves it).
        env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        todo.append(
            servers.Server("MLflow UI", cmd, port, "--port", "/health", _runs_view(uri), env)
        )
    else:
        out.print(f"MLflow UI:        {uri} (a tracking server)")
    servers.create_storage(url)  # a fresh home: optuna-dashboard cannot make the tables itself
    dash = [str(bindir / "optuna-dashboard"), url, "--host", host, "--port", str(dashboard_port)]
    todo.append(servers.Server("optuna-dashboard", dash, dashboard_port, "--dashboard-port", "/"))
    log = None if verbose else paths.home() / "logs" / "ui.log"  # their INFO lines: a file
    try:
        servers.serve(todo, host, log, lambda line: out.print(line, highlight=False))
    except servers.Terminated:
        raise typer.Exit(143) from None


def _runs_view(uri: str) -> str:
    """The runs table of the most recently used sweep experiment (MLflow's UI route)."""
    try:
        from mlflow.tracking import MlflowClient

        exps = MlflowClient(uri).search_experiments(
            max_results=1, order_by=["last_update_time DESC"]
        )
        return f"#/experiments/{exps[0].experiment_id}/runs" if exps else "#/experiments"
    except Exception:
        return ""
