"""A sweep's wall time, trial time and cost as pure functions of what its study recorded.

Each driver that runs a sweep keeps its own session facts in its heartbeat attr (`session`):
when its command started, when it last wrote, how many trials it ran, and what its running
trials cost so far. So the figures hold for every way a sweep is seen:

* wall time sums the drivers' sessions, so a resumed sweep counts its first run too, even
  when that driver was killed before it could record how the sweep ended;
* a session that ran no trial (a run of a sweep whose budget was spent) adds nothing;
* a running sweep shows the time, trial seconds and cost so far, not 0.

Sweeps recorded before sessions were kept carry one summed `names.WALL_S`; it still counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sweeps.common import names

SINCE = "since"  # when the driver's command started (its wall time counts from there)
END = "end"  # when the driver last wrote its session (its end, once it has ended)
TRIALS = "trials"  # trials this driver ran, ended and running
RUNNING_COST = "running_cost_usd"  # what this driver's running trials cost so far


def session(since: float, end: float, trials: int, running_cost_usd: float) -> dict[str, float]:
    """A driver's session facts, as its heartbeat carries them."""
    return {
        SINCE: round(since, 3),
        END: round(end, 3),
        TRIALS: int(trials),
        RUNNING_COST: round(running_cost_usd, 9),
    }


def sessions(attrs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Driver id -> its session facts, for the drivers that kept them."""
    out = {}
    for k, v in attrs.items():
        if k.startswith(names.DRIVER_PREFIX) and isinstance(v, dict) and SINCE in v:
            out[k.removeprefix(names.DRIVER_PREFIX)] = v
    return out


def wall_s(attrs: dict[str, Any], live: set[str], now: float) -> float:
    """Seconds the sweep's drivers ran, summed over their sessions: a live driver's up to
    `now`, an ended (or dead) one's up to its last write; one that ran no trial adds nothing."""
    legacy = attrs.get(names.WALL_S)
    total = float(legacy) if isinstance(legacy, int | float) else 0.0
    for driver, s in sessions(attrs).items():
        if driver in live:
            total += max(0.0, now - float(s[SINCE]))
        elif int(s.get(TRIALS, 0)):
            total += max(0.0, float(s.get(END, s[SINCE])) - float(s[SINCE]))
    return total


def running_cost(attrs: dict[str, Any], live: set[str]) -> float:
    """What the live drivers' running trials cost so far (as of their last heartbeat)."""
    return sum(float(s.get(RUNNING_COST, 0.0)) for d, s in sessions(attrs).items() if d in live)


def trial_s(
    trials: Iterable[tuple[str, float | None, float | None]], now: float, live: bool
) -> float:
    """Trial seconds summed: each ended trial's recorded duration, and while a driver is live
    each running trial's time so far. `trials`: (state, duration_s, started at, epoch s)."""
    total = 0.0
    for state, duration, started in trials:
        if duration:
            total += float(duration)
        elif live and state == "RUNNING" and started:
            total += max(0.0, now - started)
    return total
