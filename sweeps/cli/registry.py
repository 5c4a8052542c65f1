"""Commands on the MLflow Model Registry: promote, rollback, models, predict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from sweeps.cli._app import app, err, fmt, out
from sweeps.common.errors import SpecError


@app.command()
def promote(
    name: str = typer.Argument(..., help="The sweep."),
    model: str = typer.Option(..., "--model", help="Registered model name."),
    alias: str = typer.Option("champion", help="Alias to move."),
    if_better: bool = typer.Option(False, "--if-better", help="Move only if it beats the holder."),
    metric: str | None = typer.Option(None, help="Compare on this metric (default: objective)."),
    trial: int | None = typer.Option(None, help="Promote this trial instead of the best."),
    select: str | None = typer.Option(None, help="Rule, e.g. 'val_accuracy max; cost_usd <= 1'."),
    storage: str | None = typer.Option(None, help="Optuna storage URL."),
    alpha: float = typer.Option(0.05, help="--if-better with replicates: Welch's t-test p < this."),
    min_effect: float = typer.Option(0.0, help="--if-better: the smallest gain that counts."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Register the best model of a sweep; champion/challenger gate with --if-better (Welch's
    t-test when both sides have replicates, else the single values, and it says which)."""
    from sweeps import api

    p = api.promote(
        name,
        model,
        alias=alias,
        if_better=if_better,
        metric=metric,
        trial=trial,
        select=select,
        storage_url=storage,
        alpha=alpha,
        min_effect=min_effect,
    )
    if as_json:
        print(api.dumps(p))
        return
    out.print(promotion_line(p, name), highlight=False, soft_wrap=True)
    test = test_line(p.get("test"))
    if test:
        out.print(test, highlight=False, soft_wrap=True)


def test_line(test: dict[str, Any] | None) -> str | None:
    """The locked test split's scores of the new version, or why there are none, in one line."""
    if not test:
        return None
    if "note" in test:
        return test["note"]
    scores = ", ".join(f"{k} = {v:.4g}" for k, v in test["metrics"].items())
    return f"test split ({test['source']}; digest {test['digest']}), scored once: {scores}"


def promotion_line(p: dict[str, Any], sweep: str) -> str:
    """What a promotion did, in one line."""
    what = (
        f"{p['model']} v{p['version']} (trial {p['trial']} of {sweep}, "
        f"{p['metric']} = {p['value']:.6g})"
    )
    alias, version = p["alias"], p["version"]
    if p["existing"]:
        moved = f"{alias} -> v{version}" if p["moved"] else "nothing registered"
        return f"{what}: {moved}; {p['reason']}"
    if p["moved"] and p["previous_version"] is None:
        return f"{what}: v{version} is the first {alias}"
    if p["moved"]:  # the version now holds the alias, not `challenger`
        return f"{what}: {alias} -> v{version}: {p['reason']}"
    return f"{what} is challenger; {alias} stays v{p['previous_version']}: {p['reason']}"


@app.command()
def rollback(model: str = typer.Argument(...), alias: str = typer.Option("champion")) -> None:
    """Move an alias back to the version that held it before."""
    from sweeps import api

    old, new = api.rollback(model, alias=alias)
    out.print(f"{model}@{alias}: v{old} -> v{new} (tagged sweeps.rollback; decisions kept)")


@app.command()
def models(model: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """List a registered model's versions: aliases, metric values, source sweeps."""
    from sweeps import api

    rows = api.models(model)
    if as_json:
        print(api.dumps(rows))
        return
    table = Table("version", "aliases", "metric", "value", "sweep", "trial", "decision", "rollback")
    for r in rows:
        table.add_row(
            r["version"],
            ", ".join(r["aliases"]),
            fmt(r["metric"]),
            fmt(r["value"]),
            fmt(r["sweep"]),
            fmt(r["trial"]),
            fmt(r["decision"]),
            fmt(r["rollback"]),
        )
    out.print(table)


@app.command()
def predict(
    ref: str = typer.Argument(..., help="MODEL@alias, MODEL/version or models:/..."),
    input_path: Path = typer.Argument(..., help=".npy or .csv"),
    out_path: Path | None = typer.Option(None, "--out", help="Write predictions (.npy/.csv)."),
) -> None:
    """Predict with a registered model through mlflow.pyfunc."""
    from sweeps import api

    if not input_path.exists():
        raise SpecError(f"INPUT: file not found: {input_path}")
    notes: list[str] = []
    y = api.predict(ref, str(input_path), str(out_path) if out_path else None, notes=notes)
    for note in notes:
        if note.startswith("warning: "):
            warning = note.removeprefix("warning: ")
            err.print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
        else:
            out.print(note, highlight=False, soft_wrap=True)
    classes = y.argmax(axis=1) if y.ndim == 2 else y
    out.print(
        f"{len(y)} predictions"
        + (f" -> {out_path}" if out_path else "")
        + f"; first classes: {list(map(int, classes[:10]))}",
        highlight=False,
    )
