"""A running sweep that reaches its owner's or its team's quota drains.

`submit` and `run` admit a sweep against what is left when it starts (`search.quota.admit`).
Sweeps of one team that run at the same time spend from one quota, so each driver looks again
while it runs: every `every_s` a thread of its own reads what the team and the owner spent this
period (every sweep in the store, its own included) and, once a quota has nothing left, the
sweep drains: running trials finish, no new one starts. A sweep under no quota starts no thread.

The thread reads the store through a storage of its own, so the driver's loop never waits on
it. A read that fails is logged and tried again at the next interval: a quota is never taken as
reached on a failed read.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from typing import Any

from sweeps.common.errors import one_line
from sweeps.search.quota import Left, left, period_start, spend
from sweeps.spec.teams import Teams, load_teams

log = logging.getLogger(__name__)

EVERY_ENV = "SWEEPS_QUOTA_CHECK_S"  # how often a running sweep looks (default 30 s)


def exhausted(lefts: list[Left]) -> str | None:
    """Pure: the line a sweep drains with once any quota has nothing left, else None."""
    for x in lefts:
        for have, quota, fmt in (
            (x.usd, x.quota.usd, lambda v: f"${v:,.2f}"),
            (x.gpu_hours, x.quota.gpu_hours, lambda v: f"{v:,.2f} GPU-hours"),
        ):
            if have is not None and quota is not None and have <= 1e-9:
                return (
                    f"quota reached: {x.who} has spent {fmt(quota - have)} of {fmt(quota)} "
                    f"{x.label}: running trials finish, no new ones start"
                )
    return None


class QuotaWatch:
    """Looks at the quotas that apply to a sweep's owner and team while it runs."""

    def __init__(self, storage_url: str, owner: str, team: str, teams: Teams, every_s: float):
        self.storage_url, self.owner, self.team = storage_url, owner, team
        self.teams, self.every_s = teams, every_s
        self.line: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def for_sweep(cls, storage_url: str, owner: str, team: str) -> QuotaWatch | None:
        """The watch for a sweep whose owner or team has a quota; None when none applies."""
        try:
            teams = load_teams()
        except Exception as e:  # admission read it already; say so rather than watch nothing
            log.warning("quota: the teams file could not be read while running: %s", one_line(e))
            return None
        team = team or teams.team_of(owner)
        t, u = teams.teams.get(team), teams.users.get(owner)
        if not ((t and t.quota) or (u and u.quota)):
            return None
        every = float(os.environ.get(EVERY_ENV) or 30.0)
        return cls(storage_url, owner, team, teams, every)

    @classmethod
    def started(cls, storage_url: str, owner: str, team: str) -> QuotaWatch | None:
        """`for_sweep`, its thread started."""
        watch = cls.for_sweep(storage_url, owner, team)
        if watch is not None:
            watch.start()
        return watch

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sweeps-quota", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        from sweeps.search.study import open_storage

        storage = open_storage(self.storage_url)
        while not self._stop.wait(self.every_s):
            try:
                self.line = self.check(storage, dt.datetime.now(dt.UTC))
            except Exception as e:  # the store blinked: look again next time
                log.warning("quota: spend could not be read: %s", one_line(e))
            if self.line:
                return

    def check(self, storage: Any, now: dt.datetime) -> str | None:
        periods = {q.period for q in self._quotas()}
        rows = {p: spend(storage, period_start(p, now)[0]) for p in periods}
        return exhausted(left(self.teams, self.owner, self.team, rows, now))

    def _quotas(self) -> list[Any]:
        t, u = self.teams.teams.get(self.team), self.teams.users.get(self.owner)
        return [q for q in ((t.quota if t else None), (u.quota if u else None)) if q]
