"""Sweeps still running when `sweeps down` stops the service: each driver is asked to interrupt
its sweep (running trials cancelled, their MLflow runs KILLED, the sweep recorded
`interrupted` with its reason) before the service's processes stop, so that `sweeps resume`
finds a consistent record and runs the cancelled trials again.

A driver that does not answer in time (it hangs, or its job was lost) is settled here: its
RUNNING trials are FAIL and marked cancelled (a resume re-queues them), their runs KILLED,
and the sweep is recorded interrupted with a stop reason."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sweeps.common import names, paths

REASON = "interrupted: the service stopped (sweeps down); `sweeps resume` continues it"
TRIAL_ERROR = "interrupted: sweeps down"


def _running(study: Any) -> bool:
    """No driver has recorded the sweep's end, and one beats: a driver that ended recorded
    its state (a killed one's last beat stays fresh for a while, so the beat alone is not
    enough)."""
    from sweeps.search.liveness import live_drivers
    from sweeps.search.study import fresh_study_attrs

    return fresh_study_attrs(study).get(names.STATE) == "running" and bool(live_drivers(study))


def live_sweeps(storage_url: str | None = None) -> list[str]:
    """Names of the sweeps in the local store still being run by a driver."""
    import optuna

    url = paths.storage_url(storage_url)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return []  # nothing was ever run here: no store to open (nor to create)
    storage = optuna.storages.get_storage(url)
    out = []
    for s in storage.get_all_studies():
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        if _running(study):
            out.append(s.study_name)
    return out


def interrupt(sweeps: list[str], wait_s: float, storage_url: str | None = None) -> list[str]:
    """Ask each sweep's drivers to interrupt it, wait up to `wait_s` for them to record it,
    then settle what none recorded. Returns the sweeps settled here (their driver did not
    answer)."""
    from sweeps.search import study as st

    url = paths.storage_url(storage_url)
    studies = {name: st.load_study(name, url) for name in sweeps}
    for study in studies.values():
        study.set_user_attr(names.INTERRUPT_REQUESTED, time.time())
    deadline = time.monotonic() + wait_s
    waiting = dict(studies)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.5)
        waiting = {n: s for n, s in waiting.items() if _running(s)}
    for study in waiting.values():
        _settle(study)
    return list(waiting)


def _settle(study: Any) -> None:
    """What a driver that did not answer left: FAIL its RUNNING trials as cancelled (a resume
    queues them again), KILL their runs, record the sweep interrupted."""
    import optuna

    from sweeps.search import study as st
    from sweeps.search.study import fresh_study_attrs

    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    runs = []
    for t in running:
        st.set_trial_attr(study, st.trial_id(t), names.CANCELLED, True)
        if st.fail_trial(study, st.trial_id(t), TRIAL_ERROR):
            runs.append(st.run_id_of(study.user_attrs, t))
    _kill_runs([r for r in runs if r])
    if fresh_study_attrs(study).get(names.STATE) == "running":  # an end recorded meanwhile stays
        study.set_user_attr(names.STATE, "interrupted")
        study.set_user_attr(names.STOP_REASON, REASON)


def _kill_runs(run_ids: list[str]) -> None:
    if not run_ids:
        return
    from mlflow.tracking import MlflowClient

    client = MlflowClient(paths.tracking_uri())
    for run_id in run_ids:
        client.set_tag(run_id, names.STATE, "KILLED")
        client.set_terminated(run_id, status="KILLED")
