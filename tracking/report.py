"""The learning log as a document: what was trained on which data, resources and cost,
durations, the top trials, the best params, and the notes on problems met and how they were
solved. `collect` reads the stores; `render_markdown` / `render_html` are pure functions."""

from __future__ import annotations

import base64
import html
import json
import os
import statistics
import time
from typing import Any

from sweeps.common import names
from sweeps.common.words import plural
from tracking import replicates

NOTE_TAG = "mlflow.note.content"


def collect(study: Any, tracking_uri: str) -> dict[str, Any]:
    """Everything the report shows about an Optuna study and its MLflow runs, as plain data."""
    from mlflow.tracking import MlflowClient

    name = study.study_name
    attrs = study.user_attrs
    client = MlflowClient(tracking_uri)
    parent_id = attrs.get(names.MLFLOW_PARENT_RUN_ID)
    parent = client.get_run(parent_id) if parent_id else None
    trials = study.get_trials(deepcopy=False)
    maximize = study.directions[0].name == "MAXIMIZE"
    rows, dataset, notes, resources = _gather_trials(client, trials, attrs)
    if parent is not None and parent.data.tags.get(NOTE_TAG):
        notes.insert(0, {"trial": None, "text": parent.data.tags[NOTE_TAG]})
    done = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None]
    done.sort(key=lambda r: r["value"], reverse=maximize)
    best = next((r for r in done if not r["infeasible"]), None)  # best feasible
    reps = replicates.collect(attrs, maximize)
    by_mean = [r for r in done if reps and r["number"] == reps[0]["number"]]
    if by_mean and reps[0].get("mean") is not None:  # replicated: the best mean wins
        best = {**by_mean[0], "replicates": reps[0]}
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    durations = [r["duration_s"] for r in rows if r["duration_s"]]
    return {
        "name": name,
        "objective": attrs.get(names.OBJECTIVE),
        "direction": "maximize" if maximize else "minimize",
        "spec": attrs.get(names.SPEC, ""),
        "parent_params": dict(parent.data.params) if parent else {},
        "parent_run_id": parent_id,
        "experiment_id": attrs.get(names.MLFLOW_EXPERIMENT_ID),
        "stop_reason": parent.data.tags.get(names.STOP_REASON) if parent else None,
        "converged": parent.data.tags.get(names.CONVERGED) if parent else None,
        "counts": counts,
        "top": done[:10],
        "best": best,
        "replicates": reps,
        "dataset": dataset,
        "resources": resources,
        "cost_usd": sum(r["cost_usd"] or 0 for r in rows),
        "gpu_hours": sum(r["gpu_hours"] or 0 for r in rows),
        "wall_s": _wall_s(attrs, starts, ends),
        "mean_trial_s": statistics.fmean(durations) if durations else 0.0,
        "trial_seconds": sum(durations),
        "notes": notes,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _gather_trials(
    client: Any, trials: list[Any], attrs: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """One row per trial, plus what their MLflow runs recorded: (rows, dataset, notes,
    resources). A run that cannot be read adds nothing, not even its trial's failure note."""
    rows = []
    dataset: dict[str, Any] = {}
    notes: list[dict[str, Any]] = []
    resources: dict[str, Any] = {}
    for t in trials:
        row = _trial_row(t, attrs)
        rows.append(row)
        if row["run_id"]:
            try:
                run = client.get_run(row["run_id"])
            except Exception:
                continue
            _add_run(run, t.number, dataset, notes, resources)
        if row["error"]:
            notes.append({"trial": t.number, "text": f"failed: {row['error']}", "auto": True})
    return rows, dataset, notes, resources


def _trial_row(t: Any, attrs: dict[str, Any]) -> dict[str, Any]:
    return {
        "number": t.number,
        "state": t.state.name,
        "value": t.value if t.values else None,
        "params": t.params,
        "duration_s": t.user_attrs.get("duration_s"),
        "cost_usd": t.user_attrs.get("cost_usd", 0.0),
        "gpu_hours": t.user_attrs.get("gpu_hours", 0.0),
        "error": t.user_attrs.get(names.ERROR),
        "restarts": t.user_attrs.get(names.RESTARTS, 0),
        "run_id": t.user_attrs.get("mlflow_run_id") or attrs.get(names.run_of_trial(t.number)),
        # The outcome constraints it broke (Optuna's `FrozenTrial.constraints`, > 0 = broken).
        "infeasible": [k for k, v in t.constraints.items() if v > 0],
    }


def _add_run(
    run: Any,
    number: int,
    dataset: dict[str, Any],
    notes: list[dict[str, Any]],
    resources: dict[str, Any],
) -> None:
    """Adds one trial's run to the report: its datasets, the first resources seen, its notes."""
    for inp in run.inputs.dataset_inputs if run.inputs else []:
        ctx = next((tg.value for tg in inp.tags if tg.key == "mlflow.data.context"), "?")
        src = json.loads(inp.dataset.source or "{}")
        prof = json.loads(inp.dataset.profile or "{}")
        dataset[ctx] = {
            "name": inp.dataset.name,
            "digest": inp.dataset.digest,
            "source": src.get("uri"),
            "rows": prof.get("num_rows"),
            "split_seed": src.get("split_seed"),
        }
    if not resources:
        resources.update(
            {
                k.removeprefix("resources."): v
                for k, v in run.data.params.items()
                if k.startswith("resources.")
            }
        )
    if run.data.tags.get(NOTE_TAG):
        notes.append({"trial": number, "text": run.data.tags[NOTE_TAG]})
    if run.data.tags.get(names.PROBLEMS):
        notes.append({"trial": number, "text": run.data.tags[names.PROBLEMS], "auto": True})


def _wall_s(attrs: dict[str, Any], starts: list[Any], ends: list[Any]) -> float:
    """The drivers' own wall time (set-up included) when they recorded it; else first trial
    start to last trial end."""
    from sweeps.common import figures

    if isinstance(attrs.get(names.WALL_S), int | float) or figures.sessions(attrs):
        return figures.wall_s(attrs, set(), time.time())  # every driver's, up to its last beat
    if starts and ends:
        return (max(ends) - min(starts)).total_seconds()
    return 0.0


def per_trial(r: dict[str, Any]) -> str:
    """A trial's resources in words: "1 worker × 1 CPU, 0 GPUs each, machine type local"."""

    def count(key: str, word: str) -> str:
        v = r.get(key)
        return plural(v, word) if isinstance(v, int | float) else f"- {word}s"

    return (
        f"{count('workers', 'worker')} × {count('cpus_per_worker', 'CPU')}, "
        f"{count('gpus_per_worker', 'GPU')} each, machine type {r.get('machine_type', '-')}"
    )


def price_basis(spec_yaml: str) -> str:
    """Pure: which prices the sweep's costs use, from the spec it ran with."""
    import yaml

    try:
        resources = (yaml.safe_load(spec_yaml or "") or {}).get("resources") or {}
    except (yaml.YAMLError, AttributeError):
        resources = {}
    if resources.get("preemptible"):
        return "spot list prices (resources.preemptible: true), from the machine price table"
    return "on-demand list prices, from the machine price table"


def _f(v: Any, nd: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)


def render_markdown(d: dict[str, Any], plots: dict[str, dict[str, str]] | None = None) -> str:
    """Pure: the report as Markdown; `plots` maps plot name to {"png": relative path}."""
    p = d["parent_params"]
    out = [
        f"# Learning log: {d['name']}",
        "",
        f"Generated {d['generated']}. "
        f"MLflow experiment {d['experiment_id']}, parent run `{d['parent_run_id']}`.",
        "",
    ]
    out += ["## What was trained", ""]
    out.append(f"- Model: {p.get('trainer.model', '-')} ({p.get('trainer.entrypoint', 'builtin')})")
    out.append(
        f"- Objective: {d['objective']} ({d['direction']}); sampler {p.get('sampler', '-')}"
        f", pruner {p.get('pruner', '-')}"
    )
    if d["dataset"]:
        for ctx, ds in sorted(d["dataset"].items()):
            out.append(
                f"- Data ({ctx}): {ds['name']} from `{ds['source']}`, {ds['rows']} rows, "
                f"digest `{ds['digest']}`, split seed {ds['split_seed']}"
            )
    else:
        out.append("- Data: not recorded (no completed trial logged a dataset)")
    out += ["", "## Resources and cost", ""]
    r = d["resources"]
    out.append(f"- Per trial: {per_trial(r)}")
    out.append(f"- Prices: {price_basis(d['spec'])}")
    out.append(f"- Total cost: ${d['cost_usd']:.4f}; GPU-hours: {d['gpu_hours']:.4f}")
    out += ["", "## Durations", ""]
    out.append(
        f"- Sweep wall time (command start to end): {d['wall_s']:.1f} s; trial time summed: "
        f"{d['trial_seconds']:.1f} s; mean trial: {d['mean_trial_s']:.2f} s"
    )
    out.append("- Trials: " + ", ".join(f"{k.lower()} {v}" for k, v in sorted(d["counts"].items())))
    if d["stop_reason"]:
        out.append(f"- Stopped because: {d['stop_reason']}")
    if d.get("converged"):  # budget.stop_when's evidence, as JSON
        out.append(f"- Convergence evidence: `{d['converged']}`")
    out += [
        "",
        "## Top trials",
        "",
        f"| # | {d['objective']} | duration s | cost $ | params |",
        "|---|---|---|---|---|",
    ]
    for t in d["top"]:
        params = ", ".join(f"{k}={_f(v)}" for k, v in t["params"].items())
        mark = f" (infeasible: {'; '.join(t['infeasible'])})" if t.get("infeasible") else ""
        out.append(
            f"| {t['number']}{mark} | {_f(t['value'])} | {_f(t['duration_s'], 3)} | "
            f"{_f(t['cost_usd'], 3)} | {params} |"
        )
    out += replicates.render(d.get("replicates") or [], d["objective"])
    out += ["", "## Best params", ""]
    if d["best"] and d["best"].get("replicates"):
        mean = replicates.interval_text(d["best"]["replicates"])
        out.append(f"Trial {d['best']['number']}, {d['objective']} mean of replicates = {mean}:")
    elif d["best"]:
        out.append(f"Trial {d['best']['number']}, {d['objective']} = {_f(d['best']['value'])}:")
        out += ["", "```json", json.dumps(d["best"]["params"], indent=2), "```"]
    elif d["top"]:
        out.append("No feasible trial: every completed trial broke a constraint.")
    else:
        out.append("No completed trial.")
    out += ["", "## Notes: problems and solutions", ""]
    if d["notes"]:
        for n in d["notes"]:
            who = f"trial {n['trial']}" if n["trial"] is not None else "sweep"
            tag = " (recorded automatically)" if n.get("auto") else ""
            out.append(f"- **{who}**{tag}: {n['text']}")
    else:
        out.append('No notes. Add one with `sweeps note NAME "what happened and the fix"`.')
    out += ["", "## Plots", ""]
    for name, files in (plots or {}).items():
        live = f" ([interactive]({files['html']}))" if files.get("html") else ""
        out += [f"![{name}]({files['png']}){live}", ""]
    if not plots:
        out.append("No plots (too few finished trials).")
    return "\n".join(out) + "\n"


def render_html(markdown_text: str, base_dir: str | None = None) -> str:
    """Pure but for reading images: the Markdown as HTML (CommonMark with tables, by
    markdown-it-py, which rich already brings), each image under `base_dir` inlined so that
    the page stands alone."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(markdown_text)
    for token in tokens:
        for child in token.children or []:
            src = str(child.attrGet("src") or "") if child.type == "image" else ""
            path = os.path.join(base_dir, src) if base_dir and src else ""
            if path.endswith(".png") and os.path.isfile(path):
                with open(path, "rb") as f:
                    child.attrSet(
                        "src", "data:image/png;base64," + base64.b64encode(f.read()).decode()
                    )
    body = md.renderer.render(tokens, md.options, {})
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:auto;padding:0 1em}"
        "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.2em .5em}"
        "img{max-width:100%}pre{background:#f6f8fa;padding:.5em}"
    )
    title = html.escape(markdown_text.partition("\n")[0].lstrip("# "))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{style}</style></head><body>\n{body}</body></html>\n"
    )


def write_report(study: Any, tracking_uri: str, out_dir: str) -> dict[str, str]:
    from sweeps.common import paths
    from sweeps.common.quietlogs import quiet_optuna
    from tracking.plots import make_plots, shared_plotly_js

    quiet_optuna()  # a sweep with no complete trial: no "[W ...]" line per plot (unless -v)

    d = collect(study, tracking_uri)
    name = d["name"]
    os.makedirs(out_dir, exist_ok=True)
    plotly_js = shared_plotly_js(str(paths.home() / "assets"))  # one copy per sweeps home
    files, plot_notes = make_plots(study, os.path.join(out_dir, "plots"), plotly_js)
    rel = {k: {f: os.path.relpath(p, out_dir) for f, p in v.items()} for k, v in files.items()}
    md = render_markdown(d, rel)
    if plot_notes:
        md += "\n" + "\n".join(f"- {n}" for n in plot_notes) + "\n"
    md_path = os.path.join(out_dir, f"{name}.md")
    html_path = os.path.join(out_dir, f"{name}.html")
    with open(md_path, "w") as f:
        f.write(md)
    with open(html_path, "w") as f:
        f.write(render_html(md, out_dir))
    return {"markdown": md_path, "html": html_path}
