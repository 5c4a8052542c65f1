"""The Python API: everything the CLI does, as functions returning plain data.

Heavy libraries (torch, ray, mlflow) are imported inside the functions that need them, so that
importing this module (and so `sweeps --help`, `ls`, `validate`) stays fast.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sweeps import paths
from sweeps.callbacks import DriverCallback
from sweeps.errors import SpecError
from sweeps.spec import Spec, load_spec


def validate(spec_path: str | Path, overrides: list[str] | None = None) -> Spec:
    """Load and validate a spec, including sampler/pruner options and the search space."""
    spec = load_spec(spec_path, overrides)
    validate_spec(spec)
    return spec


def validate_spec(spec: Spec) -> None:
    """Checks that need more than the schema: condition cycles, optimizer options, price table."""
    from sweeps import space
    from sweeps.samplers import make_pruner, make_sampler

    space.order(spec.search_space)
    _check_entrypoint(spec)
    make_sampler(spec)
    make_pruner(spec.pruner)
    from tracking.costs import machine

    searched = spec.search_space.get("resources.machine_type")
    names = list(getattr(searched, "choices", [])) or [spec.resources.machine_type]
    for name in names:
        try:
            machine(str(name))
        except KeyError as e:
            raise SpecError(str(e).strip("'\"")) from None


def _check_entrypoint(spec: Spec) -> None:
    """The entrypoint's module must be findable (without running it) before any store is touched."""
    import importlib.machinery
    import importlib.util
    import os

    ep, code_dir = spec.trainer.entrypoint, spec.trainer.code_dir
    if not ep:
        return
    if code_dir and not os.path.isdir(code_dir):
        raise SpecError(f"trainer.code_dir: folder not found: {code_dir}")
    parts = ep.partition(":")[0].split(".")
    search = [code_dir] if code_dir else None
    found = importlib.machinery.PathFinder.find_spec(parts[0], search) if search else None
    if found is None:
        found = importlib.util.find_spec(parts[0])
    if found is None:
        where = f" in {code_dir}" if code_dir else " (set trainer.code_dir)"
        raise SpecError(f"trainer.entrypoint: module '{parts[0]}' not found{where}")
    if len(parts) > 1 and found.submodule_search_locations:
        rel = os.path.join(*parts[1:])
        if not any(
            os.path.exists(os.path.join(loc, rel + ".py")) or os.path.isdir(os.path.join(loc, rel))
            for loc in found.submodule_search_locations
        ):
            raise SpecError(f"trainer.entrypoint: module '{ep.partition(':')[0]}' not found")


def run(
    spec: Spec,
    *,
    callbacks: list[DriverCallback] | None = None,
    local_mode: bool = False,
    enqueue: list[dict[str, Any]] | None = None,
    install_signals: bool = True,
) -> Any:
    """Run (or continue, or join) the sweep; returns a :class:`sweeps.driver.SweepOutcome`."""
    from sweeps.driver import Driver
    from tracking.mlflow_tracker import MLflowTracker, check_reachable

    uri = paths.tracking_uri(spec.tracking.uri)
    paths.ensure_local_dirs(uri)
    check_reachable(uri)  # before any trial starts: a dead server is a clear error, not lost work
    if uri.startswith("sqlite:///"):
        _wal(uri.removeprefix("sqlite:///"))
    artifact_root = paths.artifact_root() if uri.startswith(("sqlite", "postgresql")) else None
    tracker = MLflowTracker(uri, artifact_root)
    try:
        driver = Driver(
            spec,
            callbacks=callbacks,
            tracker=tracker,
            local_mode=local_mode,
            enqueue=enqueue,
            install_signals=install_signals,
        )
        outcome = driver.run()
        if outcome.parent_run_id:
            _log_plots(tracker, outcome)
        return outcome
    finally:
        tracker.close()


def _wal(path: str) -> None:
    """MLflow's SQLite store in WAL mode (persistent on the file): readers such as the MLflow UI
    no longer block the driver's writer thread, and commits stop waiting on the journal."""
    import sqlite3

    try:
        with sqlite3.connect(path, timeout=30) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error:
        pass  # an optimization only


def _log_plots(tracker: Any, outcome: Any) -> None:
    """Optimization history, importances, parallel coordinates, intermediate values (or the
    Pareto front) as HTML + PNG on the parent run. A plotting problem never fails the sweep."""
    import tempfile

    from sweeps.study import load_study
    from tracking.plots import make_plots

    try:
        study = load_study(outcome.name, outcome.storage_url)
        with tempfile.TemporaryDirectory(prefix="sweeps-plots-") as d:
            files, notes = make_plots(study, d)
            for kinds in files.values():
                for path in kinds.values():
                    tracker.client.log_artifact(outcome.parent_run_id, path, "plots")
            if notes:
                tracker.client.set_tag(outcome.parent_run_id, "sweeps.plot_notes", "; ".join(notes))
    except Exception as e:
        outcome.errors.append(f"plots: {' '.join(str(e).split())[:200]}")


