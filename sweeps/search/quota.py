"""Quotas in money and GPU-hours: what each team and user spent in a period, and whether a
sweep's worst case fits what is left.

`spend` reads the studies (each one's owner and team, and its trials' `cost_usd` and
`gpu_hours` attrs, counted by the trial's start time); `period_start`, `left` and `refusal` are
pure. Periods are calendar periods in UTC: a day, a week from Monday, a month from the 1st.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sweeps.common import names
from sweeps.spec.teams import Quota, Teams


@dataclass(frozen=True)
class Usage:
    """One sweep's spend in a period."""

    sweep: str
    owner: str
    team: str
    usd: float
    gpu_hours: float


@dataclass(frozen=True)
class Left:
    """What is left of one quota (None: that quota has no such limit)."""

    who: str  # "team vision" or "user bob"
    quota: Quota
    usd: float | None
    gpu_hours: float | None
    label: str  # "this month (2026-12)"


def period_start(period: str, now: dt.datetime) -> tuple[dt.datetime, str]:
    """The start of the calendar period holding `now` (UTC), and its label."""
    day = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, f"today ({day:%Y-%m-%d})"
    if period == "week":
        start = day - dt.timedelta(days=day.weekday())
        return start, f"this week (from {start:%Y-%m-%d})"
    start = day.replace(day=1)
    return start, f"this month ({start:%Y-%m})"


def spend(storage: Any, since: dt.datetime) -> list[Usage]:
    """Every sweep's spend from trials started at or after `since`."""
    import optuna

    out = []
    for s in storage.get_all_studies():
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        usd = gpuh = 0.0
        for t in study.get_trials(deepcopy=False):
            start = t.datetime_start
            if start is None or start.astimezone(dt.UTC) < since:
                continue
            usd += float(t.user_attrs.get("cost_usd") or 0.0)
            gpuh += float(t.user_attrs.get("gpu_hours") or 0.0)
        attrs = study.user_attrs
        owner = str(attrs.get(names.OWNER) or "-")
        out.append(Usage(s.study_name, owner, str(attrs.get(names.TEAM) or "-"), usd, gpuh))
    return out


def left(
    teams: Teams, owner: str, team: str, rows: dict[str, list[Usage]], now: dt.datetime
) -> list[Left]:
    """What is left of each quota that applies to `owner` (theirs, and their team's). `rows`:
    spend by period ("day", "week", "month"), as `spend` gives it from that period's start."""
    found: list[tuple[str, Quota, bool]] = []
    if team in teams.teams and teams.teams[team].quota:
        found.append((f"team {team}", teams.teams[team].quota, True))  # type: ignore[arg-type]
    if owner in teams.users and teams.users[owner].quota:
        found.append((f"user {owner}", teams.users[owner].quota, False))  # type: ignore[arg-type]
    out = []
    for who, q, by_team in found:
        mine = [u for u in rows[q.period] if (u.team == team if by_team else u.owner == owner)]
        usd = None if q.usd is None else q.usd - sum(u.usd for u in mine)
        gpuh = None if q.gpu_hours is None else q.gpu_hours - sum(u.gpu_hours for u in mine)
        out.append(Left(who, q, usd, gpuh, period_start(q.period, now)[1]))
    return out


def refusal(
    lefts: list[Left], worst_usd: float | None, worst_gpuh: float | None, basis: str
) -> str | None:
    """One line when the sweep's worst case may not fit what is left; None when it fits."""
    for x in lefts:
        for have, worst, quota, fmt in (
            (x.usd, worst_usd, x.quota.usd, lambda v: f"${v:,.2f}"),
            (x.gpu_hours, worst_gpuh, x.quota.gpu_hours, lambda v: f"{v:,.2f} GPU-hours"),
        ):
            if have is None or quota is None:
                continue
            head = f"quota: {x.who} has {fmt(max(have, 0.0))} of {fmt(quota)} left {x.label}"
            if worst is None:
                why = basis.removeprefix("unknown: ")
                return (
                    f"{head}; this sweep's worst case is unknown: {why}; or --allow-partial "
                    "to run until the quota is reached"
                )
            if worst > have + 1e-9:
                return (
                    f"{head}; this sweep may cost {fmt(worst)} ({basis}); lower --trials, or "
                    "--allow-partial to run until the quota is reached"
                )
    return None


def caps(lefts: list[Left]) -> tuple[float | None, float | None]:
    """The least left of any quota, in dollars and in GPU-hours (None: no such quota)."""
    usd = [x.usd for x in lefts if x.usd is not None]
    gpuh = [x.gpu_hours for x in lefts if x.gpu_hours is not None]
    return (min(usd) if usd else None), (min(gpuh) if gpuh else None)


