"""The contracts between the stages: the driver-worker protocol, the records the driver keeps
of trials and sweeps, and the tracker and observer interfaces.

Owns: `protocol` (events, answers, keys), `records` (TrialRecord, SweepContext, ...),
`observers` (Tracker, SweepObserver, ObserverManager).
May import: `sweeps.common`, `sweeps.spec`.
"""