def _trial_dict(t: Any) -> dict[str, Any]:
    dur = None
    if t.datetime_start and t.datetime_complete:
        dur = (t.datetime_complete - t.datetime_start).total_seconds()
    return {
        "number": t.number,
        "state": t.state.name,
        "value": t.value if t.values and len(t.values) == 1 else None,
        "values": t.values,
        "params": t.params,
        "mlflow_run_id": t.user_attrs.get("mlflow_run_id"),
        "duration_s": t.user_attrs.get("duration_s", dur),
        "cost_usd": t.user_attrs.get("cost_usd"),
        "error": t.user_attrs.get("sweeps.error"),
        "restarts": t.user_attrs.get("sweeps.restarts", 0),
    }


def show(name: str, storage_url: str | None = None) -> dict[str, Any]:
    """One sweep as a JSON-ready document (the `sweeps show --json` schema)."""
    from sweeps.study import live_drivers, load_study

    study = load_study(name, paths.storage_url(storage_url))
    trials = study.get_trials(deepcopy=False)
    best = None
    if len(study.directions) == 1:
        try:
            b = study.best_trial
            best = {
                "number": b.number,
                "value": b.value,
                "params": b.params,
                "mlflow_run_id": b.user_attrs.get("mlflow_run_id"),
            }
        except ValueError:
            pass
    attrs = study.user_attrs
    running = any(t.state.name == "RUNNING" for t in trials)
    state = "running" if running and live_drivers(study) else "finished"
    if running and not live_drivers(study):
        state = "interrupted"
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return {
        "name": name,
        "state": state,
        "objective": attrs.get("sweeps.objective"),
        "direction": study.directions[0].name.lower(),
        "best": best,
        "counts": counts,
        "cost_usd": round(sum(t.user_attrs.get("cost_usd", 0.0) for t in trials), 6),
        "trials": [_trial_dict(t) for t in trials],
        "mlflow_experiment_id": attrs.get("sweeps.mlflow_experiment_id"),
        "parent_run_id": attrs.get("sweeps.mlflow_parent_run_id"),
    }


def ls(storage_url: str | None = None) -> list[dict[str, Any]]:
    """Every sweep in the storage with state, trials by state, best value, cost and wall time."""
    import optuna

    from sweeps.study import _storage

    storage = _storage(paths.storage_url(storage_url))
    out = []
    for s in storage.get_all_studies():
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.state.name] = counts.get(t.state.name, 0) + 1
        best = None
        if len(s.directions) == 1:
            done = [t.value for t in trials if t.state.name == "COMPLETE" and t.value is not None]
            if done:
                best = max(done) if s.directions[0].name == "MAXIMIZE" else min(done)
        starts = [t.datetime_start for t in trials if t.datetime_start]
        ends = [t.datetime_complete for t in trials if t.datetime_complete]
        wall = (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0
        out.append(
            {
                "name": s.study_name,
                "state": "running" if counts.get("RUNNING") else "finished",
                "trials": counts,
                "best": best,
                "cost_usd": round(sum(t.user_attrs.get("cost_usd", 0.0) for t in trials), 6),
                "wall_s": round(wall, 1),
            }
        )
    return out


def stop(name: str, storage_url: str | None = None) -> None:
    """Ask a running driver (any machine sharing the storage) to stop launching trials."""
    from sweeps.study import load_study

    study = load_study(name, paths.storage_url(storage_url))
    study.set_user_attr("sweeps.stop_requested", time.time())


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, default=str)


def resume(name: str, storage_url: str | None = None, **kw: Any) -> Any:
    """Finish the remaining budget of a sweep whose driver died, with the spec it was run with.

    Trials the dead driver left RUNNING are failed, re-queued with the same params and their
    MLflow runs closed as KILLED (the driver does that on start for any stale trial).
    """
    from sweeps.spec import spec_from_dict
    from sweeps.study import load_study

    url = paths.storage_url(storage_url)
    study = load_study(name, url)
    text = study.user_attrs.get("sweeps.spec")
    if not text:
        raise SpecError(f"sweep '{name}' has no stored spec; run it again with `sweeps run SPEC`")
    import yaml

    raw = yaml.safe_load(text)
    if "***" in text:
        raise SpecError(
            f"sweep '{name}' had secret fields; resume with `sweeps run SPEC --name "
            f"{name}` so they can be supplied again"
        )
    if storage_url:
        raw["storage"] = storage_url
    return run(spec_from_dict(raw), **kw)


def _uris(name: str, storage_url: str | None, tracking_uri: str | None) -> tuple[str, str]:
    return paths.storage_url(storage_url), paths.tracking_uri(tracking_uri)


def report(
    name: str,
    out_dir: str | None = None,
    storage_url: str | None = None,
    tracking_uri: str | None = None,
) -> dict[str, str]:
    """Write the learning log (Markdown + HTML with plots) and return the paths."""
    from tracking.report import write_report

    s, t = _uris(name, storage_url, tracking_uri)
    return write_report(name, s, t, out_dir or str(paths.home() / "reports" / name))


