"""Population-based training's policy, pure: rank, exploit, explore (Ray Tune's
`PopulationBasedTraining`: `_quantiles`, `_checkpoint_or_exploit`, `_explore`).

Ray's semantics, kept: the members ranked are those with a latest result that have not
finished; the bottom and top groups hold ceil(n * quantile) members each, at most floor(n / 2);
a bottom member clones a top member drawn uniformly and explores its params: each perturbed
parameter is resampled from its distribution with `resample_probability`, else multiplied by a
factor drawn uniformly (an int is rounded; a categorical one shifts to a neighbouring choice,
or is resampled when its value is not a choice). Where this differs: a perturbed value is
clipped into its search_space range (and onto its step), because Optuna records every value
inside its distribution; Ray leaves a multiplied value unbounded.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from sweeps.spec.params import CategoricalParam, FloatParam, IntParam


@dataclass(frozen=True)
class Choice:
    """What a member does at its interval: continue its own checkpoint (clone is None), or
    continue `clone`'s, with `params` (explored) and `ops` (how each was changed)."""

    member: int
    clone: int | None
    params: dict[str, Any]
    ops: dict[str, str]


def quantiles(scores: dict[int, float], fraction: float, maximize: bool) -> tuple[list, list]:
    """Pure: (bottom, top) members by score, as Ray's `_quantiles` (ties keep member order);
    empty when fewer than two members have a score."""
    ranked = [m for m in sorted(scores) if not math.isnan(scores[m])]
    ranked.sort(key=lambda m: scores[m] if maximize else -scores[m])  # worst first
    if len(ranked) <= 1:
        return [], []
    k = int(math.ceil(len(ranked) * fraction))
    if k > len(ranked) / 2:
        k = int(math.floor(len(ranked) / 2))
    return ranked[:k], (ranked[-k:] if k else [])


def decide(
    member: int,
    params: dict[int, dict[str, Any]],
    scores: dict[int, float],
    fraction: float,
    maximize: bool,
    explore: Any,
    rng: random.Random,
) -> Choice:
    """Pure: `member`'s next segment. `params`: each member's latest params; `explore`: a
    function (params, rng) -> (params, ops)."""
    bottom, top = quantiles(scores, fraction, maximize)
    if member not in bottom or not top:
        return Choice(member, None, dict(params[member]), {})
    clone = rng.choice(top)
    new, ops = explore(params[clone], rng)
    return Choice(member, clone, new, ops)


def explore(
    config: dict[str, Any],
    perturb: dict[str, Any],
    space: dict[str, Any],
    resample_probability: float,
    rng: random.Random,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Pure: Ray's `_explore` over the `perturb` parameters of `config`."""
    new, ops = dict(config), {}
    for key, how in perturb.items():
        p = space[key]
        if isinstance(p, CategoricalParam):
            choices = list(p.choices)
            if rng.random() < resample_probability or config.get(key) not in choices:
                new[key], ops[key] = rng.choice(choices), "resample"
                continue
            shift = rng.choice([-1, 1])
            old = choices.index(config[key])
            idx = min(max(old + shift, 0), len(choices) - 1)
            new[key] = choices[idx]
            side = "left" if shift == -1 else "right"
            ops[key] = f"shift {side}{' (noop)' if idx == old else ''}"
        elif rng.random() < resample_probability:
            new[key], ops[key] = sample(p, rng), "resample"
        else:
            factor = rng.choice(list(how))
            new[key], ops[key] = clip(p, config[key] * factor), f"* {factor}"
    return new, ops


def sample(p: FloatParam | IntParam, rng: random.Random) -> float | int:
    """Pure: a draw from the parameter's distribution (log-uniform where `log`)."""
    if p.log:
        v = math.exp(rng.uniform(math.log(p.low), math.log(p.high)))
    else:
        v = rng.uniform(p.low, p.high)
    return clip(p, v)


def clip(p: FloatParam | IntParam, v: float) -> float | int:
    """Pure: `v` inside [low, high], on the parameter's step; an int param's value rounded."""
    v = min(max(v, p.low), p.high)
    step = p.step if not p.log else None
    if step:
        v = p.low + round((v - p.low) / step) * step
        v = min(v, p.high)
    if isinstance(p, IntParam):
        return int(round(v))
    return float(round(v, 12)) if step else float(v)


def segment_end(start_step: int, interval: int, epochs: int) -> int:
    """Pure: the epoch a segment starting after `start_step` trains to."""
    return min(start_step + interval, epochs)
