"""Optuna's RDB schema as the plain SQL that reads it, for reads that need no Optuna import.

`show` and `ls` read a study with a few SELECTs (`search/bulk.py`, `search/sql_rows.py`).
Through Optuna's ORM models that costs `import optuna` and `sqlalchemy.orm` first, 0.3 s of a
command that should answer in one. The statements name the tables and columns as Optuna's models
declare them (`optuna/storages/_rdb/models.py` at schema revision SCHEMA_HEAD: an enum column
holds its member's name); below them are the three conversions Optuna applies on reading: a
value's type, a param's external form and a trial's state. tests/test_big_sweeps.py and
tests/test_bulk_reads.py check them against Optuna's own read of the same database.
`{key}` stands for the attribute tables' `key` column as the backend quotes it (`Rows.key`).
"""

from __future__ import annotations

import enum
import json
from typing import Any

# alembic's revision of the schema these statements read (the Optuna releases that
# `search/study.py` OPTUNA_TESTED names).
SCHEMA_HEAD = "v3.2.0.a"

REVISION = "SELECT version_num FROM alembic_version"
STUDY_NAMES = "SELECT study_name FROM studies ORDER BY study_id"
STUDY_ID = "SELECT study_id FROM studies WHERE study_name = :name"
DIRECTIONS = "SELECT direction FROM study_directions WHERE study_id = :sid ORDER BY objective"
STUDY_ATTRS = "SELECT {key}, value_json FROM study_user_attributes WHERE study_id = :sid"
_IDS = "trial_id IN (SELECT trial_id FROM trials WHERE study_id = :sid)"
TRIALS = (
    "SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials"
    " WHERE study_id = :sid ORDER BY trial_id"
)
VALUES = f"SELECT trial_id, objective, value, value_type FROM trial_values WHERE {_IDS}"
PARAMS = (
    "SELECT trial_id, param_name, param_value, distribution_json FROM trial_params"
    f" WHERE {_IDS} ORDER BY param_id"
)
USER_ATTRS = f"SELECT trial_id, {{key}}, value_json FROM trial_user_attributes WHERE {_IDS}"
SYSTEM_ATTRS_LIKE = (
    f"SELECT trial_id, {{key}}, value_json FROM trial_system_attributes WHERE {_IDS}"
    " AND {key} LIKE :like"
)

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
