"""What every stage shares: errors and exit codes, the store's paths, redaction, the
timeline of a sweep, quiet logging for our dependencies, and `names`: the registry of every
name sweeps writes into Optuna and MLflow, every module it names as a string, and the tables
of extensions (metric collectors, importers, samplers and pruners).

Owns: `errors`, `paths`, `redact`, `timeline`, `quietlogs`, `names`, `words`,
`extras`.
May import: the standard library and third-party packages only; nothing of sweeps.
"""
