"""Commands that run sweeps: run, resume, validate, import-aiplatform, import-wandb."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import typer

from sweeps.cli._app import (
    ALLOW_PARTIAL,
    IMAGE,
    app,
    cli_overrides,
    err,
    exit_after_sweep,
    fmt,
    load_noting,
    out,
)
from sweeps.cli.sources import (
    aiplatform_raw,
    aiplatform_spec,
    print_notes,
    read_enqueue,
    spec_or_wandb,
    wandb_raw,
)
from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.common.words import plural

if TYPE_CHECKING:
    from sweeps.spec import Spec

AIP = "Legacy AI Platform jobs (gcloud's flags)"
WB = "W&B sweep configs"
NOTED = "Accepted as gcloud's; noted, not used."
JOB_DIR = typer.Option(
    None,
    help="Overrides trainingInput.jobDir: passed to the module as --job-dir, as given "
    "(gs://...); what trials write under it is linked from their MLflow runs.",
    rich_help_panel=AIP,
)
CLUSTER_PYTHON = typer.Option(
    False,
    "--cluster-python",
    help="With --master-image-uri and --package-path: run the package on the cluster's own "
    "Python instead of in the image.",
    rich_help_panel=AIP,
)


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    ctx: typer.Context,
    spec: Path | None = typer.Argument(None, help="YAML spec (see conf/)."),
    name: str | None = typer.Option(None, help="Sweep name (default: the spec's)."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: key.path=value."),
    trials: int | None = typer.Option(None, help="budget.trials"),
    parallel: int | None = typer.Option(None, help="budget.parallel (lanes)"),
    image: str | None = IMAGE,
    enqueue: Path | None = typer.Option(
        None, help="JSON file: a list of param dicts to try first."
    ),
    join: bool = typer.Option(
        False, help="Join a running sweep of this name (same as re-running)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    aiplatform: str | None = typer.Option(
        None,
        "--aiplatform",
        help="Run a legacy AI Platform job unchanged: its config file, or with --config the "
        "JOB name of a gcloud command line.",
        rich_help_panel=AIP,
    ),
    package_path: Path | None = typer.Option(
        None, help="The package folder (trainer/) or its parent.", rich_help_panel=AIP
    ),
    module_name: str | None = typer.Option(
        None, help="The module to run (default trainer.task).", rich_help_panel=AIP
    ),
    config: Path | None = typer.Option(
        None, "--config", help="gcloud's job config (trainingInput).", rich_help_panel=AIP
    ),
    job_dir: str | None = JOB_DIR,
    cluster_python: bool = CLUSTER_PYTHON,
    scale_tier: str | None = typer.Option(None, help="Overrides scaleTier.", rich_help_panel=AIP),
    master_machine_type: str | None = typer.Option(
        None, help="Overrides masterType.", rich_help_panel=AIP
    ),
    master_image_uri: str | None = typer.Option(
        None, help="Overrides masterConfig.imageUri (a custom container).", rich_help_panel=AIP
    ),
    region: str | None = typer.Option(None, help=NOTED, rich_help_panel=AIP),
    runtime_version: str | None = typer.Option(None, help=NOTED, rich_help_panel=AIP),
    python_version: str | None = typer.Option(None, help=NOTED, rich_help_panel=AIP),
    wandb: Path | None = typer.Option(
        None, "--wandb", help="Run a W&B sweep config unchanged.", rich_help_panel=WB
    ),
    code_dir: Path | None = typer.Option(
        None, help="With --wandb: the program's folder (default: the config's).", rich_help_panel=WB
    ),
    profile: bool = typer.Option(False, "--profile", help="Print where the time went."),
    allow_partial: bool = ALLOW_PARTIAL,
) -> None:
    """Run a sweep (or continue / join the sweep of that name).

    With --aiplatform, a gcloud command line runs with its leading words changed:
    `gcloud ai-platform jobs submit training JOB ...` becomes `sweeps run --aiplatform JOB ...`.
    Arguments after `--` go to the user's module unchanged.
    """
    from sweeps import api

    overrides = cli_overrides(set_, trials, parallel, image)
    if aiplatform is not None:
        gcloud = {
            "scale_tier": scale_tier,
            "master_machine_type": master_machine_type,
            "master_image_uri": master_image_uri,
            "job_dir": job_dir,
        }
        noted = {"--region": region, "--runtime-version": runtime_version}
        noted["--python-version"] = python_version
        where = (package_path, module_name, name, cluster_python)
        s = aiplatform_spec(ctx, spec, aiplatform, config, where, gcloud, noted, overrides)
    else:
        s = spec_or_wandb(ctx.args, spec, wandb, code_dir, config, name, overrides)
    api.validate_spec(s)
    _run_spec(s, enqueue, as_json, profile, allow_partial)


def _run_spec(
    s: Spec, enqueue: Path | None, as_json: bool, profile: bool, allow_partial: bool = False
) -> None:
    """Run a validated spec, with live progress on stderr unless --json, then exit with its code."""
    from sweeps import api

    s, capped = api.admit(s, allow_partial)  # a quota it may not fit: exit 2 here
    if capped:
        err.print(capped, highlight=False, markup=False, soft_wrap=True)
    queued = read_enqueue(enqueue) if enqueue else None
    _check_name(s, queued, f"--enqueue {enqueue}")
    json_out = _json_stdout() if as_json else None
    progress = None if as_json else _progress(s)
    try:
        outcome = api.run(
            s,
            callbacks=[progress] if progress else None,
            enqueue=queued,
            from_process_start=True,
            allow_partial=allow_partial,
        )
    except BaseException:
        if progress:
            progress.close(discard=progress.counts == {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0})
        raise
    if progress:
        progress.close()
    _finish(outcome, json_out, profile=profile)


def _check_name(s: Spec, queued: list[dict[str, Any]] | None, where: str) -> None:
    """Before anything starts: the queued configurations lie in the space, and the sweep's
    name is new, or names the same sweep with trials left to run (said on stderr)."""
    from sweeps.common import paths
    from sweeps.search.reuse import check_reuse
    from sweeps.spec.params import check_enqueued

    check_enqueued(s.search_space, queued or [], where)
    note = check_reuse(s, paths.storage_url(s.storage), queued)
    if note:
        err.print(note, highlight=False, markup=False, soft_wrap=True)


_REAL_STDOUT: list[TextIO] = []


def _json_stdout() -> TextIO:
    """With --json, stdout carries the one JSON document and nothing else: from here to the
    process's exit, whatever our libraries print there (Ray's "(raylet) The node ... marked dead"
    comes from its own thread, even after the sweep) goes to stderr. Returns the real stdout."""
    real = sys.stdout
    _REAL_STDOUT.append(real)  # kept referenced: a text wrapper that is collected closes its file
    sys.stdout = sys.stderr
    return real


def _finish(
    outcome: Any, json_out: TextIO | None, whole: bool = False, profile: bool = False
) -> None:
    """Print the outcome of a run/resume and exit with its code."""
    from sweeps import api
    from sweeps.common import timeline

    doc = api.show(outcome.name, outcome.storage_url)
    for e in outcome.errors[:3]:
        err.print(f"[yellow]warning:[/] tracking write failed: {e}", highlight=False)
    if json_out:
        keys = doc if whole else ("name", "best", "trials", "mlflow_experiment_id", "parent_run_id")
        extra = {"state": outcome.state, "stop_reason": outcome.reason}
        print(api.dumps({k: doc[k] for k in keys} | extra), file=json_out, flush=True)
    else:
        print_summary(doc, outcome)
    if profile:
        timeline.mark("process.exit")
        _print_profile(timeline.current().to_json())
    exit_after_sweep({"interrupted": 130, "cancelled": 143, "failed": 1}.get(outcome.state, 0))


def _print_profile(events: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from sweeps.common.timeline import breakdown

    table = Table("phase", "from s", "took s", title="where the time went")
    for label, start, took in breakdown(events):
        table.add_row(label, f"{start:.2f}", "-" if took != took else f"{took:.2f}")
    err.print(table)


OUT = typer.Option(
    None,
    "--out",
    "-o",
    help="Write the spec to this file, its folders relative to the file's (default: print it, "
    "its folders relative to the current one).",
)


@app.command("import-aiplatform", context_settings={"allow_extra_args": True})
def import_aiplatform(
    ctx: typer.Context,
    aiplatform: str = typer.Argument(
        ...,
        metavar="CONFIG",
        help="AI Platform job config (trainingInput), or with --config gcloud's JOB name.",
    ),
    package_path: Path | None = typer.Option(
        None, help="The package folder (trainer/) or its parent (default: next to CONFIG)."
    ),
    module_name: str = typer.Option("trainer.task", help="The module to run."),
    config: Path | None = typer.Option(None, "--config", help="gcloud's job config."),
    name: str | None = typer.Option(None, help="Sweep name (default: the job's or project's)."),
    scale_tier: str | None = typer.Option(None, help="Overrides scaleTier."),
    master_machine_type: str | None = typer.Option(None, help="Overrides masterType."),
    job_dir: str | None = typer.Option(None, help="Overrides trainingInput.jobDir."),
    out_file: Path | None = OUT,
) -> None:
    """Print the native spec equivalent to a legacy AI Platform job, named as `run --aiplatform`
    names it: `sweeps import-aiplatform JOB --config FILE ... -- ARGS` is the spec of
    `sweeps run --aiplatform JOB --config FILE ... -- ARGS`."""
    from sweeps.cli.sources import emit_spec, job_and_config
    from sweeps.spec import spec_from_dict

    job, cfg = job_and_config(aiplatform, config)
    gcloud = {"scale_tier": scale_tier, "master_machine_type": master_machine_type}
    gcloud["job_dir"] = job_dir
    raw, notes = aiplatform_raw(cfg, job, package_path, module_name, name, ctx.args, gcloud)
    spec_from_dict(raw)  # what it prints validates
    print_notes(notes)
    # Only what the job says: the defaults (model, dataset, ...) are not the job's.
    emit_spec(raw, out_file)


@app.command("import-wandb")
def import_wandb(
    config: Path = typer.Argument(..., help="W&B sweep config (YAML)."),
    code_dir: Path | None = typer.Option(
        None, help="The program's folder (default: the config's)."
    ),
    name: str | None = typer.Option(None, help="Sweep name (default: the config's, or its file)."),
    out_file: Path | None = OUT,
) -> None:
    """Print the native spec equivalent to a W&B sweep config."""
    from sweeps.cli.sources import emit_spec
    from sweeps.spec import spec_from_dict

    raw, notes = wandb_raw(config, code_dir, name)
    spec_from_dict(raw)  # what it prints validates
    print_notes(notes)
    emit_spec(raw, out_file)


@app.command("import")
def import_config(
    kind: str = typer.Argument(..., help="The tool: " + ", ".join(names.IMPORTERS) + "."),
    config: Path = typer.Argument(..., help="Its config file."),
    name: str | None = typer.Option(None, help="Sweep name (default: the config's)."),
    out_file: Path | None = OUT,
) -> None:
    """Print the native spec equivalent to another tool's config."""
    from sweeps.cli.sources import emit_spec
    from sweeps.spec import spec_from_dict

    if kind not in names.IMPORTERS:
        raise SpecError(f"KIND: no importer {kind!r} (one of: {', '.join(names.IMPORTERS)})")
    if not config.is_file():
        raise SpecError(f"CONFIG: file not found: {config}")
    importer = importer_class(kind)()
    raw, notes = importer.to_spec(importer.read(config), source=config, name=name)
    spec_from_dict(raw)  # what it prints validates
    print_notes(notes)
    emit_spec(raw, out_file)


