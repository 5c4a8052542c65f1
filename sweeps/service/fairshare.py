"""The arbiter's policy: which sweep holds how many lanes, as a pure function.

State and event in, grants and takes out: `decide(asks, capacity, weights)`. No clock, no Ray,
no store: the service's arbiter feeds it what its broker knows, and `bench/scheduler_sim.py`
feeds it a simulated week; both run this same code.

- Priority tiers are strict: `high` sweeps are served before `normal`, `normal` before `low`.
- Within a tier, capacity goes to teams by weighted max-min fair share (water-filling over
  the teams' weights, each capped at what the team can use), then to a team's sweeps equally.
- It is work-conserving: a share nobody can use goes to whoever still wants lanes.
- A sweep below its target gets free lanes first. When none are free, the arbiter takes lanes
  from the sweeps furthest above their targets: a preemptible one parks its trial at its next
  report (checkpointed); another gives its lane up only at its trial's end (`at_boundary`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

PRIORITIES = ("high", "normal", "low")


@dataclass(frozen=True)
class Ask:
    """A sweep as the arbiter sees it now."""

    sweep: str
    team: str
    priority: str = "normal"
    want: int = 0  # lanes it could use now (its trials left, up to its `parallel`)
    held: int = 0  # lanes it holds, those being taken included
    releasing: int = 0  # of those, lanes already taken: they free at their trial's next report
    since: float = 0.0  # when it was submitted: queue order within a priority
    preemptible: bool = True  # its trials park at a checkpoint; else only at a trial's end


@dataclass(frozen=True)
class Grant:
    sweep: str
    lanes: int


@dataclass(frozen=True)
class Take:
    sweep: str
    lanes: int
    at_boundary: bool  # not preemptible: the lane goes at its trial's end


@dataclass(frozen=True)
class Decision:
    targets: Mapping[str, int]
    grants: tuple[Grant, ...] = ()
    takes: tuple[Take, ...] = ()


def water_fill(
    demand: Mapping[str, float], weight: Mapping[str, float], cap: float
) -> dict[str, float]:
    """Weighted max-min fair split of `cap` over keys that each use at most `demand[k]`: the
    level L where sum(min(demand, L * weight)) = cap (all demands, where they fit)."""
    out = {k: 0.0 for k in demand}
    live = sorted((k for k in demand if demand[k] > 0), key=lambda k: demand[k] / weight[k])
    left, wsum = float(cap), sum(weight[k] for k in live)
    for i, k in enumerate(live):
        level = left / wsum if wsum > 0 else 0.0
        if demand[k] <= level * weight[k]:  # capped at what it uses: the rest goes on
            out[k] = float(demand[k])
            left -= demand[k]
            wsum -= weight[k]
            continue
        for j in live[i:]:
            out[j] = level * weight[j]
        break
    return out


def _round(shares: Mapping[str, float], demand: Mapping[str, int], total: int) -> dict[str, int]:
    """Whole lanes: floors, then the largest remainders, never above a demand."""
    out = {k: min(demand[k], math.floor(v + 1e-9)) for k, v in shares.items()}
    spare = total - sum(out.values())
    if spare <= 0:
        return out
    order = sorted(shares, key=lambda k: (-(shares[k] - out[k]), k))
    for k in order:
        if spare <= 0:
            break
        if out[k] < demand[k]:
            out[k] += 1
            spare -= 1
    return out


def targets(asks: Sequence[Ask], capacity: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Lanes each sweep should hold: strict priority tiers, weighted fair share between teams
    inside a tier, equal share between a team's sweeps, work-conserving throughout."""
    out = {a.sweep: 0 for a in asks}
    left = capacity
    for tier in PRIORITIES:
        mine = [a for a in asks if a.priority == tier and a.want > 0]
        if not mine or left <= 0:
            continue
        teams: dict[str, list[Ask]] = {}
        for a in mine:
            teams.setdefault(a.team, []).append(a)
        demand = {t: sum(a.want for a in xs) for t, xs in teams.items()}
        given = min(left, sum(demand.values()))
        left -= given
        if given == sum(demand.values()):  # room for all of this tier: no sharing to do
            out.update((a.sweep, a.want) for a in mine)
            continue
        w = {t: float(weights.get(t, 1.0)) for t in teams}
        per_team = _round(water_fill(demand, w, given), demand, given)
        for t, xs in teams.items():
            if per_team[t] == demand[t]:
                out.update((a.sweep, a.want) for a in xs)
                continue
            want = {a.sweep: a.want for a in xs}
            split = water_fill(want, dict.fromkeys(want, 1.0), per_team[t])
            out.update(_round(split, want, per_team[t]))
    return out


def _rank(a: Ask) -> tuple[int, float]:
    return (PRIORITIES.index(a.priority), a.since)


def decide(asks: Sequence[Ask], capacity: int, weights: Mapping[str, float]) -> Decision:
    """Grants of free lanes to sweeps below their targets (highest priority, oldest first),
    then takes from the sweeps furthest above theirs for what free lanes cannot cover."""
    goal = targets(asks, capacity, weights)
    free = capacity - sum(a.held for a in asks)
    coming = sum(a.releasing for a in asks)  # taken already: not taken twice
    grants: list[Grant] = []
    short = 0
    for a in sorted(asks, key=_rank):
        need = goal[a.sweep] - (a.held - a.releasing)
        if need <= 0:
            continue
        n = min(need, max(free, 0))
        if n:
            grants.append(Grant(a.sweep, n))
            free -= n
        short += need - n
    short -= coming
    return Decision(goal, tuple(grants), tuple(_takes(asks, goal, short)))


def _takes(asks: Iterable[Ask], goal: Mapping[str, int], short: int) -> list[Take]:
    over = [(a.held - a.releasing - goal[a.sweep], a) for a in asks]
    over = [(x, a) for x, a in over if x > 0]
    # Furthest above its share first; among equals, the lowest priority, then the newest.
    over.sort(key=lambda xa: (-xa[0], -PRIORITIES.index(xa[1].priority), -xa[1].since))
    out = []
    for x, a in over:
        if short <= 0:
            break
        n = min(x, short)
        out.append(Take(a.sweep, n, at_boundary=not a.preemptible))
        short -= n
    return out


def jain(xs: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one holds everything."""
    xs = [x for x in xs]
    if not xs or not any(xs):
        return 1.0
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
