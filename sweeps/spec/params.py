"""Search-space parameters of the spec: float, int and categorical, each with an optional `when`.

Kept apart from the rest of the spec tree so the space logic (`sweeps.search.space`) and the
spec share one definition.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sweeps.common.errors import SpecError

# Values past this are typos (1e400 epochs), not intentions; bounding them keeps a bad spec from
# turning into an hour-long allocation.
HUGE = 1e12


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


Scalar = str | int | float | bool


class _ParamBase(_Model):
    # `when: {optimizer: sgd}` makes the parameter exist only when another one has that value
    # (or one of a list of values): a conditional search space.
    when: dict[str, Scalar | list[Scalar]] | None = None


class FloatParam(_ParamBase):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = None

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        for v in (self.low, self.high):
            if not math.isfinite(v) or abs(v) > HUGE:
                raise ValueError(f"bounds must be finite numbers below {HUGE:g}")
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be < high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("log scale needs low > 0")
        if self.step is not None and (self.step <= 0 or self.log):
            raise ValueError("step must be > 0 and cannot be combined with log")
        return self


class IntParam(_ParamBase):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = 1

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        if abs(self.low) > HUGE or abs(self.high) > HUGE:
            raise ValueError(f"bounds must be below {HUGE:g}")
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be < high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("log scale needs low > 0")
        if self.step <= 0 or (self.log and self.step != 1):
            raise ValueError("step must be > 0 (and 1 with log)")
        return self


class CategoricalParam(_ParamBase):
    type: Literal["categorical"]
    choices: list[Scalar | None]

    @field_validator("choices")
    @classmethod
    def _non_empty(cls, v: list[Any]) -> list[Any]:
        if not v:
            raise ValueError("choices must not be empty")
        if len({repr(c) for c in v}) != len(v):
            raise ValueError("choices must be distinct")
        return v


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


def _outside(p: FloatParam | IntParam | CategoricalParam, v: Any) -> str | None:
    """Why `v` is not a value `p` can take (None when it is)."""
    if isinstance(p, CategoricalParam):
        same = [c for c in p.choices if c == v and isinstance(c, bool) == isinstance(v, bool)]
        return None if same else f"{v!r} is not among its choices {p.choices}"
    number = isinstance(v, int | float) and not isinstance(v, bool)
    if isinstance(p, IntParam) and not (number and float(v).is_integer()):
        return f"{v!r} is not an integer"
    if not number or not math.isfinite(v):
        return f"{v!r} is not a number"
    if not p.low <= v <= p.high:
        return f"{v!r} is outside its range [{p.low}, {p.high}]"
    step = p.step
    if step and not p.log and not math.isclose((v - p.low) / step, round((v - p.low) / step)):
        return f"{v!r} is not on its grid (low {p.low}, step {step})"
    return None


def check_enqueued(space: dict[str, Any], rows: list[dict[str, Any]], where: str) -> None:
    """Configurations to try first must lie in the search space: an unknown name, or a value
    out of range, of the wrong type or not a choice, is one line (Optuna would warn and run
    something else)."""
    import difflib

    for i, row in enumerate(rows):
        at = f"{where}[{i}]" if len(rows) > 1 else where
        for key, v in row.items():
            p = space.get(key)
            if p is None:
                close = difflib.get_close_matches(key, list(space), n=1)
                hint = f"did you mean '{close[0]}'?" if close else f"it has {', '.join(space)}"
                raise SpecError(f"{at}: '{key}' is not in the search space; {hint}")
            why = _outside(p, v)
            if why:
                raise SpecError(f"{at}: {key}: {why}")
