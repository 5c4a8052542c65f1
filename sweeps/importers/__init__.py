"""Other tools' configs and programs, as those tools run them: W&B sweeps and legacy AI
Platform jobs become specs.

Owns: `base` (the Importer base class), `wandb`, `aiplatform`; `sweeps.common.names.IMPORTERS`
lists them for `sweeps import NAME FILE`.
May import: every layer below: `common`, `spec`, `contracts`, `worker`, `trainer`,
`tracking`, `search`, `service`, `execution`.
"""
