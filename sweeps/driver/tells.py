"""Telling Optuna how trials ended, once their MLflow runs are linked.

A told trial is read-only, so its run id must be written first. A tiny trial can end before
the tracker's writer process has made its run: its tell waits here, and the loop serves the
lanes meanwhile, until the id comes (`link_run`) or `LINK_WAIT_S` passes (the id then goes on
the study instead).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sweeps.common import names
from sweeps.contracts.observers import Tracker
from sweeps.contracts.records import TrialRecord
from sweeps.search import study as st
from sweeps.search.trial_attrs import PendingAttrs


class Teller:
    # An ended trial waits this long for its run's id before it is told anyway.
    LINK_WAIT_S = 10.0

    def __init__(self, study: Any, tracker: Tracker, attrs: PendingAttrs) -> None:
        self.study, self.tracker, self.attrs = study, tracker, attrs
        # trial_id -> the record, the tell's values and state, and the monotonic deadline.
        self._untold: dict[int, tuple[TrialRecord, Any, Any, float]] = {}
        self.sampler_stopped = False  # a tell said the sampler has nothing more to try

    def waiting(self) -> bool:
        return bool(self._untold)

    def tell_linked(self, rec: TrialRecord, values: Any = None, state: Any = None) -> None:
        if rec.run_id is not None:
            self.tell(rec.trial, values, state)
        else:
            self._untold[rec.trial_id] = (rec, values, state, time.monotonic() + self.LINK_WAIT_S)

    def link_run(self, trial_id: int, run_id: str, running: Iterable[TrialRecord]) -> None:
        """The tracker created a trial's MLflow run: link it both ways. A trial that finished
        first (its run was made late, a tracking server that blinked) keeps the link in the
        study instead: Optuna's finished trials are read-only."""
        import optuna

        if trial_id < 0:  # a replicate's run (sweeps.driver.replicate_runs): no Optuna trial
            return
        live = trial_id in self._untold  # ended, not told yet
        for rec in running:
            if rec.trial_id == trial_id:
                rec.run_id, live = run_id, True
        if live:
            self.attrs.add(trial_id, {"mlflow_run_id": run_id})
        else:
            try:
                st.set_trial_attr(self.study, trial_id, "mlflow_run_id", run_id)
            except optuna.exceptions.UpdateFinishedTrialError:
                number = st.trial_number(self.study, trial_id)
                self.study.set_user_attr(names.run_of_trial(number), run_id)
        if trial_id in self._untold:  # linked while still RUNNING: now it may be told
            self._tell_untold(trial_id)

    def tell_overdue(self, running: Iterable[TrialRecord], final: bool = False) -> None:
        """Tell the ended trials whose run id has not come within LINK_WAIT_S; at the sweep's
        end (`final`), first give the ids that long to come."""
        deadline = time.monotonic() + (self.LINK_WAIT_S if final else 0.0)
        recs = list(running)
        while self._untold and time.monotonic() < deadline:
            for trial_id, run_id in self.tracker.created_runs():
                self.link_run(trial_id, run_id, recs)
            if self._untold:
                time.sleep(0.02)
        now = time.monotonic()
        for trial_id in [k for k, v in self._untold.items() if final or v[3] <= now]:
            self._tell_untold(trial_id)

    def _tell_untold(self, trial_id: int) -> None:
        rec, values, state, _ = self._untold.pop(trial_id)
        self.tell(rec.trial, values, state)

    def tell(self, trial: Any, values: Any = None, state: Any = None) -> None:
        self.attrs.write(st.trial_id(trial))  # its last write: a told trial is read-only
        if st.tell(self.study, trial, values, state=state):
            self.sampler_stopped = True
