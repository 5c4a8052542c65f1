"""`sweeps queue`: the service's sweeps as its fair-share arbiter sees them now."""

from __future__ import annotations

import typer
from rich.table import Table

from sweeps.cli._app import app, out


def _start(row: dict) -> str:
    """A queued sweep's estimated start: the lane-seconds of work of the sweeps ahead of it
    (their trials left times their mean trial length so far) over the service's lanes."""
    if row["state"] != "queued":
        return "now"
    s = row.get("start_in_s")
    return "unknown" if s is None else f"in ~{s:.0f} s"


@app.command()
def queue(as_json: bool = typer.Option(False, "--json")) -> None:
    """Running sweeps, then the waiting ones in order: owner, team, priority, lanes asked for
    and held, and an estimated start (the work ahead over the lanes)."""
    from sweeps import api

    doc = api.queue()
    if as_json:
        print(api.dumps(doc))
        return
    table = Table("#", "sweep", "owner", "team", "priority", "asks", "holds", "state", "start")
    table.title = f"service queue ({doc['capacity'] or 0} lanes)"
    for r in doc["sweeps"]:
        state = "queued" if r["state"] == "queued" else f"running (target {r['target']})"
        table.add_row(
            str(r.get("position", "")),
            r["sweep"],
            r["owner"],
            r["team"],
            r["priority"],
            str(r["want"]),
            str(r["held"]),
            state,
            _start(r),
        )
    out.print(table)
