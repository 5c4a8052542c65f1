"""Who may do what on a shared service: `conf/teams.yaml`, one pydantic model.

    admins: [alice]                 # may stop, cancel and resume anyone's sweep
    teams:
      vision: {weight: 2, members: [alice, bob], quota: {usd: 500, period: month}}
      nlp:    {weight: 1, members: [carol]}
    users:
      bob: {quota: {gpu_hours: 200, period: week}}

A user in no team is in `default` (weight 1). The file is optional: without it, every user is
in `default`, and only a sweep's owner may stop, cancel or resume it. `weight` is the team's
fair share of lanes (sweeps/service/fairshare.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from sweeps.common.errors import SpecError
from sweeps.spec.load import format_validation_error, read_yaml
from sweeps.spec.params import _Model

DEFAULT_TEAM = "default"
TEAMS_ENV = "SWEEPS_TEAMS"  # a teams file elsewhere than conf/teams.yaml


class Quota(_Model):
    """What a team or a user may spend per calendar period (UTC; a week starts on Monday)."""

    usd: float | None = Field(None, gt=0)
    gpu_hours: float | None = Field(None, gt=0)
    period: Literal["day", "week", "month"] = "month"

    @model_validator(mode="after")
    def _something(self) -> Quota:
        if self.usd is None and self.gpu_hours is None:
            raise ValueError("a quota needs usd, gpu_hours or both")
        return self


class Team(_Model):
    weight: float = Field(1.0, gt=0)
    members: list[str] = []
    quota: Quota | None = None


class User(_Model):
    quota: Quota | None = None


class Teams(_Model):
    admins: list[str] = []
    teams: dict[str, Team] = {}
    users: dict[str, User] = {}

    def team_of(self, user: str) -> str:
        return next((name for name, t in self.teams.items() if user in t.members), DEFAULT_TEAM)

    def weights(self) -> dict[str, float]:
        return {name: t.weight for name, t in self.teams.items()}

    def may_control(self, caller: str, owner: str | None) -> bool:
        """Whether `caller` may stop, cancel or resume a sweep that `owner` owns (a sweep
        recorded before owners were, with none, is anyone's)."""
        return owner is None or caller == owner or caller in self.admins


def teams_path(root: Path | None = None) -> Path:
    if os.environ.get(TEAMS_ENV):
        return Path(os.environ[TEAMS_ENV])
    return (root or Path.cwd()) / "conf" / "teams.yaml"


def load_teams(path: Path | None = None) -> Teams:
    """The teams file (`SWEEPS_TEAMS`, else conf/teams.yaml here); none there: no teams."""
    p = path or teams_path()
    if not p.is_file():
        if path is not None or os.environ.get(TEAMS_ENV):
            raise SpecError(f"teams file not found: {p}")
        return Teams()
    raw = read_yaml(p, "teams file") or {}
    try:
        return Teams.model_validate(raw)
    except ValidationError as err:
        raise SpecError(f"teams file {p}: {format_validation_error(err)}") from None
