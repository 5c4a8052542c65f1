"""The Python API: everything the CLI does, as functions returning plain data.

Heavy libraries (torch, ray, mlflow) are imported inside the functions that need them, so that
importing this module (and so `sweeps --help`, `ls`, `validate`) stays fast.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sweeps.common import names, paths
from sweeps.common.errors import SpecError
from sweeps.contracts.observers import SweepObserver
from sweeps.contracts.records import SweepOutcome
from sweeps.queries import compare, describe, logs, ls, show
from sweeps.spec import Spec, check_reported, load_spec
from sweeps.spec.model_pick import check_model_pick

__all__ = ["compare", "logs", "ls", "show"]  # re-exported: the API reads sweeps back too


def validate(spec_path: str | Path, overrides: list[str] | None = None) -> Spec:
    """Load and validate a spec, including sampler/pruner options and the search space."""
    spec = load_spec(spec_path, overrides)
    validate_spec(spec)
    return spec


def validate_spec(spec: Spec) -> None:
    """Checks that need more than the schema: condition cycles, optimizer options, price table
    (including a spot price for `resources.preemptible`)."""
    from sweeps.search import constraints, space
    from sweeps.search.samplers import make_pruner, make_sampler

    space.order(spec.search_space)
    check_reported(spec)
    check_model_pick(spec)
    constraints.check(spec)
    _check_entrypoint(spec)
    make_sampler(spec)
    make_pruner(spec.pruner)
    from sweeps.driver import convergence

    convergence.check(spec)  # budget.stop_when: single objective; Optuna's terminator present
    from tracking.costs import check_spec_prices

    check_spec_prices(spec)  # every machine type priced; a spot price when preemptible


def _check_entrypoint(spec: Spec) -> None:
    """The entrypoint's module must be findable (without running it) before any store is touched."""
    import importlib.machinery
    import importlib.util
    import os

    ep, code_dir = spec.trainer.entrypoint, spec.trainer.code_dir
    command = spec.trainer.command_line
    if not ep and command is None:
        return
    if code_dir and not os.path.isdir(code_dir):
        raise SpecError(f"trainer.code_dir: folder not found: {code_dir}")
    if command is not None:  # program mode: the script (or module, or tool) must be there
        from sweeps.spec.command import missing_files

        problems = missing_files(command, spec.trainer.program, code_dir or os.getcwd())
        if problems:
            raise SpecError(f"trainer.command: {'; '.join(problems)}")
        return
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
    callbacks: list[SweepObserver] | None = None,
    local_mode: bool = False,
    enqueue: list[dict[str, Any]] | None = None,
    install_signals: bool = True,
    from_process_start: bool = False,
    allow_partial: bool = False,
) -> SweepOutcome:
    """Run (or continue, or join) the sweep; returns its :class:`SweepOutcome`.
    `from_process_start`: the sweep's timeline counts from this process's start (the CLI).
    Under a quota (conf/teams.yaml) a sweep whose worst case may not fit is refused, unless
    `allow_partial` (`admit`)."""
    from sweeps.driver.assemble import run_sweep

    spec, _ = admit(spec, allow_partial)
    return run_sweep(
        spec,
        callbacks=callbacks,
        local_mode=local_mode,
        enqueue=enqueue,
        install_signals=install_signals,
        from_process_start=from_process_start,
    )


def stop(name: str, storage_url: str | None = None) -> str:
    """Ask a running driver (any machine sharing the storage) to stop launching trials.
    Returns the sweep's state: a sweep that is not running is left alone."""
    from sweeps.search import owners
    from sweeps.search.study import load_study

    study = load_study(name, paths.storage_url(storage_url))
    owners.check_control(study, "stop")
    state = describe(study)["state"]
    if state in ("running", "queued"):
        study.set_user_attr(names.STOP_REQUESTED, time.time())
    return state


