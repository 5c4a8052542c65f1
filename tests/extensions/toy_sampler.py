"""A search strategy as a newcomer writes one: Optuna's documented BaseSampler."""

from typing import Any

import optuna


class LowestSampler(optuna.samplers.BaseSampler):
    """Every parameter at its lowest value (or first choice), `shift` steps of 0.1 above."""

    def __init__(self, shift: int = 0, seed: int | None = None) -> None:
        self.shift = shift

    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: Any, trial: Any, name: str, dist: Any) -> Any:
        if isinstance(dist, optuna.distributions.CategoricalDistribution):
            return dist.choices[0]
        return dist.low + 0.1 * self.shift
