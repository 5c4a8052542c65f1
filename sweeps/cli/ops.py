"""Commands about the services a sweep needs: doctor."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.table import Table

from sweeps.cli._app import app, out


@app.command()
def doctor(
    spec: Path | None = typer.Argument(None, help="Check the stores this spec names."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Check each configured service: reachable, credentials, versions."""
    from sweeps import api
    from sweeps.common import paths
    from sweeps.doctor import check
    from sweeps.spec import load_spec

    s = load_spec(spec) if spec else None
    rows = check(
        paths.storage_url(s.storage if s else None),
        paths.tracking_uri(s.tracking.uri if s else None),
        os.environ.get("RAY_ADDRESS"),
        paths.checkpoint_root(),
    )
    if as_json:
        print(api.dumps(rows))
    else:
        table = Table("service", "url", "ok", "detail", "s")
        for r in rows:
            ok = "yes" if r["ok"] else "[red]NO[/]"
            table.add_row(r["service"], r["url"], ok, r["detail"], f"{r['seconds']:.2f}")
        out.print(table)
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)
