"""Replicated winners (`evaluate: {top_k, replicates}`), as pure functions: which trials are
rerun, the work items that rerun them, and what their values say (mean, std, 95% interval).

A replicate is not an Optuna trial: the sampler never sees it, so the study's history is the
search's own. Its number (`replicate_number`) and seed are new, so it shares no checkpoint name
or random stream with the trial it reruns. The trial's own value is left out of its mean: it was
chosen for being high (or low), and would bias the mean the way the winner's margin is biased.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# A replicate's number: index * BASE + the trial's number (trial 7's second replicate is
# 2000007). The lanes name checkpoints by number, and the seed comes from it (trial_seed).
REPLICATE_NUMBER_BASE = 1_000_000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Source:
    """A complete trial whose params are replicated."""

    number: int
    params: dict[str, Any]
    value: float
    run_id: str | None = None  # its MLflow run: the replicates' parent


@dataclass(frozen=True)
class WorkItem:
    """One replicate to run: the `index`-th (from 1) of `count` runs of `source`'s params."""

    source: Source
    index: int
    count: int

    @property
    def number(self) -> int:
        return replicate_number(self.source.number, self.index)


@dataclass(frozen=True)
class Stats:
    """What a configuration's replicate values say. std and the interval need two values."""

    n: int
    mean: float | None
    std: float | None
    low: float | None  # the 95% interval of the mean (Student t, n - 1 degrees of freedom)
    high: float | None
    values: tuple[float, ...] = field(default=())

    def text(self, nd: int = 4) -> str:
        """'0.9512 ± 0.0081 (95% CI, n=5)', or why there is no interval."""
        if self.mean is None:
            return "no replicate completed"
        if self.low is None or self.high is None:
            return f"{self.mean:.{nd}f} (n={self.n}, no interval)"
        return f"{self.mean:.{nd}f} ± {(self.high - self.low) / 2:.{nd}f} (95% CI, n={self.n})"


def replicate_number(source_number: int, index: int) -> int:
    """Pure: the number a replicate runs under (see REPLICATE_NUMBER_BASE)."""
    return index * REPLICATE_NUMBER_BASE + source_number


def top_trials(trials: Iterable[Any], maximize: bool, k: int) -> list[Any]:
    """Pure: the k best feasible COMPLETE trials (FrozenTrial-like: state.name, value, number),
    best first; ties go to the earlier trial."""
    done = [t for t in trials if t.state.name == "COMPLETE" and t.value is not None]
    # Outcome constraints (Optuna's FrozenTrial.constraints, > 0 broken): feasible ones only.
    done = [t for t in done if all(v <= 0 for v in getattr(t, "constraints", {}).values())]
    done.sort(key=lambda t: ((-t.value if maximize else t.value), t.number))
    return done[:k]


def plan(sources: Sequence[Source], replicates: int) -> list[WorkItem]:
    """Pure: the work items, round by round (every source's first replicate, then every
    second...): a sweep stopped part way still has replicates of each configuration."""
    return [WorkItem(s, i, replicates) for i in range(1, replicates + 1) for s in sources]


def stats(values: Sequence[float], confidence: float = CONFIDENCE) -> Stats:
    """Pure: mean, sample std (n - 1) and the Student-t interval of the mean."""
    vals = tuple(float(v) for v in values)
    n = len(vals)
    if n == 0:
        return Stats(0, None, None, None, None, vals)
    mean = math.fsum(vals) / n
    if n == 1:
        return Stats(1, mean, None, None, None, vals)
    from scipy import stats as sps

    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1))
    half = float(sps.t.ppf((1 + confidence) / 2, n - 1)) * std / math.sqrt(n)
    return Stats(n, mean, std, mean - half, mean + half, vals)


def ranked(by_number: dict[int, Stats], maximize: bool) -> list[int]:
    """Pure: trial numbers by replicate mean, best first (those without a mean left out)."""
    have = [(s.mean, n) for n, s in by_number.items() if s.mean is not None]
    have.sort(key=lambda x: ((-x[0] if maximize else x[0]), x[1]))  # type: ignore[operator]
    return [n for _, n in have]


def metrics(objective: str, s: Stats) -> dict[str, float]:
    """Pure: the metrics logged on the trial's run: `<objective>_mean`, `_std`, `_n`,
    `_ci95_low`, `_ci95_high` (those that exist)."""
    out = {f"{objective}_n": float(s.n)}
    for key, v in (("mean", s.mean), ("std", s.std), ("ci95_low", s.low), ("ci95_high", s.high)):
        if v is not None:
            out[f"{objective}_{key}"] = v
    return out


def summary(s: Stats, failed: int, seeds: Sequence[int]) -> dict[str, Any]:
    """Pure: the JSON-able record kept on the study (names.replicates_of_trial)."""
    return {
        "values": list(s.values),
        "n": s.n,
        "mean": s.mean,
        "std": s.std,
        "ci95_low": s.low,
        "ci95_high": s.high,
        "confidence": CONFIDENCE,
        "failed": failed,
        "seeds": list(seeds),
    }


def from_summary(d: dict[str, Any]) -> Stats:
    """Pure: a Stats read back from `summary`'s record."""
    return Stats(
        int(d.get("n", 0)),
        d.get("mean"),
        d.get("std"),
        d.get("ci95_low"),
        d.get("ci95_high"),
        tuple(d.get("values") or ()),
    )
