"""Commands for a shared service: `usage` (spend by team, user and sweep, against quotas)."""

from __future__ import annotations

import typer
from rich.table import Table

from sweeps.cli._app import app, fmt, out


@app.command()
def usage(
    team: str | None = typer.Option(None, help="Only this team's sweeps and quota."),
    period: str = typer.Option("month", help="day, week (from Monday) or month, in UTC."),
    storage: str | None = typer.Option(None, help="Optuna storage URL (default: embedded)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Spend this period by team, user and sweep, and what is left of each quota
    (conf/teams.yaml)."""
    from sweeps import api
    from sweeps.common.errors import SpecError

    if period not in ("day", "week", "month"):
        raise SpecError(f"--period: {period!r} is not day, week or month")
    doc = api.usage(storage, period, team)
    if as_json:
        print(api.dumps(doc))
        return
    table = Table("team", "user", "sweep", "cost $", "GPU-hours", title=f"usage {doc['label']}")
    for u in doc["sweeps"]:
        table.add_row(u["team"], u["owner"], u["sweep"], fmt(u["usd"]), fmt(u["gpu_hours"]))
    teams: dict[str, list[float]] = {}
    for u in doc["sweeps"]:
        t = teams.setdefault(u["team"], [0.0, 0.0])
        t[0], t[1] = t[0] + u["usd"], t[1] + u["gpu_hours"]
    for name, (usd, gpuh) in sorted(teams.items()):
        table.add_row(f"{name} (all)", "", "", fmt(usd), fmt(gpuh), style="bold")
    out.print(table)
    for q in doc["quotas"]:
        parts = []
        if q["usd"] is not None:
            parts.append(f"${q['spent_usd']:,.2f} of ${q['usd']:,.2f}")
        if q["gpu_hours"] is not None:
            parts.append(f"{q['spent_gpu_hours']:,.2f} of {q['gpu_hours']:,.2f} GPU-hours")
        out.print(f"quota {q['who']}: {', '.join(parts)} spent {doc['label']}", highlight=False)
