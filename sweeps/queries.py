"""Reading sweeps back: `show`, `ls`, `compare` and `logs`, as plain JSON-ready data.

A sweep's state is the same here in every command: `running` only while a live driver beats,
else what its last driver recorded (finished, stopped, failed, cancelled, interrupted), and
`interrupted` when the driver died without saying (trials left RUNNING, or a stored `running`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sweeps.common import figures, names, paths
from sweeps.common.errors import NotFoundError
from sweeps.search import bulk
from sweeps.search.constraints import best_feasible, violated
from sweeps.search.replicated import best_by_replicates, replicate_means
from sweeps.search.study import run_id_of


def sweep_state(attrs: dict[str, Any], running_trials: bool, live: bool) -> str:
    """Pure: the state a sweep is in, from its study's attrs and whether a driver beats."""
    if live:  # a live sweep the service's arbiter gives no lane yet waits in its queue
        return "queued" if attrs.get(names.SERVICE_QUEUED) and not running_trials else "running"
    stored = attrs.get(names.STATE)
    if stored == "running" or running_trials:
        return "interrupted"  # its driver died without recording how the sweep ended
    if stored:
        return str(stored)
    if attrs.get(names.SUBMITTED):
        return "queued"
    return "finished"  # recorded before states were stored


def _trial_dict(t: Any, study_attrs: dict[str, Any]) -> dict[str, Any]:
    dur = None
    if t.datetime_start and t.datetime_complete:
        dur = (t.datetime_complete - t.datetime_start).total_seconds()
    return {
        "number": t.number,
        "state": t.state.name,
        "value": t.value if t.values and len(t.values) == 1 else None,
        "values": t.values,
        "params": t.params,
        "mlflow_run_id": run_id_of(study_attrs, t),
        "duration_s": t.user_attrs.get("duration_s", dur),
        "cost_usd": t.user_attrs.get("cost_usd"),
        "error": t.user_attrs.get(names.ERROR),
        "restarts": t.user_attrs.get(names.RESTARTS, 0),
        "resumed_from_trial": t.user_attrs.get(names.RESUMED_FROM_TRIAL),
        "infeasible": violated(t),  # the constraints it broke: never the best
        "attempt": t.user_attrs.get(names.ATTEMPT, 1),
        "retry_of": t.user_attrs.get(names.RETRY_OF),
        "extends": t.user_attrs.get(names.EXTENDS),  # `extend`: the trial it continues
        "failure_cause": t.user_attrs.get(names.FAILURE_CAUSE),
        "retried": bool(t.user_attrs.get(names.RETRIED)),
    }


