"""What every stage shares: errors and exit codes, the store's paths, redaction, the
timeline of a sweep, and quiet logging for our dependencies.

Owns: `errors`, `paths`, `redact`, `timeline`, `quietlogs`.
May import: the standard library and third-party packages only; nothing of sweeps.
"""