def importer_class(kind: str) -> Any:
    """The Importer subclass registered for `kind` (`sweeps.common.names.IMPORTERS`)."""
    return names.load(names.IMPORTERS[kind])


def _progress(spec: Any) -> Any:
    from sweeps.cli.progress import RichProgress

    return RichProgress(spec, err)


def print_summary(doc: dict[str, Any], outcome: Any) -> None:
    from sweeps.driver.summary import counts_text, ending_text

    counts = counts_text(doc["counts"])
    out.print(
        f"[bold]{doc['name']}[/]: {ending_text(outcome.state, outcome.reason)}; {counts}",
        highlight=False,
    )
    if doc["best"]:
        b = doc["best"]
        out.print(
            f"best trial #{b['number']}: {doc['objective']} = {fmt(b['value'])}  "
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
    as_json: bool = typer.Option(False, "--json", help="Print the spec's facts as JSON."),
) -> None:
    """Check a spec without running anything; say what a trial and the budget cost."""
    from sweeps import api
    from sweeps.search.constraints import sampler_note
    from tracking.costs import cost_line, spec_cost_facts

    s = load_noting(spec, list(set_), None)
    api.validate_spec(s)
    facts = spec_cost_facts(s)
    note = sampler_note(s)
    if as_json:
        doc = {
            "name": s.name,
            "parameters": len(s.search_space),
            "trials": s.budget.trials,
            "parallel": s.budget.parallel,
            "sampler": s.sampler.name,
            "pruner": s.pruner.name,
            "constraints": list(s.constraints),
            "constraints_note": note,
            **facts,
        }
        print(json.dumps(doc, indent=2))
        return
    out.print(
        f"ok: {s.name} — {plural(len(s.search_space), 'parameter')}, "
        f"{plural(s.budget.trials, 'trial')}, "
        f"{s.budget.parallel} parallel, sampler {s.sampler.name}, pruner {s.pruner.name}",
        highlight=False,
    )
    out.print(cost_line(facts), highlight=False, soft_wrap=True)
    if note:
        out.print(note, highlight=False, soft_wrap=True)


@app.command()
def resume(
    name: str = typer.Argument(...),
    storage: str | None = typer.Option(None, help="Optuna storage URL (default: embedded)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Finish a paused, cancelled or interrupted sweep, or one whose driver died: parked,
    cancelled and stale RUNNING trials continue from their checkpoints, then the budget."""
    from sweeps import api

    json_out = _json_stdout() if as_json else None
    outcome = api.resume(name, storage)
    _finish(outcome, json_out, whole=True)