def _counts(trials: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


def _best(study: Any, trials: list[Any], attrs: dict[str, Any]) -> dict[str, Any] | None:
    if len(study.directions) != 1 or not any(t.state.name == "COMPLETE" for t in trials):
        return None
    maximize = study.direction.name == "MAXIMIZE"
    b = best_by_replicates(attrs, trials, maximize) or best_feasible(trials, maximize)
    if b is None:
        return None
    rep = replicate_means(attrs).get(b.number)
    return {
        "number": b.number,
        "value": b.value,
        "params": b.params,
        "mlflow_run_id": run_id_of(attrs, b),
        # Ranked by its replicates' mean once there are any: mean, interval, n.
        "replicates": _interval(rep) if rep else None,
    }


def _replicated(attrs: dict[str, Any], maximize: bool) -> list[dict[str, Any]]:
    """Each replicated configuration's mean and interval, best mean first."""
    means = replicate_means(attrs)
    order = sorted(means, key=lambda n: ((-1 if maximize else 1) * means[n]["mean"], n))
    return [{"number": n, **_interval(means[n])} for n in order]


def _interval(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: rec.get(k) for k in ("mean", "ci95_low", "ci95_high", "n")}


def _started(t: Any) -> float | None:
    return t.datetime_start.timestamp() if t.datetime_start else None


def _legacy_wall(trials: list[Any]) -> float:
    """First trial start to last end: sweeps recorded before drivers kept their wall time."""
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    return (max(ends) - min(starts)).total_seconds() if starts and ends else 0.0


def figures_of(attrs: dict[str, Any], trials: list[Any], live: set[str], now: float) -> dict:
    """Wall s, trial s and cost $ of a sweep, from its recorded facts (`sweeps.common.figures`):
    all its drivers' sessions, and a live driver's running trials so far."""
    wall = figures.wall_s(attrs, live, now)
    if not wall and not figures.sessions(attrs) and names.WALL_S not in attrs:
        wall = _legacy_wall(trials)
    facts = [(t.state.name, t.user_attrs.get("duration_s"), _started(t)) for t in trials]
    done_cost = sum(float(t.user_attrs.get("cost_usd") or 0.0) for t in trials)
    return {
        "cost_usd": round(done_cost + figures.running_cost(attrs, live), 6),
        "wall_s": round(wall, 1),
        "trial_s": round(figures.trial_s(facts, now, bool(live)), 1),
    }


def _state_of(study: Any, attrs: dict[str, Any], trials: list[Any]) -> tuple[str, set[str]]:
    from sweeps.search.liveness import live_drivers

    running = any(t.state.name == "RUNNING" for t in trials)
    live = live_drivers(study, attrs=attrs)
    state = sweep_state(attrs, running, bool(live))
    if state == "queued" and not live and attrs.get(names.JOB_ID):
        state = _queued_job_state(attrs)
    return state, live


def describe(study: Any) -> dict[str, Any]:
    """One study as the `show --json` document (its trials read in bulk: `search.bulk`)."""
    trials = bulk.trials(study, skip_keys=_UNSHOWN_KEYS)
    attrs = bulk.study_attrs(study)  # read once: a study may hold one attr per trial
    state, live = _state_of(study, attrs, trials)
    return {
        "name": study.study_name,
        "state": state,
        "owner": attrs.get(names.OWNER),
        "team": attrs.get(names.TEAM),
        "stop_reason": attrs.get(names.STOP_REASON),
        "converged": attrs.get(names.CONVERGED),  # budget.stop_when's evidence, if it ended so
        "objective": attrs.get(names.OBJECTIVE),
        "direction": study.directions[0].name.lower(),
        "best": _best(study, trials, attrs),
        "replicated": _replicated(attrs, study.directions[0].name == "MAXIMIZE"),  # any count
        "counts": _counts(trials),
        **figures_of(attrs, trials, live, time.time()),
        "checkpoint_bytes": attrs.get(names.CHECKPOINT_BYTES),
        "trials": [_trial_dict(t, attrs) for t in trials],
        "mlflow_experiment_id": attrs.get(names.MLFLOW_EXPERIMENT_ID),
        "parent_run_id": attrs.get(names.MLFLOW_PARENT_RUN_ID),
        "job_id": attrs.get(names.JOB_ID),
    }


def _queued_job_state(attrs: dict[str, Any]) -> str:
    """A submitted sweep whose driver has not started: still queued, or did its job end?"""
    from sweeps.service.local import job_status

    status = job_status(attrs[names.JOB_ID], attrs.get(names.JOB_ADDRESS) or None)
    return {"FAILED": "failed", "STOPPED": "cancelled", "SUCCEEDED": "finished"}.get(
        status or "", "queued"
    )


def show(name: str, storage_url: str | None = None) -> dict[str, Any]:
    """One sweep as a JSON-ready document (the `sweeps show --json` schema)."""
    from sweeps.search.reader import load_for_reading

    return describe(load_for_reading(name, paths.storage_url(storage_url)))


def ls(storage_url: str | None = None) -> list[dict[str, Any]]:
    """Every sweep in the storage with state, trials by state, best value, cost and wall time."""
    from sweeps.search.reader import open_reader

    url = paths.storage_url(storage_url)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return []  # reading must not create the database (it would race a starting driver)
    store = open_reader(url)  # without Optuna where the schema is current: 0.5 s of an `ls`
    return [_ls_row(store.load(name)) for name in store.names()]


# User attrs every trial has that neither `show` nor `ls` reads: 5 of a tiny trial's 8 attr
# rows. The rest are read (what decides the best may name a new one, as pbt's does).
_UNSHOWN_KEYS = (names.LANE, names.DRIVER, names.SEED, "gpu_hours", "train_seconds")


def _ls_row(study: Any) -> dict[str, Any]:
    """One `ls` row: what `describe` says of the study, less its trials' own fields."""
    trials = bulk.trials(study, params=False, skip_keys=_UNSHOWN_KEYS)  # a row shows no params
    attrs = bulk.study_attrs(study)
    state, live = _state_of(study, attrs, trials)
    best = _best(study, trials, attrs)
    return {
        "name": study.study_name,
        "state": state,
        "owner": attrs.get(names.OWNER),
        **figures_of(attrs, trials, live, time.time()),
        "trials": _counts(trials),
        "best": best["value"] if best else None,
        "checkpoint_bytes": attrs.get(names.CHECKPOINT_BYTES),
    }


def compare(a: str, b: str, storage_url: str | None = None) -> dict[str, Any]:
    """Two sweeps side by side: best value and params, cost, wall time, trials by state."""
    out = {}
    for name in (a, b):
        doc = show(name, storage_url)
        out[name] = {
            "best": doc["best"]["value"] if doc["best"] else None,
            "best_params": doc["best"]["params"] if doc["best"] else {},
            "cost_usd": doc["cost_usd"],
            "wall_s": doc["wall_s"],
            "trial_s": doc["trial_s"],
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
    from sweeps.driver.trial_logs import live_log_path
    from sweeps.search.study import load_study

    study = load_study(name, paths.storage_url(storage_url))
    trials = study.get_trials(deepcopy=False)
    if not trials:
        raise NotFoundError(f"sweep '{name}' has no trials yet")
    tr = trials[-1] if trial is None else next((x for x in trials if x.number == trial), None)
    if tr is None:
        raise NotFoundError(f"sweep '{name}' has no trial {trial}")
    live = live_log_path(name, tr.number)
    if live.exists():
        return tr.number, live.read_text()
    run_id = run_id_of(study.user_attrs, tr)
    if not run_id:
        return tr.number, ""
    from mlflow.tracking import MlflowClient

    try:
        path = MlflowClient(paths.tracking_uri(tracking_uri)).download_artifacts(
            run_id, "logs/worker.log"
        )
    except Exception:
        return tr.number, ""
    return tr.number, Path(path).read_text()