def pause(name: str, storage_url: str | None = None) -> str:
    """Ask a running sweep's drivers to park its running trials at their next checkpoint and
    end `paused`; `resume` continues them. Returns the sweep's state (only `running` is asked)."""
    from sweeps.search import owners
    from sweeps.search.study import load_study

    study = load_study(name, paths.storage_url(storage_url))
    owners.check_control(study, "pause")
    state = describe(study)["state"]
    if state == "running":
        study.set_user_attr(names.PAUSE_REQUESTED, time.time())
    return state


def up(**kw: Any) -> dict[str, Any]:
    """Start the local sweep service (`sweeps.service.local.up`); returns its URLs."""
    from sweeps.service import local as service

    info, already = service.up(**kw)
    return service.urls(info) | {"already": already}


def down(say: Any = None) -> list[str]:
    """Stop the local service; sweeps still running are interrupted first (`say` warns)."""
    from sweeps.service import local as service

    return service.down(say=say)


def submit(spec: Spec, address: str | None = None, allow_partial: bool = False) -> dict[str, Any]:
    """Submit the sweep's driver as a Ray Job (`sweeps.jobs.submit`), within the owner's
    quotas (`admit`)."""
    from sweeps.jobs import submit as _submit

    spec, _ = admit(spec, allow_partial)
    return _submit(spec, address)


def queue() -> dict[str, Any]:
    """The service's sweeps as its fair-share arbiter sees them (`sweeps queue`)."""
    from sweeps.driver.arbitration import service_queue

    return service_queue()


def usage(
    storage_url: str | None = None, period: str = "month", team: str | None = None
) -> dict[str, Any]:
    """Spend this period by team, user and sweep, against the quotas (`sweeps usage`)."""
    from sweeps.search import quota

    return quota.usage(paths.storage_url(storage_url), period, team)


def admit(spec: Spec, allow_partial: bool = False) -> tuple[Spec, str | None]:
    """The spec as it may run under its owner's quotas, and a line saying how it was capped:
    a worst case that may not fit what is left is a SpecError (exit 2), unless
    `allow_partial`, which stops launching trials once the quota is reached."""
    from sweeps.search import quota

    return quota.admit(spec, paths.storage_url(spec.storage), allow_partial)


def cancel(name: str, storage_url: str | None = None, address: str | None = None) -> str:
    from sweeps.jobs import cancel as _cancel

    return _cancel(name, storage_url, address)


def driver_logs(
    name: str, follow: bool = False, storage_url: str | None = None, address: str | None = None
) -> Any:
    """The driver's job log of a submitted sweep, in chunks (to its end with `follow`)."""
    from sweeps.jobs import driver_logs as _logs

    return _logs(name, follow, storage_url, address)


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=2, default=str)


def resume(name: str, storage_url: str | None = None, **kw: Any) -> Any:
    """Finish the remaining budget of a sweep whose driver died, or that was paused, cancelled
    or interrupted, with the spec it was run with. Trials a pause parked (or a cancel stopped)
    continue from their checkpoints with the same params (`recovery.requeue_cancelled`).

    Trials the dead driver left RUNNING are failed, re-queued with the same params and their
    MLflow runs closed as KILLED (the driver does that on start for any stale trial).
    """
    from sweeps.search import owners
    from sweeps.search.study import load_study
    from sweeps.spec import spec_from_dict

    url = paths.storage_url(storage_url)
    study = load_study(name, url)
    owners.check_control(study, "resume")
    return run(spec_from_dict(_stored_spec(study, storage_url)), **kw)


def _stored_spec(study: Any, storage_url: str | None) -> dict[str, Any]:
    """The spec a sweep was run with, as stored on its study."""
    name, text = study.study_name, study.user_attrs.get(names.SPEC)
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
    return raw


