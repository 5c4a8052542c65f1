"""Whether one more lane should start beside lanes already running trials: a pure function of
the work left, what a start takes, and the CPUs it takes from the running trials meanwhile.

A lane's start is CPU-bound (Ray Train's controller and each worker are fresh processes
importing Ray and torch, ~1 core each for seconds). Measured on the warm service (2 CPUs, the
quickstart, issue 30): a sweep that adopted one idle lane and started a second beside it at
once had its first trial train in 3.3-5.8 s instead of 0.9 s, and its 4 trials summed 9.4 s of
trial time against 2.5 s; the second lane ran none of them.
"""

from __future__ import annotations

import math

# A lane's start on 2 CPUs (11.6 s measured, FIELD-NOTES): the figure used where this driver
# started no lane itself yet (it adopted warm ones) and so has no start of its own to go by.
START_S_GUESS = 10.0


def start_pays(
    left: int,
    lanes: int,
    trial_s: float,
    start_s: float | None,
    cpus: float = math.inf,
    busy: float = 0.0,
    draw: float = 0.0,
) -> bool:
    """Pure: whether starting one more lane ends the `left` trials not yet begun sooner than
    the `lanes` already running would alone.

    `trial_s`: the longest a trial of the sweep has run yet (it grows while a long one runs);
    `start_s`: what a start took here (None: none started yet); `cpus`: the cluster's;
    `busy`: the CPUs the running lanes' trials use; `draw`: what starting lanes take (their
    processes), this one's included. Where busy + draw exceed `cpus`, the running trials get
    cpus / (busy + draw) of their CPU for the length of the start: that work is counted as
    not done, and a start pays only if the lanes then finish the rest sooner together."""
    if left <= 0:
        return False
    if lanes <= 0:
        return True  # nothing runs: the first lane always starts
    load = busy + draw
    contended = load > cpus
    if start_s is None:
        if not contended:
            return True  # nothing known of a start, and it takes nothing from the trials
        start_s = START_S_GUESS
    share = min(1.0, cpus / load) if load > 0 else 1.0
    work = left * trial_s
    done_meanwhile = lanes * share * start_s  # trial-seconds the running lanes get through
    if work <= done_meanwhile:
        return False  # they finish during the start anyway: the start only slowed them
    alone = work / lanes
    together = start_s + (work - done_meanwhile) / (lanes + 1)
    return together < alone
