"""The local service (`sweeps up` / `down`): a Ray head with the Jobs API, the MLflow UI, the
processes it starts and stops, the zygote that forks submitted drivers, and the arbiter's
policy (`fairshare`: pure, which sweep holds how many lanes).

Owns: `local`, `daemons`, `zygote`, `sweephost` (submitted sweeps forked by the zygote, without
a Ray Job), `fairshare`.
May import: every layer below: `common`, `spec`, `contracts`, `worker`, `trainer`,
`tracking`, `search`.
"""
