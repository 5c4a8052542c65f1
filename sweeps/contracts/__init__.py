"""The contracts between the stages: the driver-worker protocol, the records the driver keeps
of trials and sweeps, the tracker and observer interfaces, and the registry of every name sweeps
writes into Optuna and MLflow.

Owns: `protocol` (events, answers, keys), `records` (TrialRecord, SweepContext, ...),
`observers` (Tracker, SweepObserver, ObserverManager), `names`.
May import: `sweeps.common`, `sweeps.spec`.
"""
