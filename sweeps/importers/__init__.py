"""Other tools' configs and programs, as those tools run them: W&B sweeps and legacy AI
Platform jobs become specs.

Owns: `wandb`, `aiplatform`.
May import: every layer below: `common`, `spec`, `contracts`, `worker`, `trainer`,
`tracking`, `search`, `service`, `execution`.
"""
