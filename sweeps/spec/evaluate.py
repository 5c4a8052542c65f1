"""`evaluate:`, what runs after the search: the top_k complete trials' params again, each
`replicates` times with new seeds, on the search's lanes (sweeps/driver/replicate_runs.py).

The replicates are not Optuna trials (the sampler never sees them): they are extra work items,
so their mean and 95% interval say how much of a winner's margin was its seed.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sweeps.spec.params import _Model


class EvaluateSpec(_Model):
    top_k: int = Field(3, ge=1, le=100)  # how many of the best complete trials are replicated
    # Runs of each with new seeds; two at least, for a standard deviation and an interval.
    replicates: int = Field(5, ge=2, le=100)


def check_evaluate(spec: Any) -> Any:
    """The Spec's check: replicates rank one objective, on lanes of the search's one shape."""
    ev = spec.evaluate
    if ev is None:
        return spec
    if spec.objectives:
        raise ValueError(
            "evaluate: replicates rank one objective by its mean; a multi-objective sweep has "
            "a Pareto front, not a ranking"
        )
    searched = sorted(p for p in spec.search_space if p.startswith("resources."))
    if searched:
        raise ValueError(
            f"evaluate: replicates run on the search's lanes, of one shape; searched resources "
            f"({', '.join(searched)}) are not supported with evaluate"
        )
    return spec
