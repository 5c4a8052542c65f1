"""The local service (`sweeps up` / `down`): a Ray head with the Jobs API, the MLflow UI, the
processes it starts and stops, and the zygote that forks submitted drivers.

Owns: `local`, `daemons`, `zygote`.
May import: every layer below: `common`, `spec`, `contracts`, `worker`, `trainer`,
`tracking`, `search`.
"""