def admit(spec: Any, storage_url: str, allow_partial: bool = False) -> tuple[Any, str | None]:
    """The spec to run under the owner's quotas, and a line to say: a sweep whose worst case
    may not fit is refused (SpecError, exit 2) unless `allow_partial`, which caps its spend
    (budget.max_cost_usd, a drain) at what is left."""
    from sweeps.common import identity
    from sweeps.common.errors import SpecError
    from sweeps.spec.teams import load_teams
    from tracking.costs import spec_cost_facts

    teams = load_teams()
    owner = identity.owner()
    team = teams.team_of(owner)
    quotas = [q for q in (_team_quota(teams, team), _user_quota(teams, owner)) if q]
    if not quotas:
        return spec, None
    now = dt.datetime.now(dt.UTC)
    storage = _storage(storage_url)
    rows = {
        p: spend(storage, period_start(p, now)[0]) if storage else []
        for p in {q.period for q in quotas}
    }
    lefts = left(teams, owner, team, rows, now)
    facts = spec_cost_facts(spec)
    per_hour, worst = facts["cost_per_hour_usd"], facts["worst_case_cost_usd"]
    gpus = spec.resources.workers * spec.resources.gpus_per_worker
    worst_gpuh = 0.0 if not gpus else (worst / per_hour * gpus if worst and per_hour else None)
    line = refusal(lefts, worst, worst_gpuh, facts["worst_case_basis"])
    if line is None:
        return spec, None
    if not allow_partial:
        raise SpecError(line)
    usd, gpuh = caps(lefts)
    if not gpus:
        gpuh = None  # a CPU sweep spends no GPU-hours
    if (usd is not None and usd <= 0) or (gpuh is not None and gpuh <= 0):
        raise SpecError(line.split("; ")[0] + ": nothing left to run with, even --allow-partial")
    b = spec.budget
    update: dict[str, float] = {}
    if usd is not None:
        update["max_cost_usd"] = usd if b.max_cost_usd is None else min(usd, b.max_cost_usd)
    if gpuh is not None:
        update["max_gpu_hours"] = gpuh if b.max_gpu_hours is None else min(gpuh, b.max_gpu_hours)
    spec = spec.model_copy(update={"budget": b.model_copy(update=update)})
    said = [f"${update['max_cost_usd']:,.2f}"] if "max_cost_usd" in update else []
    said += [f"{update['max_gpu_hours']:,.2f} GPU-hours"] if "max_gpu_hours" in update else []
    return spec, f"quota: --allow-partial: the sweep stops launching trials at {' or '.join(said)}"


def _team_quota(teams: Teams, team: str) -> Quota | None:
    return teams.teams[team].quota if team in teams.teams else None


def _user_quota(teams: Teams, owner: str) -> Quota | None:
    return teams.users[owner].quota if owner in teams.users else None


def _storage(url: str) -> Any:
    from pathlib import Path

    from sweeps.search.study import open_storage

    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        return None  # nothing spent yet; reading must not create the database
    return open_storage(url)


def usage(storage_url: str, period: str = "month", team: str | None = None) -> dict[str, Any]:
    """Spend in the current calendar period by team, user and sweep (`sweeps usage`), with
    what is left of each quota in conf/teams.yaml for that period."""
    from sweeps.spec.teams import load_teams

    teams = load_teams()
    now = dt.datetime.now(dt.UTC)
    since, label = period_start(period, now)
    storage = _storage(storage_url)
    rows = [u for u in (spend(storage, since) if storage else []) if u.usd or u.gpu_hours]
    if team:
        rows = [u for u in rows if u.team == team]
    quotas = []
    for who, q in [(f"team {t}", x.quota) for t, x in teams.teams.items()] + [
        (f"user {u}", x.quota) for u, x in teams.users.items()
    ]:
        if q is None or q.period != period or (team and who != f"team {team}"):
            continue
        kind, name = who.split(" ", 1)
        mine = [u for u in rows if (u.team if kind == "team" else u.owner) == name]
        quotas.append(
            {
                "who": who,
                "usd": q.usd,
                "gpu_hours": q.gpu_hours,
                "spent_usd": round(sum(u.usd for u in mine), 6),
                "spent_gpu_hours": round(sum(u.gpu_hours for u in mine), 6),
            }
        )
    return {
        "period": period,
        "label": label,
        "since": since.isoformat(),
        "sweeps": [u.__dict__ for u in sorted(rows, key=lambda u: (u.team, u.owner, u.sweep))],
        "quotas": quotas,
    }
