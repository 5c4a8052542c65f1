"""What a driver does with a study before its first trial: take over trials a dead driver left
RUNNING (optuna#3215), seed a new study from earlier sweeps, queue the user's configurations,
and count what earlier drivers already spent against the budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sweeps.common import names
from sweeps.common.redact import redacted_spec_yaml
from sweeps.contracts.observers import Tracker
from sweeps.contracts.records import SweepContext
from sweeps.search import owners
from sweeps.search import study as st
from sweeps.search.liveness import heartbeat, stale_running


def open_sweep(
    ctx: SweepContext, driver_id: str, tracker: Tracker, enqueue: list[dict[str, Any]]
) -> list[tuple[float, float, float | None]]:
    """Everything a driver does with the study before its first trial, in order: say it is
    alive, keep the spec, take over a dead driver's trials, warm start, queue the user's
    configurations, and start opening the MLflow parent run (`link_parent` records its ids
    once the tracker has them). Returns what earlier drivers spent (for the budget)."""
    study = ctx.study
    ctx.parent_run_id = study.user_attrs.get(names.MLFLOW_PARENT_RUN_ID)
    ctx.experiment_id = study.user_attrs.get(names.MLFLOW_EXPERIMENT_ID)
    heartbeat(study, driver_id)
    ctx.owner, ctx.team = owners.record(study)
    study.set_user_attr(names.SPEC, redacted_spec_yaml(ctx.spec))
    study.set_user_attr(names.STATE, "running")
    find = lambda number: tracker.find_trial_run(ctx, number)  # noqa: E731
    ctx.requeued = recover_stale(study, driver_id, tracker.close_stale_run, find)
    ctx.requeued += requeue_cancelled(study)
    ctx.warm_notes = prepare(study, ctx.spec, ctx.storage_url, enqueue)
    tracker.start_sweep(ctx)
    return finished_spend(study)


def link_parent(ctx: SweepContext) -> None:
    """The parent run's ids on the study: `show`, reports and a later resume find the run."""
    if ctx.parent_run_id and ctx.study is not None:
        attrs = ctx.study.user_attrs
        if attrs.get(names.MLFLOW_PARENT_RUN_ID) != ctx.parent_run_id:
            ctx.study.set_user_attr(names.MLFLOW_PARENT_RUN_ID, ctx.parent_run_id)
        if attrs.get(names.MLFLOW_EXPERIMENT_ID) != ctx.experiment_id:
            ctx.study.set_user_attr(names.MLFLOW_EXPERIMENT_ID, ctx.experiment_id)


def recover_stale(
    study: Any,
    driver_id: str,
    close_run: Callable[[str], None],
    find_run: Callable[[int], str | None] = lambda number: None,
) -> list[int]:
    """FAIL every trial whose driver stopped beating, re-queue its params, close its MLflow run
    as KILLED. A re-queued trial carries its last persisted checkpoint, so it continues from
    there instead of from epoch 0. Returns the numbers of the trials taken over."""
    taken = []
    for t in stale_running(study, driver_id):
        run_id = t.user_attrs.get("mlflow_run_id")
        if run_id is None:  # its run was made, not yet linked, when the driver died
            run_id = find_run(t.number)
            if run_id:
                st.set_trial_attr(study, st.trial_id(t), "mlflow_run_id", run_id)
        if not st.fail_trial(study, st.trial_id(t), "driver lost; re-queued"):
            continue  # its driver finished it after all: it was not stale
        _requeue(study, t)
        if run_id:
            close_run(run_id)
        taken.append(t.number)
    _count_requeued(study, len(taken))
    return taken


def requeue_cancelled(study: Any) -> list[int]:
    """Queue again the trials an earlier driver's cancel stopped (Ctrl-C twice, SIGTERM,
    `cancel`, `down`): they did not fail on their own, so a resumed sweep runs them, not
    counted in the budget. Each is queued once: its copy carries REQUEUED_FROM."""
    trials = study.get_trials(deepcopy=False)
    done = {t.user_attrs.get(names.REQUEUED_FROM) for t in trials}
    taken = []
    for t in trials:
        if t.state.name == "FAIL" and t.user_attrs.get(names.CANCELLED) and t.number not in done:
            _requeue(study, t)
            taken.append(t.number)
    _count_requeued(study, len(taken))
    return taken


def _requeue(study: Any, t: Any) -> None:
    """Queue `t`'s params again, from its last persisted checkpoint when it has one."""
    attrs: dict[str, Any] = {names.REQUEUED_FROM: t.number}
    checkpoint = t.user_attrs.get(names.CHECKPOINT)
    step = t.user_attrs.get(names.CHECKPOINT_STEP)
    if not checkpoint:  # stopped before a checkpoint of its own: the one it started from
        checkpoint, step = (
            t.user_attrs.get(names.RESUME_CHECKPOINT),
            t.user_attrs.get(names.RESUME_STEP),
        )
    if checkpoint:
        attrs[names.RESUME_CHECKPOINT] = checkpoint
        attrs[names.RESUMED_FROM_TRIAL] = t.number
        attrs[names.RESUME_STEP] = step
    for key in (names.EXTENDS, names.EXTENDS_RUN, names.EXTEND_EPOCHS):  # still an extension
        if key in t.user_attrs:
            attrs[key] = t.user_attrs[key]
    study.enqueue_trial(t.params, user_attrs=attrs)


def requeue_params(study: Any, params: dict[str, Any], attrs: dict[str, Any]) -> None:
    """Queue `params` again with `attrs` (a retry of a failed trial), not counted in the
    budget: the trial it repeats was."""
    study.enqueue_trial(params, user_attrs=attrs)
    _count_requeued(study, 1)


def _count_requeued(study: Any, n: int) -> None:
    """Re-queued trials are not counted in the budget (`counted_trials`)."""
    if n:
        study.set_user_attr(names.REQUEUED, int(study.user_attrs.get(names.REQUEUED, 0)) + n)


def finished_spend(study: Any) -> list[tuple[float, float, float | None]]:
    """(cost, gpu_hours, single objective value or None) of each finished trial."""
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.state.is_finished():
            value = None
            if t.state.name == "COMPLETE" and t.values and len(t.values) == 1:
                value = t.values[0]
            out.append(
                (t.user_attrs.get("cost_usd", 0.0), t.user_attrs.get("gpu_hours", 0.0), value)
            )
    return out


def prepare(study: Any, spec: Any, storage_url: str, enqueue: list[dict[str, Any]]) -> list[str]:
    """Warm start a new study and queue the user's configurations; returns warm-start notes."""
    notes: list[str] = []
    if spec.warm_start and not study.get_trials(deepcopy=False):
        from sweeps.search.warmstart import warm_start

        notes = warm_start(study, spec, storage_url)
    for params in enqueue:
        study.enqueue_trial(params, skip_if_exists=True)
    return notes
