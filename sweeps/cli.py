"""`sweeps` command line: parses, prints, maps errors to exit codes. The work is in sweeps.api.

Exit codes: 0 ok, 1 failure at run time, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from sweeps.errors import SpecError, SweepsError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Hyperparameter sweeps for PyTorch: Optuna drives, Ray Train runs, MLflow remembers.",
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)


def _fail(e: BaseException) -> None:
    code = e.exit_code if isinstance(e, SweepsError) else 1
    msg = " ".join(str(e).split()) or type(e).__name__
    err.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    spec: Path | None = typer.Argument(None, help="YAML spec (see conf/)."),
    name: str | None = typer.Option(None, help="Sweep name (default: the spec's)."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: key.path=value."),
    trials: int | None = typer.Option(None, help="budget.trials"),
    parallel: int | None = typer.Option(None, help="budget.parallel (lanes)"),
    enqueue: Path | None = typer.Option(
        None, help="JSON file: a list of param dicts to try first."
    ),
    join: bool = typer.Option(
        False, help="Join a running sweep of this name (same as re-running)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    aiplatform: Path | None = typer.Option(
        None, "--aiplatform", help="Run a legacy AI Platform job config unchanged."
    ),
    package_path: Path | None = typer.Option(None, help="With --aiplatform: the package folder."),
    module_name: str | None = typer.Option(None, help="With --aiplatform: e.g. trainer.task."),
) -> None:
    """Run a sweep (or continue / join the sweep of that name).

    With --aiplatform, arguments after `--` go to the user's module unchanged.
    """
    from sweeps import api
    from sweeps.spec import load_spec

    try:
        overrides = list(set_)
        if trials is not None:
            overrides.append(f"budget.trials={trials}")
        if parallel is not None:
            overrides.append(f"budget.parallel={parallel}")
        if aiplatform is not None:
            # After `--` everything is the module's; Click hands the first word to SPEC.
            user_args = ([str(spec)] if spec is not None else []) + list(ctx.args)
            s = _aiplatform_spec(aiplatform, package_path, module_name, name, user_args, overrides)
        elif ctx.args:
            raise SpecError(f"unknown arguments: {' '.join(ctx.args)}")
        elif spec is None:
            raise SpecError("SPEC: a spec file is required (or --aiplatform CONFIG)")
        else:
            s = load_spec(spec, overrides, name=name)
        api.validate_spec(s)
        queued = _read_enqueue(enqueue) if enqueue else None
        progress = None if as_json else _progress(s)
        outcome = api.run(s, callbacks=[progress] if progress else None, enqueue=queued)
    except SweepsError as e:
        _fail(e)
        return
    except KeyboardInterrupt:
        err.print("interrupted")
        raise typer.Exit(130) from None
    if progress:
        progress.close()
    doc = api.show(outcome.name, outcome.storage_url)
    for e in outcome.errors[:3]:
        err.print(f"[yellow]warning:[/] tracking write failed: {e}", highlight=False)
    if as_json:
        print(
            api.dumps(
                {
                    k: doc[k]
                    for k in ("name", "best", "trials", "mlflow_experiment_id", "parent_run_id")
                }
                | {"state": outcome.state, "stop_reason": outcome.reason}
            )
        )
    else:
        _print_summary(doc, outcome)
    if outcome.state == "interrupted":
        raise typer.Exit(130)
    if outcome.state == "failed":
        raise typer.Exit(1)


def _aiplatform_spec(
    config: Path,
    package_path: Path | None,
    module_name: str | None,
    name: str | None,
    user_args: list[str],
    overrides: list[str],
) -> Any:
    from sweeps.aiplatform import load_config, to_spec
    from sweeps.spec import spec_from_dict

    if package_path is None or module_name is None:
        raise SpecError("--aiplatform needs --package-path DIR and --module-name pkg.module")
    if not package_path.is_dir():
        raise SpecError(f"--package-path: folder not found: {package_path}")
    raw, notes = to_spec(
        load_config(config),
        name=name or config.stem,
        package_path=str(package_path),
        module_name=module_name,
        user_args=user_args,
    )
    for n in notes:
        err.print(f"note: {n}", highlight=False)
    return spec_from_dict(raw, overrides)


@app.command("import-aiplatform")
def import_aiplatform(
    config: Path = typer.Argument(..., help="AI Platform job config (trainingInput)."),
    package_path: Path = typer.Option(Path("."), help="The package folder."),
    module_name: str = typer.Option("trainer.task", help="The module to run."),
    name: str | None = typer.Option(None),
) -> None:
    """Print the native spec equivalent to a legacy AI Platform job config."""
    from sweeps.aiplatform import load_config, to_spec
    from sweeps.spec import spec_from_dict

    try:
        raw, notes = to_spec(
            load_config(config),
            name=name or config.stem,
            package_path=str(package_path),
            module_name=module_name,
        )
        spec = spec_from_dict(raw)
    except SweepsError as e:
        _fail(e)
        return
    for n in notes:
        err.print(f"note: {n}", highlight=False)
    print(spec.to_yaml(), end="")


def _read_enqueue(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SpecError(f"--enqueue {path}: {' '.join(str(e).split())}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise SpecError(f"--enqueue {path}: expected a JSON object or a list of objects")
    return data


def _progress(spec: Any) -> Any:
    from sweeps.progress import RichProgress

    return RichProgress(spec, err)


def _print_summary(doc: dict[str, Any], outcome: Any) -> None:
    c = doc["counts"]
    out.print(
        f"[bold]{doc['name']}[/]: {outcome.state} ({outcome.reason}); "
        + ", ".join(f"{k.lower()} {v}" for k, v in sorted(c.items())),
        highlight=False,
    )
    if doc["best"]:
        b = doc["best"]
        out.print(
            f"best trial #{b['number']}: {doc['objective']} = {_fmt(b['value'])}  "
            f"params {json.dumps(b['params'])}",
            highlight=False,
        )
    out.print(
        f"MLflow: experiment {doc['mlflow_experiment_id']}, parent run {doc['parent_run_id']}"
        f"  (sweeps ui)",
        highlight=False,
    )


@app.command()
def validate(
    spec: Path = typer.Argument(...),
    set_: list[str] = typer.Option([], "--set", help="Override a field: key.path=value."),
) -> None:
    """Check a spec without running anything."""
    from sweeps import api

    try:
        s = api.validate(spec, set_)
    except SweepsError as e:
        _fail(e)
        return
    out.print(
        f"ok: {s.name} — {len(s.search_space)} parameters, {s.budget.trials} trials, "
        f"{s.budget.parallel} parallel, sampler {s.sampler.name}, pruner {s.pruner.name}",
        highlight=False,
    )


@app.command("ls")
def ls_(
    storage: str | None = typer.Option(None, help="Optuna storage URL (default: embedded)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List sweeps: state, trials by state, best value, cost and wall time."""
    from sweeps import api

    try:
        rows = api.ls(storage)
    except SweepsError as e:
        _fail(e)
        return
    if as_json:
        print(api.dumps(rows))
        return
    table = Table(
        "sweep", "state", "complete", "pruned", "failed", "running", "best", "cost $", "wall s"
    )
    for r in rows:
        t = r["trials"]
        table.add_row(
            r["name"],
            r["state"],
            *(str(t.get(k, 0)) for k in ("COMPLETE", "PRUNED", "FAIL", "RUNNING")),
            _fmt(r["best"]),
            _fmt(r["cost_usd"]),
            _fmt(r["wall_s"]),
        )
    out.print(table)


