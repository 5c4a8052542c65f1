"""The spec's `retries`: which failures of a trial run its params again, and how often."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from sweeps.spec.params import _Model

RETRY_CAUSES = ("worker_lost", "oom", "signal", "timeout", "exception")


class Retries(_Model):
    """Transient failures run again with the same params, from the last checkpoint."""

    max: int = Field(0, ge=0, le=100)  # retries of one trial's params (0: none)
    on: list[Literal["worker_lost", "oom", "signal", "timeout", "exception"]] = [
        "worker_lost",
        "oom",
        "signal",
        "timeout",
    ]

    @model_validator(mode="before")
    @classmethod
    def _yaml_on(cls, v: Any) -> Any:
        """YAML 1.1 reads a bare `on:` key as the boolean True: it means `on`."""
        if isinstance(v, dict) and True in v:
            v = {("on" if k is True else k): x for k, x in v.items()}
        return v
