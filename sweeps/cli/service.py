"""Commands of the sweep service: up, down, submit, cancel."""

from __future__ import annotations

from pathlib import Path

import typer

from sweeps.cli._app import ALLOW_PARTIAL, IMAGE, app, cli_overrides, err, load_noting, out

ADDRESS = typer.Option(
    None, "--address", help="Jobs API of a cluster, http://HOST:8265 (default: `sweeps up`'s)."
)


@app.command()
def up(
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback unless you say so)."),
    dashboard_port: int = typer.Option(8265, help="Ray's Jobs API and dashboard port."),
    mlflow_port: int = typer.Option(5000, help="MLflow UI port."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Start the local sweep service: a Ray head with the Jobs API, and the MLflow UI."""
    from sweeps import api

    info = api.up(host=host, dashboard_port=dashboard_port, mlflow_port=mlflow_port)
    if as_json:
        print(api.dumps(info))
        return
    out.print("service already running" if info["already"] else "service up", highlight=False)
    out.print(f"  Jobs API + Ray dashboard: {info['jobs_api']}", highlight=False)
    if info["mlflow_ui"]:
        out.print(f"  MLflow UI:                {info['mlflow_ui']}", highlight=False)
    out.print(f"  Ray token (owner-only):   {info['token_file']}", highlight=False)


@app.command()
def down() -> None:
    """Stop what `sweeps up` started, and nothing else. Sweeps still running are interrupted
    (running trials cancelled, MLflow runs KILLED); `sweeps resume NAME` continues each."""
    from sweeps import api

    stopped = api.down(say=lambda line: err.print(line, highlight=False, markup=False))
    out.print(f"stopped: {', '.join(stopped)}" if stopped else "no service was running")


@app.command()
def submit(
    spec: Path = typer.Argument(..., help="YAML spec (see conf/)."),
    name: str | None = typer.Option(None, help="Sweep name (default: the spec's)."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: key.path=value."),
    trials: int | None = typer.Option(None, help="budget.trials"),
    parallel: int | None = typer.Option(None, help="budget.parallel (lanes)"),
    image: str | None = IMAGE,
    address: str | None = ADDRESS,
    as_json: bool = typer.Option(False, "--json", help="Print {name, job_id, address}."),
    allow_partial: bool = ALLOW_PARTIAL,
    priority: str = typer.Option(
        "normal", "--priority", help="high, normal or low: its tier in the service's fair share."
    ),
) -> None:
    """Submit a sweep to the service and return: it goes on when this terminal closes."""
    from sweeps import api
    from sweeps.common import paths
    from sweeps.common.errors import ServiceError
    from sweeps.driver.arbitration import set_priority
    from sweeps.search.reuse import check_reuse

    set_priority(priority)  # a bad value: one line, exit 2, before anything is read
    s = load_noting(spec, cli_overrides(set_, trials, parallel, image), name)
    api.validate_spec(s)
    try:  # not "submitted" for a sweep that would run nothing, or mix two sweeps
        note = check_reuse(s, paths.storage_url(s.storage))
    except ServiceError:
        note = None  # a store only the cluster reaches: its driver opens it there
    if note:
        err.print(note, highlight=False, markup=False, soft_wrap=True)
    s, capped = api.admit(s, allow_partial)  # a quota it may not fit: exit 2 here
    if capped:
        err.print(capped, highlight=False, markup=False, soft_wrap=True)
    doc = api.submit(s, address=address, allow_partial=allow_partial)
    if as_json:
        print(api.dumps(doc))
        return
    out.print(
        f"submitted {doc['name']} as job {doc['job_id']} to {doc['address']}", highlight=False
    )
    out.print(
        f"  follow it: sweeps show {doc['name']}  |  sweeps logs {doc['name']} --driver -f",
        highlight=False,
    )


@app.command()
def cancel(
    name: str = typer.Argument(...),
    storage: str | None = typer.Option(None, "--storage", help="Optuna storage URL."),
    address: str | None = ADDRESS,
) -> None:
    """End a sweep now: running trials are recorded FAIL, their MLflow runs KILLED."""
    from sweeps import api

    state = api.cancel(name, storage, address)
    out.print(f"{name}: {state}", highlight=False)
