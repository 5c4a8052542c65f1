"""`data:`, the spec's data that the search never sees: a locked test split.

`test_fraction` holds out that share of a built-in dataset (its seeded permutation's first
rows, `trainer.data.split_indices`) before the train/validation split; `test_path` names the
test set a BYO entrypoint or program-mode sweep provides. Either is scored once, at promote
time, by `tracking/test_split.py`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from sweeps.spec.params import _Model


class DataSpec(_Model):
    # Share of a built-in dataset locked away as the test split (built-in trainer only).
    test_fraction: float | None = Field(None, gt=0, lt=0.9)
    # BYO / program mode: a .npz file holding arrays `x` (inputs) and `y` (labels or targets).
    test_path: str | None = None

    @field_validator("test_path")
    @classmethod
    def _npz(cls, v: str | None) -> str | None:
        if v is not None and not v.endswith(".npz"):
            raise ValueError("a .npz file holding arrays x and y")
        return v

    @model_validator(mode="after")
    def _one(self) -> DataSpec:
        if self.test_fraction is not None and self.test_path is not None:
            raise ValueError(
                "give test_fraction (built-in data) or test_path (your data), not both"
            )
        return self


def check_data(spec: Any) -> Any:
    """The Spec's check of which hook fits which trainer: sweeps splits its built-in data; your
    code gives a file."""
    data, trainer = spec.data, spec.trainer
    own = bool(trainer.entrypoint) or trainer.command_line is not None
    if own and data.test_fraction is not None:
        raise ValueError(
            "data.test_fraction: only the built-in datasets are split by sweeps; with "
            "trainer.entrypoint or program mode give data.test_path (a .npz with x and y)"
        )
    if not own and data.test_path is not None:
        raise ValueError("data.test_path: for your own code; built-in data uses data.test_fraction")
    return spec