def note(
    name: str,
    text: str,
    trial: int | None = None,
    storage_url: str | None = None,
    tracking_uri: str | None = None,
) -> str:
    """Append a problem/solution note to the sweep's (or a trial's) MLflow run; returns run id."""
    from mlflow.tracking import MlflowClient

    from sweeps.errors import NotFoundError
    from sweeps.study import load_study
    from tracking.mlflow_tracker import check_reachable
    from tracking.report import NOTE_TAG

    s, t = _uris(name, storage_url, tracking_uri)
    study = load_study(name, s)
    if trial is None:
        run_id = study.user_attrs.get("sweeps.mlflow_parent_run_id")
    else:
        match = [tr for tr in study.get_trials(deepcopy=False) if tr.number == trial]
        if not match:
            raise NotFoundError(f"sweep '{name}' has no trial {trial}")
        run_id = match[0].user_attrs.get("mlflow_run_id")
    if not run_id:
        raise NotFoundError(
            f"sweep '{name}' has no MLflow run for that {'trial' if trial is not None else 'sweep'}"
        )
    check_reachable(t)
    client = MlflowClient(t)
    old = client.get_run(run_id).data.tags.get(NOTE_TAG, "")
    stamp = time.strftime("%Y-%m-%d %H:%M")
    client.set_tag(run_id, NOTE_TAG, (old + "\n\n" if old else "") + f"[{stamp}] {text}")
    return run_id


def compare(a: str, b: str, storage_url: str | None = None) -> dict[str, Any]:
    """Two sweeps side by side: best value and params, cost, wall time, trials by state."""
    out = {}
    for name in (a, b):
        row = next((r for r in ls(storage_url) if r["name"] == name), None)
        if row is None:
            show(name, storage_url)  # raises NotFoundError with the known names
        doc = show(name, storage_url)
        out[name] = {
            "best": doc["best"]["value"] if doc["best"] else None,
            "best_params": doc["best"]["params"] if doc["best"] else {},
            "cost_usd": doc["cost_usd"],
            "wall_s": row["wall_s"] if row else None,
            "trials": doc["counts"],
            "objective": doc["objective"],
        }
    return out


def logs(
    name: str,
    trial: int | None = None,
    storage_url: str | None = None,
    tracking_uri: str | None = None,
) -> tuple[int, str]:
    """A trial's captured worker output (the last trial if none is named)."""
    from mlflow.tracking import MlflowClient

    from sweeps.errors import NotFoundError
    from sweeps.study import load_study

    s, t = _uris(name, storage_url, tracking_uri)
    study = load_study(name, s)
    trials = study.get_trials(deepcopy=False)
    if not trials:
        raise NotFoundError(f"sweep '{name}' has no trials yet")
    tr = trials[-1] if trial is None else next((x for x in trials if x.number == trial), None)
    if tr is None:
        raise NotFoundError(f"sweep '{name}' has no trial {trial}")
    live = live_log_path(name, tr.number)
    if live.exists():
        return tr.number, live.read_text()
    run_id = tr.user_attrs.get("mlflow_run_id")
    if not run_id:
        return tr.number, ""
    try:
        path = MlflowClient(t).download_artifacts(run_id, "logs/worker.log")
    except Exception:
        return tr.number, ""
    return tr.number, Path(path).read_text()


def live_log_path(name: str, number: int) -> Path:
    """Where the driver appends a trial's worker output while it runs."""
    return paths.home() / "logs" / name / f"trial-{number:05d}.log"


def promote(
    sweep: str,
    model: str,
    *,
    alias: str = "champion",
    if_better: bool = False,
    metric: str | None = None,
    trial: int | None = None,
    select: str | None = None,
    storage_url: str | None = None,
    tracking_uri: str | None = None,
) -> dict[str, Any]:
    """Register the sweep's best (or chosen) trial's model; move `alias` per the gate."""
    from tracking.registry import promote as _promote

    s, t = _uris(sweep, storage_url, tracking_uri)
    return _promote(
        sweep,
        model,
        storage_url=s,
        tracking_uri=t,
        alias=alias,
        if_better=if_better,
        metric=metric,
        trial=trial,
        select=select,
    ).to_dict()


def rollback(
    model: str, *, alias: str = "champion", tracking_uri: str | None = None
) -> tuple[str, str]:
    from tracking.registry import rollback as _rollback

    return _rollback(model, tracking_uri=paths.tracking_uri(tracking_uri), alias=alias)


def models(model: str, *, tracking_uri: str | None = None) -> list[dict[str, Any]]:
    from tracking.registry import versions

    return versions(model, tracking_uri=paths.tracking_uri(tracking_uri))


def predict(
    ref: str, input_path: str, out_path: str | None = None, *, tracking_uri: str | None = None
) -> Any:
    from tracking.registry import predict as _predict

    return _predict(ref, input_path, out_path, tracking_uri=paths.tracking_uri(tracking_uri))
