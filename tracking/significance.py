"""Is a challenger's gain real? The promotion gate's statistics, as pure functions.

With replicates on both sides (each configuration rerun with new seeds), the gate is Welch's
t-test (`scipy.stats.ttest_ind(equal_var=False)`), one-sided in the objective's direction: the
null hypothesis is "the challenger's mean beats the champion's by at most `min_effect`", and
the alias moves only when p < `alpha`. Without replicates on both sides there is nothing to
test: the gate compares the two single values, as it always did, and says so.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

from sweeps.common import names

ALPHA = 0.05  # the default significance level of `promote --if-better`
TEST = "welch"  # the one test sweeps runs; its name goes on the version


@dataclass(frozen=True)
class Verdict:
    """One gate decision: whether the challenger is better, how that was decided, and why."""

    better: bool
    method: str  # "welch" (a t-test on replicates) or "single" (two single values compared)
    reason: str
    p_value: float | None = None
    gain: float | None = None  # mean(challenger) - mean(champion), signed so > 0 is better
    alpha: float = ALPHA
    min_effect: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gain(challenger: float, champion: float, direction: str) -> float:
    return challenger - champion if direction == "maximize" else champion - challenger


def welch(
    challenger: list[float],
    champion: list[float],
    direction: str,
    *,
    alpha: float = ALPHA,
    min_effect: float = 0.0,
) -> Verdict:
    """Pure: Welch's one-sided t-test of "challenger beats champion by more than `min_effect`".

    Both samples need two values or more. Samples with no spread on either side and the same
    means give no evidence (p = 1): the gate keeps the champion."""
    from scipy.stats import ttest_ind

    if len(challenger) < 2 or len(champion) < 2:
        raise ValueError("Welch's t-test needs at least 2 replicate values on each side")
    gain = _gain(_mean(challenger), _mean(champion), direction)
    # Shift the challenger by the minimum effect toward "worse": the test then asks whether
    # the gain exceeds min_effect, not merely zero.
    shift = -min_effect if direction == "maximize" else min_effect
    shifted = [v + shift for v in challenger]
    alternative = "greater" if direction == "maximize" else "less"
    with warnings.catch_warnings():  # nearly equal samples: scipy warns, p says it anyway
        warnings.simplefilter("ignore", RuntimeWarning)
        res = ttest_ind(shifted, champion, equal_var=False, alternative=alternative)
    p = float(res.pvalue)
    if math.isnan(p):  # no spread and equal means: nothing says the challenger is better
        p = 1.0
    better = p < alpha and gain > min_effect
    stats = (
        f"Welch's t-test, n={len(challenger)} vs {len(champion)}, mean gain {gain:+.4g}"
        + (f" (minimum effect {min_effect:g})" if min_effect else "")
        + f", p={p:.3g} {'<' if p < alpha else '>='} {alpha:g}"
    )
    verb = "beats" if better else "does not significantly beat"
    reason = (
        f"challenger mean {_mean(challenger):.6g} {verb} holder mean {_mean(champion):.6g} "
        f"({direction}; {stats})"
    )
    return Verdict(
        better, TEST, reason if better else f"kept: {reason}", p, gain, alpha, min_effect
    )


def single(
    challenger: float, champion: float, direction: str, *, min_effect: float = 0.0
) -> Verdict:
    """Pure: two single values, compared as they are (no test: there are no replicates)."""
    gain = _gain(challenger, champion, direction)
    better = gain > min_effect
    extra = f" by more than {min_effect:g}" if min_effect else ""
    verb = "beats" if better else "does not beat"
    reason = (
        f"challenger {challenger:.6g} {verb} holder {champion:.6g}{extra} ({direction}; "
        "compared single values: no replicates on both sides, no significance test)"
    )
    return Verdict(
        better, "single", reason if better else f"kept: {reason}", None, gain, 0.0, min_effect
    )


def gate(
    challenger: float,
    champion: float,
    direction: str,
    samples: tuple[list[float] | None, list[float] | None],
    *,
    alpha: float = ALPHA,
    min_effect: float = 0.0,
) -> Verdict:
    """Pure: Welch's test when both sides have replicates (2+ values), else single values."""
    ch, champ = samples
    if ch is not None and champ is not None and len(ch) >= 2 and len(champ) >= 2:
        return welch(ch, champ, direction, alpha=alpha, min_effect=min_effect)
    return single(challenger, champion, direction, min_effect=min_effect)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def parse_samples(raw: str | None) -> list[float] | None:
    """Pure: a JSON list of numbers (as a tag holds it), else None."""
    if not raw:
        return None
    try:
        values = json.loads(raw)
    except ValueError:
        return None
    if isinstance(values, dict):  # {"values": [...], ...}: a replicate summary
        values = values.get("values")
    if not isinstance(values, list) or not values:
        return None
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return None


def replicate_values(run: Any) -> list[float] | None:
    """The objective's replicate values recorded on a trial's MLflow run (item: `evaluate`
    replicates), or None when the trial was not replicated."""
    return parse_samples(run.data.tags.get(names.REPLICATE_VALUES))


def version_tags(
    verdict: Verdict, challenger: list[float] | None, champion: list[float] | None
) -> dict[str, str]:
    """The gate's record on the new version: the decision's test, its p-value, both samples."""
    tags = {names.GATE_TEST: verdict.method, names.GATE_ALPHA: repr(verdict.alpha)}
    if verdict.p_value is not None:
        tags[names.GATE_P_VALUE] = repr(verdict.p_value)
    if verdict.min_effect:
        tags[names.GATE_MIN_EFFECT] = repr(verdict.min_effect)
    if challenger is not None:
        tags[names.SAMPLES] = json.dumps(challenger)
    if champion is not None:
        tags[names.HOLDER_SAMPLES] = json.dumps(champion)
    return tags
