"""The Optuna side: the study (the one adapter over Optuna's private names), samplers and
pruners, the search space, warm starts, selecting the best trial, drivers' heartbeats and stop
requests, and how a storage outage is met.

Owns: `study`, `samplers`, `space`, `warmstart`, `select`, `liveness`, `trial_attrs`, `outage`,
`reuse` (what running a spec under an existing sweep's name would do).
May import: `sweeps.common`, `sweeps.spec`, `sweeps.contracts`, `sweeps.worker`, `trainer`,
`tracking`.
"""
