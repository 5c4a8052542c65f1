"""The best configuration by its replicates' mean (`evaluate: {top_k, replicates}`).

Replicates run after the search, outside the study, and their summary is kept on the study
(`names.replicates_of_trial`). Once any trial has one, the sweep's best is the replicated trial
with the best mean: the single-seed maximum is biased upward by the noise it was chosen for.
`show`, `promote` and the report rank the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sweeps.common import names
from sweeps.search.constraints import violated


def replicate_means(attrs: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """Pure: trial number -> its replicate record, for records with a mean."""
    out = {}
    for key, rec in attrs.items():
        if not key.startswith(names.REPLICATES_OF_TRIAL_PREFIX) or not isinstance(rec, dict):
            continue
        if rec.get("mean") is not None:
            out[int(key.removeprefix(names.REPLICATES_OF_TRIAL_PREFIX))] = rec
    return out


def best_by_replicates(attrs: Mapping[str, Any], trials: Iterable[Any], maximize: bool) -> Any:
    """Pure: the feasible COMPLETE trial whose replicates have the best mean (ties: the
    earlier trial), or None when no trial has replicates."""
    means = replicate_means(attrs)
    pool = [
        t for t in trials if t.number in means and t.state.name == "COMPLETE" and not violated(t)
    ]
    if not pool:
        return None
    pool.sort(key=lambda t: t.number)
    return (max if maximize else min)(pool, key=lambda t: means[t.number]["mean"])