def extend(
    name: str,
    *,
    epochs: int,
    top: int | None = None,
    trials: list[int] | None = None,
    storage_url: str | None = None,
    **kw: Any,
) -> Any:
    """Train the `top` best (or the named) finished trials `epochs` more epochs from their last
    checkpoints, as new trials linked to them (`sweeps.driver.extend`); returns the outcome."""
    from sweeps.driver import extend as ext
    from sweeps.search import owners
    from sweeps.search.study import load_study
    from sweeps.spec import spec_from_dict

    ext.check_args(top, trials, epochs)
    study = load_study(name, paths.storage_url(storage_url))
    owners.check_control(study, "extend")
    ext.check_state(name, describe(study)["state"])
    text = study.user_attrs.get(names.SPEC)
    raw, _ = ext.prepare(study, _stored_spec(study, storage_url), top, trials, epochs)
    try:
        return run(spec_from_dict(raw), **kw)
    finally:
        study.set_user_attr(names.SPEC, text)  # the sweep's own spec, not its extensions'


def _uris(name: str, storage_url: str | None, tracking_uri: str | None) -> tuple[str, str]:
    return paths.storage_url(storage_url), paths.tracking_uri(tracking_uri)


def report(
    name: str,
    out_dir: str | None = None,
    storage_url: str | None = None,
    tracking_uri: str | None = None,
) -> dict[str, str]:
    """Write the learning log (Markdown + HTML with plots) and return the paths."""
    from sweeps.search.study import load_study
    from tracking.report import write_report

    s, t = _uris(name, storage_url, tracking_uri)
    return write_report(load_study(name, s), t, out_dir or str(paths.home() / "reports" / name))


def note(
    name: str,
    text: str,
    trial: int | None = None,
    storage_url: str | None = None,
    tracking_uri: str | None = None,
) -> str:
    """Append a problem/solution note to the sweep's (or a trial's) MLflow run; returns run id."""
    from mlflow.tracking import MlflowClient

    from sweeps.common.errors import NotFoundError
    from sweeps.search.study import load_study, run_id_of
    from tracking.mlflow_compat import check_reachable
    from tracking.report import NOTE_TAG

    s, t = _uris(name, storage_url, tracking_uri)
    study = load_study(name, s)
    if trial is None:
        run_id = study.user_attrs.get(names.MLFLOW_PARENT_RUN_ID)
    else:
        match = [tr for tr in study.get_trials(deepcopy=False) if tr.number == trial]
        if not match:
            raise NotFoundError(f"sweep '{name}' has no trial {trial}")
        run_id = run_id_of(study.user_attrs, match[0])
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
    alpha: float = 0.05,
    min_effect: float = 0.0,
) -> dict[str, Any]:
    """Register the sweep's best (or chosen) trial's model; move `alias` per the gate (with
    replicates on both sides: Welch's t-test, p < `alpha`, gain > `min_effect`)."""
    if not 0 < alpha < 1:
        raise SpecError(f"--alpha: must be between 0 and 1 (exclusive), got {alpha:g}")
    if min_effect < 0:
        raise SpecError(
            f"--min-effect: must be 0 or more (a gain in the metric), got {min_effect:g}"
        )
    from sweeps.search.select import pick_trial
    from sweeps.search.study import load_study
    from tracking.registry import promote as _promote

    s, t = _uris(sweep, storage_url, tracking_uri)
    study = load_study(sweep, s)
    chosen = pick_trial(study, trial, select)
    return _promote(
        study,
        chosen,
        model,
        tracking_uri=t,
        alias=alias,
        if_better=if_better,
        metric=metric,
        alpha=alpha,
        min_effect=min_effect,
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
    ref: str,
    input_path: str,
    out_path: str | None = None,
    *,
    tracking_uri: str | None = None,
    notes: list[str] | None = None,
) -> Any:
    """Predictions; `notes` receives the model's input scaling and any out-of-range warning."""
    from tracking.predict import predict as _predict

    uri = paths.tracking_uri(tracking_uri)
    return _predict(ref, input_path, out_path, tracking_uri=uri, notes=notes)
