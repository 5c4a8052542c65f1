"""`sweeps extend`: train finished trials more epochs from their last checkpoints."""

from __future__ import annotations

import typer

from sweeps.cli._app import app


@app.command()
def extend(
    name: str = typer.Argument(..., help="The sweep."),
    epochs: int = typer.Option(..., help="How many more epochs each trial trains (N >= 1)."),
    top: int | None = typer.Option(
        None, help="Extend the K best completed trials, ranked as the sweep's best."
    ),
    trials: str | None = typer.Option(None, help="Extend these trials instead, e.g. 3,7."),
    storage: str | None = typer.Option(None, help="Optuna storage URL (default: embedded)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Continue finished trials N more epochs from their last checkpoints, same params.

    Each extension is a NEW trial (Optuna keeps finished trials read-only),
    tagged sweeps.extends=<trial>; its value is the value after the extra epochs.
    Its MLflow run logs epochs S+1..S+N and names its source's run
    (sweeps.extends_run), so the two draw one continuous curve.
    Refused (exit 2): an unknown, running or interrupted sweep, K or N < 1,
    a trial with no checkpoint. Only the owner or an admin may extend a sweep.
    """
    from sweeps import api
    from sweeps.cli.run import _finish, _json_stdout
    from sweeps.driver.extend import parse_trials

    json_out = _json_stdout() if as_json else None
    outcome = api.extend(
        name, epochs=epochs, top=top, trials=parse_trials(trials), storage_url=storage
    )
    _finish(outcome, json_out, whole=True)