@app.command()
def show(
    name: str = typer.Argument(...),
    storage: str | None = typer.Option(None, help="Optuna storage URL (default: embedded)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One sweep: every trial with its state, value, params and MLflow run."""
    from sweeps import api

    try:
        doc = api.show(name, storage)
    except SweepsError as e:
        _fail(e)
        return
    if as_json:
        print(api.dumps(doc))
        return
    table = Table(
        "#",
        "state",
        doc["objective"] or "value",
        "params",
        "s",
        "mlflow run",
        title=f"{name} ({doc['state']})",
    )
    for t in doc["trials"]:
        table.add_row(
            str(t["number"]),
            t["state"],
            _fmt(t["value"]),
            json.dumps(t["params"])[:60],
            _fmt(t["duration_s"]),
            (t["mlflow_run_id"] or "-")[:12],
        )
    out.print(table)
    if doc["best"]:
        out.print(f"best: #{doc['best']['number']} = {_fmt(doc['best']['value'])}", highlight=False)


@app.command()
def stop(
    name: str = typer.Argument(...),
    storage: str | None = typer.Option(None, help="Optuna storage URL (default: embedded)."),
) -> None:
    """Ask a running sweep (from any terminal or machine) to stop launching trials."""
    from sweeps import api

    try:
        api.stop(name, storage)
    except SweepsError as e:
        _fail(e)
        return
    out.print(f"stop requested for {name}: running trials finish, no new ones start")


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
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Register the best model of a sweep; champion/challenger gate with --if-better."""
    from sweeps import api

    try:
        p = api.promote(
            name,
            model,
            alias=alias,
            if_better=if_better,
            metric=metric,
            trial=trial,
            select=select,
            storage_url=storage,
        )
    except SweepsError as e:
        _fail(e)
        return
    if as_json:
        print(api.dumps(p))
        return
    moved = (
        f"{alias} -> v{p['version']}" if p["moved"] else f"{alias} stays v{p['previous_version']}"
    )
    out.print(
        f"{model} v{p['version']} (trial {p['trial']} of {name}, {p['metric']} = "
        f"{p['value']:.6g}) is challenger; {moved}: {p['reason']}",
        highlight=False,
    )


@app.command()
def rollback(
    model: str = typer.Argument(...),
    alias: str = typer.Option("champion"),
) -> None:
    """Move an alias back to the version that held it before."""
    from sweeps import api

    try:
        old, new = api.rollback(model, alias=alias)
    except SweepsError as e:
        _fail(e)
        return
    out.print(f"{model}@{alias}: v{old} -> v{new}")


@app.command()
def models(model: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """List a registered model's versions: aliases, metric values, source sweeps."""
    from sweeps import api

    try:
        rows = api.models(model)
    except SweepsError as e:
        _fail(e)
        return
    if as_json:
        print(api.dumps(rows))
        return
    table = Table("version", "aliases", "metric", "value", "sweep", "trial", "decision")
    for r in rows:
        table.add_row(
            r["version"],
            ", ".join(r["aliases"]),
            _fmt(r["metric"]),
            _fmt(r["value"]),
            _fmt(r["sweep"]),
            _fmt(r["trial"]),
            _fmt(r["decision"]),
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
        _fail(SpecError(f"INPUT: file not found: {input_path}"))
    try:
        y = api.predict(ref, str(input_path), str(out_path) if out_path else None)
    except SweepsError as e:
        _fail(e)
        return
    classes = y.argmax(axis=1) if y.ndim == 2 else y
    out.print(
        f"{len(y)} predictions"
        + (f" -> {out_path}" if out_path else "")
        + f"; first classes: {list(map(int, classes[:10]))}",
        highlight=False,
    )


@app.command()
def doctor(
    spec: Path | None = typer.Argument(None, help="Check the stores this spec names."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Check each configured service: reachable, credentials, versions."""
    from sweeps import api, paths
    from sweeps.doctor import check
    from sweeps.spec import load_spec

    try:
        s = load_spec(spec) if spec else None
    except SweepsError as e:
        _fail(e)
        return
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
            table.add_row(
                r["service"],
                r["url"],
                "yes" if r["ok"] else "[red]NO[/]",
                r["detail"],
                f"{r['seconds']:.2f}",
            )
        out.print(table)
    if not all(r["ok"] for r in rows):
        raise typer.Exit(1)


def _quiet() -> None:
    """Library chatter (table creation, study created) is noise next to our own output."""
    import logging

    # MLflow configures its loggers on import from this variable (default INFO); we keep its
    # warnings but not its per-model pickle notice (we pickle on purpose: see mlflow_tracker).
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("OPTUNA_VERBOSITY", "WARNING")
    for name in ("mlflow", "optuna", "alembic", "ray"):
        logging.getLogger(name).setLevel(logging.WARNING)


@app.command()
def resume(
    name: str = typer.Argument(...),
    storage: str | None = typer.Option(None, help="Optuna storage URL (default: embedded)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Finish a sweep whose driver died: stale RUNNING trials are re-queued, budget completed."""
    from sweeps import api

    try:
        outcome = api.resume(name, storage)
    except SweepsError as e:
        _fail(e)
        return
    doc = api.show(outcome.name, outcome.storage_url)
    if as_json:
        print(api.dumps(doc | {"state": outcome.state, "stop_reason": outcome.reason}))
    else:
        _print_summary(doc, outcome)
    if outcome.state == "interrupted":
        raise typer.Exit(130)


@app.command()
def report(
    name: str = typer.Argument(...),
    out_dir: Path | None = typer.Option(
        None, "--out", help="Folder (default .sweeps/reports/NAME)."
    ),
    storage: str | None = typer.Option(None, help="Optuna storage URL."),
) -> None:
    """Write the learning log: Markdown + HTML with the plots embedded."""
    from sweeps import api

    try:
        files = api.report(name, str(out_dir) if out_dir else None, storage)
    except SweepsError as e:
        _fail(e)
        return
    out.print(f"report: {files['markdown']}\n        {files['html']}", highlight=False)


@app.command()
def note(
    name: str = typer.Argument(...),
    text: str = typer.Argument(..., help="What went wrong and how it was solved."),
    trial: int | None = typer.Option(None, help="Attach to this trial's run (default: the sweep)."),
    storage: str | None = typer.Option(None, help="Optuna storage URL."),
) -> None:
    """Record a problem/solution note (an MLflow run note; it appears in the report)."""
    from sweeps import api

    try:
        run_id = api.note(name, text, trial, storage)
    except SweepsError as e:
        _fail(e)
        return
    out.print(f"noted on run {run_id}")


@app.command()
def compare(
    a: str = typer.Argument(...),
    b: str = typer.Argument(...),
    storage: str | None = typer.Option(None, help="Optuna storage URL."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Two sweeps side by side: best value, params, cost, wall time, trials by state."""
    from sweeps import api

    try:
        doc = api.compare(a, b, storage)
    except SweepsError as e:
        _fail(e)
        return
    if as_json:
        print(api.dumps(doc))
        return
    table = Table("", a, b)
    da, db = doc[a], doc[b]
    table.add_row("objective", _fmt(da["objective"]), _fmt(db["objective"]))
    table.add_row("best", _fmt(da["best"]), _fmt(db["best"]))
    table.add_row("cost $", _fmt(da["cost_usd"]), _fmt(db["cost_usd"]))
    table.add_row("wall s", _fmt(da["wall_s"]), _fmt(db["wall_s"]))
    for state in sorted(set(da["trials"]) | set(db["trials"])):
        table.add_row(
            state.lower(), str(da["trials"].get(state, 0)), str(db["trials"].get(state, 0))
        )
    for k in sorted(set(da["best_params"]) | set(db["best_params"])):
        table.add_row(f"best {k}", _fmt(da["best_params"].get(k)), _fmt(db["best_params"].get(k)))
    out.print(table)


@app.command()
def logs(
    name: str = typer.Argument(...),
    trial: int | None = typer.Option(None, help="Trial number (default: the latest)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing while it runs."),
    storage: str | None = typer.Option(None, help="Optuna storage URL."),
) -> None:
    """Print a trial's worker output (stdout/stderr captured per trial)."""
    import time

    from sweeps import api

    try:
        number, text = api.logs(name, trial, storage)
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
                break
    except SweepsError as e:
        _fail(e)


@app.command()
def ui(
    port: int = typer.Option(5000, help="MLflow UI port."),
    dashboard_port: int = typer.Option(8080, help="optuna-dashboard port."),
    host: str = typer.Option("127.0.0.1", help="Bind address (loopback unless you say so)."),
    storage: str | None = typer.Option(None, help="Optuna storage URL."),
) -> None:
    """Start the MLflow UI and optuna-dashboard on the embedded stores; Ctrl-C stops both."""
    import subprocess

    from sweeps import paths

    uri = paths.tracking_uri()
    url = paths.storage_url(storage)
    bindir = Path(sys.executable).parent
    procs = []
    if uri.startswith(("sqlite", "postgresql", "file:", "/")):
        procs.append(
            subprocess.Popen(
                [
                    str(bindir / "mlflow"),
                    "ui",
                    "--backend-store-uri",
                    uri,
                    "--host",
                    host,
                    "--port",
                    str(port),
                ]
            )
        )
        out.print(f"MLflow UI:        http://{host}:{port}")
    else:
        out.print(f"MLflow UI:        {uri} (a tracking server)")
    procs.append(
        subprocess.Popen(
            [str(bindir / "optuna-dashboard"), url, "--host", host, "--port", str(dashboard_port)]
        )
    )
    out.print(f"optuna-dashboard: http://{host}:{dashboard_port}")
    try:
        for p in procs:
            p.wait()
    except KeyboardInterrupt:
        for p in procs:
            p.terminate()
        raise typer.Exit(130) from None


def main() -> None:
    _quiet()
    try:
        app()
    except SweepsError as e:  # pragma: no cover - commands catch their own
        err.print(f"error: {e}")
        sys.exit(e.exit_code)
    except Exception as e:
        # A bug of ours or a service failing in an unexpected way: one line, exit 1; the
        # traceback is there for whoever asks for it.
        if os.environ.get("SWEEPS_DEBUG"):
            raise
        msg = " ".join(str(e).split())[:500]
        err.print(
            f"error: {type(e).__name__}: {msg} (SWEEPS_DEBUG=1 shows the traceback)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
