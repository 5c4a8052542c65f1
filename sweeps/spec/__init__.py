"""The spec: `Spec` (the pydantic model tree), its parameters, and how a YAML file becomes one.

Owns: `models`, `params`, `command`, `load`, the sections kept beside `models`: `data`,
`evaluate`, `retries`, `stop`, `checkpoints`, `model_pick`; and `teams` (conf/teams.yaml:
teams, weights, admins, quotas).
May import: `sweeps.common`.
"""

from sweeps.spec.load import (
    format_validation_error,
    load_spec,
    parse_overrides,
    spec_from_dict,
)
from sweeps.spec.models import (
    COMPUTED_METRICS,
    DATASETS,
    MODELS,
    PRUNERS,
    SAMPLERS,
    SEARCHABLE_RESOURCES,
    TRAINER_METRICS,
    Budget,
    Execution,
    MetricsSpec,
    Objective,
    PrunerSpec,
    Resources,
    SamplerSpec,
    Spec,
    Tracking,
    TrainerSpec,
    WarmStart,
    check_reported,
)
from sweeps.spec.params import HUGE, CategoricalParam, FloatParam, IntParam, Param

__all__ = [
    "COMPUTED_METRICS",
    "DATASETS",
    "HUGE",
    "MODELS",
    "PRUNERS",
    "SAMPLERS",
    "SEARCHABLE_RESOURCES",
    "TRAINER_METRICS",
    "Budget",
    "CategoricalParam",
    "Execution",
    "FloatParam",
    "IntParam",
    "MetricsSpec",
    "Objective",
    "Param",
    "PrunerSpec",
    "Resources",
    "SamplerSpec",
    "Spec",
    "TrainerSpec",
    "Tracking",
    "WarmStart",
    "check_reported",
    "format_validation_error",
    "load_spec",
    "parse_overrides",
    "spec_from_dict",
]
