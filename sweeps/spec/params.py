"""Search-space parameters of the spec: float, int and categorical, each with an optional `when`.

Kept apart from the rest of the spec tree so the space logic (`sweeps.search.space`) and the
spec share one definition.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
