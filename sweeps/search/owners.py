"""Whose sweep it is: the owner and team on the study, and who may stop, cancel or resume it.

The owner is recorded once, by whichever side first writes the study (`submit`, or the driver
of `sweeps run`), and never changed by a later driver (a resume by an admin keeps it).
"""

from __future__ import annotations

from typing import Any

from sweeps.common import identity, names
from sweeps.common.errors import SpecError
from sweeps.spec.teams import Teams, load_teams


def record(study: Any, teams: Teams | None = None) -> tuple[str, str]:
    """The study's owner and team, written now where none is recorded yet."""
    attrs = study.user_attrs
    owner = attrs.get(names.OWNER)
    if owner:
        return str(owner), str(attrs.get(names.TEAM) or "")
    owner = identity.owner()
    team = (teams or load_teams()).team_of(owner)
    study.set_user_attr(names.OWNER, owner)
    study.set_user_attr(names.TEAM, team)
    return owner, team


def check_control(study: Any, action: str, teams: Teams | None = None) -> None:
    """Refuse (exit 2, one line) `action` on another owner's sweep, unless the caller is an
    admin in the teams file."""
    owner = study.user_attrs.get(names.OWNER)
    who = identity.caller()
    teams = teams or load_teams()
    if not teams.may_control(who, owner):
        raise SpecError(
            f"sweep '{study.study_name}' is {owner}'s: {who} may not {action} it (its owner or "
            "an admin in conf/teams.yaml may)"
        )
