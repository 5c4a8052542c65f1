"""What runs inside a trial, on a Ray Train worker: the API training code calls (`report`,
`get_checkpoint`, `context`, `log`), program mode (the user's process, its group, its metric
collectors).

Owns: `runtime`, `userlog`, `program`, `procgroup`, `collectors/` (one module per metric
collector).
May import: `sweeps.common`, `sweeps.spec`, `sweeps.contracts`.
"""
