"""The driver: the loop that serves the lanes and is the only writer to Optuna and MLflow.
`assemble` builds a sweep's parts from its spec and runs the loop; the book keeps the trials,
policies decide the budget, the state machine the sweep's ending, recovery takes over a dead
driver's trials.

Owns: `assemble`, `loop`, `book`, `state`, `policies`, `recovery`, `summary`, `signals`,
`trial_config`, `trial_logs`, and the policies on trials' lives: `convergence` (stop_when),
`retries`, `pause`, `extend`, `replicates` / `replicate_runs` (evaluate), `retention` /
`retainer` (checkpoints kept).
May import: every layer below: `common`, `spec`, `contracts`, `worker`, `trainer`,
`tracking`, `search`, `service`, `execution`, `importers`.
"""
