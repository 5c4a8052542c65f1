"""The Optuna side: the study (the one adapter over Optuna's private names), samplers and
pruners, the search space, warm starts, selecting the best trial, drivers' heartbeats and stop
requests, and how a storage outage is met.

Owns: `study`, `samplers`, `space`, `warmstart`, `select`, `liveness`, `trial_attrs`, `outage`,
`reuse` (what running a spec under an existing sweep's name would do), `owners` (whose sweep
it is, and who may stop it), `quota` (spend per team and user, and what a quota lets run),
`constraints`, `terminator` (Optuna's, adapted), `tpe` (TPE with a bounded history), `bulk`
(the study's bulk reads), `reader`, `optuna_tables` and `sql_rows` (a study read without
Optuna; a SQLite file without SQLAlchemy).
May import: `sweeps.common`, `sweeps.spec`, `sweeps.contracts`, `sweeps.worker`, `trainer`,
`tracking`.
"""
