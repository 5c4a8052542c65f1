"""A sweep's summary from its study: trials by state, the best trial, and the final word on
how it ended (a sweep whose every trial failed did not finish, whatever stopped it)."""

from __future__ import annotations

from typing import Any

from sweeps.common import names
from sweeps.common.errors import error_summary
from sweeps.contracts.records import SweepSummary
from sweeps.search.constraints import best_feasible, none_feasible


def counts(study: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


def counts_text(c: dict[str, int]) -> str:
    """'complete 9, pruned 3': the counts as the terminal and the driver's log show them."""
    return ", ".join(f"{k.lower()} {v}" for k, v in sorted(c.items())) or "no trials"


def ending_text(state: str, reason: str | None) -> str:
    """'finished (budget reached: 4/4 trials)'; a reason that already starts with the state
    ('interrupted (Ctrl-C): ...') is not wrapped in it again."""
    if not reason:
        return state
    return reason if reason.startswith(state) else f"{state} ({reason})"


def summarize(study: Any, name: str, state: Any, book: Any, wall_s: float) -> SweepSummary:
    """The summary of a sweep that ended in `state`; spend is this driver's (the book's)."""
    c = counts(study)
    best_n = best_v = None
    if len(study.directions) == 1 and c.get("COMPLETE"):
        maximize = study.direction.name == "MAXIMIZE"
        best = best_feasible(study.get_trials(deepcopy=False), maximize)
        if best is not None:  # the best trial is the best feasible one
            best_n, best_v = best.number, best.value
    spend = book.spend()
    attrs = study.user_attrs
    requeued, warm = int(attrs.get(names.REQUEUED, 0)), int(attrs.get(names.WARM_COUNT, 0))
    return SweepSummary(
        name,
        state.name,
        explain_uncounted(state.reason, c, requeued, warm),
        c,
        best_n,
        best_v,
        wall_s,
        cost_usd=spend.cost_usd,
        gpu_hours=spend.gpu_hours,
        trial_seconds=spend.trial_seconds,
    )


def all_failed(c: dict[str, int], first_error: str) -> str | None:
    """Pure: why a sweep is failed because every trial of its study failed, or None."""
    if not c.get("FAIL") or c.get("COMPLETE") or c.get("PRUNED"):
        return None
    first = error_summary(first_error) or "see `sweeps show`"
    every = "the only trial" if c["FAIL"] == 1 else f"all {c['FAIL']} trials"
    return f"{every} failed; first error: {first}"


def record(study: Any, s: SweepSummary) -> None:
    """How the sweep ended, kept in the study for `ls` / `show`. Wall time is not kept here:
    each driver's session is (`sweeps.common.figures`), so a driver killed before this point
    still counts, and one that ran no trial does not."""
    study.set_user_attr(names.STATE, s.state)
    study.set_user_attr(names.STOP_REASON, s.reason)


def explain_uncounted(reason: str, c: dict[str, int], requeued: int, warm: int) -> str:
    """Pure: 'budget reached: 4/4 trials' next to 5 trials in all says why one is not counted:
    a recovery re-queued a trial its dead driver left running (the re-queued trial continues
    it), or a warm start copied finished trials in. Neither uses budget."""
    if not reason.startswith("budget reached") or requeued + warm <= 0:
        return reason
    total = sum(n for state, n in c.items() if state != "WAITING")
    why = [f"{requeued} re-queued"] if requeued else []
    why += [f"{warm} copied by warm start"] if warm else []
    return f"{reason} ({total} trials in all; not counted: {', '.join(why)})"


def conclude(study: Any, name: str, status: Any, book: Any, wall_s: float) -> SweepSummary:
    """Settle the sweep's terminal state (`status.end`) and summarize it."""
    failed = all_failed(counts(study), book.first_error())
    failed = failed or none_feasible(study.get_trials(deepcopy=False))
    return summarize(study, name, status.end(failed), book, wall_s)
