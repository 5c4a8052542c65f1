"""Optuna's RDB schema as plain SQLAlchemy Core tables, for reads that need no Optuna import.

`show` and `ls` read a study with a few SELECTs (`search/bulk.py`). Through Optuna's ORM
models that costs `import optuna` and `sqlalchemy.orm` first, 0.3 s of a command that should
answer in one. These tables name the columns those reads use, as Optuna's models declare them
(`optuna/storages/_rdb/models.py` at schema revision SCHEMA_HEAD: an enum column holds its
member's name), and the three conversions Optuna applies on reading: a value's type, a param's
external form and a trial's state. tests/test_big_sweeps.py checks them against Optuna's own
read of the same database.
"""

from __future__ import annotations

import enum
import json
from typing import Any

import sqlalchemy as sa

# alembic's revision of the schema these tables describe (the Optuna releases that
# `search/study.py` OPTUNA_TESTED names).
SCHEMA_HEAD = "v3.2.0.a"

_md = sa.MetaData()
_id = sa.Integer
studies = sa.Table("studies", _md, sa.Column("study_id", _id), sa.Column("study_name", sa.String))
directions = sa.Table(
    "study_directions",
    _md,
    sa.Column("study_id", _id),
    sa.Column("direction", sa.String),
    sa.Column("objective", _id),
)
study_attrs = sa.Table(
    "study_user_attributes",
    _md,
    sa.Column("study_id", _id),
    sa.Column("key", sa.String),
    sa.Column("value_json", sa.Text),
)
trials = sa.Table(
    "trials",
    _md,
    sa.Column("trial_id", _id),
    sa.Column("number", _id),
    sa.Column("study_id", _id),
    sa.Column("state", sa.String),
    sa.Column("datetime_start", sa.DateTime),
    sa.Column("datetime_complete", sa.DateTime),
)
values = sa.Table(
    "trial_values",
    _md,
    sa.Column("trial_id", _id),
    sa.Column("objective", _id),
    sa.Column("value", sa.Float),
    sa.Column("value_type", sa.String),
)
params = sa.Table(
    "trial_params",
    _md,
    sa.Column("param_id", _id),
    sa.Column("trial_id", _id),
    sa.Column("param_name", sa.String),
    sa.Column("param_value", sa.Float),
    sa.Column("distribution_json", sa.Text),
)


def _attrs(name: str) -> sa.Table:
    return sa.Table(
        name,
        _md,
        sa.Column("trial_id", _id),
        sa.Column("key", sa.String),
        sa.Column("value_json", sa.Text),
    )


trial_attrs = _attrs("trial_user_attributes")
trial_system_attrs = _attrs("trial_system_attributes")
alembic_version = sa.Table("alembic_version", _md, sa.Column("version_num", sa.String))

# Optuna's TrialState and StudyDirection by name: what `show` and `ls` read of them.
State = enum.Enum("State", "RUNNING COMPLETE PRUNED FAIL WAITING")
Direction = enum.Enum("Direction", "NOT_SET MINIMIZE MAXIMIZE")


def state(stored: Any) -> Any:
    """A trial's state: the enum member Optuna stored by name (`.name` as Optuna's)."""
    return State[getattr(stored, "name", stored)]


def value(stored: float | None, kind: Any) -> float:
    """`TrialValueModel.stored_repr_to_value`: infinities are stored as a type, no number."""
    kind = getattr(kind, "name", kind)
    if kind == "INF_POS":
        return float("inf")
    if kind == "INF_NEG":
        return float("-inf")
    return stored  # type: ignore[return-value]


class Params:
    """A param's external value from its stored float and distribution JSON, as Optuna's
    `json_to_distribution(dist).to_external_repr(value)`, one JSON parse per distribution."""

    def __init__(self) -> None:
        self._kinds: dict[str, tuple[str, Any]] = {}

    def external(self, dist_json: str, stored: float) -> Any:
        kind = self._kinds.get(dist_json)
        if kind is None:
            kind = self._kinds[dist_json] = _kind(dist_json)
        how, arg = kind
        if how == "choice":
            return arg[int(stored)]
        if how == "int":
            return int(stored)
        if how == "float":
            return stored
        return arg.to_external_repr(stored)


def _kind(dist_json: str) -> tuple[str, Any]:
    d = json.loads(dist_json)
    name = d.get("name", d.get("type"))
    attrs = d.get("attributes", d)
    if name in ("CategoricalDistribution", "categorical"):
        return "choice", tuple(attrs["choices"])
    if name in ("IntDistribution", "IntUniformDistribution", "IntLogUniformDistribution", "int"):
        return "int", None
    if name in (
        "FloatDistribution",
        "UniformDistribution",
        "LogUniformDistribution",
        "DiscreteUniformDistribution",
        "float",
    ):
        return "float", None
    from optuna.distributions import json_to_distribution  # one this module does not know

    return "optuna", json_to_distribution(dist_json)
