"""A registered model's aliases and decisions: a version that takes an alias is no longer the
challenger, each promotion's decision is added to the version's history (never overwriting an
earlier one), and each alias keeps the versions that held it before (for `rollback`)."""

from __future__ import annotations

import json
import time
from typing import Any

from sweeps.common import names

CHALLENGER = "challenger"


def place_aliases(
    client: Any, model: str, alias: str, version: str, move: bool, holder: str | None
) -> None:
    """A version that takes `alias` is no longer the challenger (one version never holds
    both); one that does not is the challenger."""
    if not move:
        client.set_registered_model_alias(model, CHALLENGER, version)
        return
    client.set_registered_model_alias(model, alias, version)
    push_history(client, model, alias, holder)
    if alias != CHALLENGER:
        try:
            held = str(client.get_model_version_by_alias(model, CHALLENGER).version)
        except Exception:
            held = None  # no challenger
        if held == str(version):
            client.delete_registered_model_alias(model, CHALLENGER)


def add_decision(client: Any, model: str, version: str, alias: str, reason: str) -> None:
    """Each decision on a version is kept, one line each, oldest first: a later promotion adds
    its line, never overwrites an earlier one."""
    before = client.get_model_version(model, version).tags.get(names.DECISION) or ""
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {alias}: {reason}"
    lines = [*before.splitlines(), line]
    while len("\n".join(lines)) > 4900 and len(lines) > 1:  # MLflow's tag value limit
        lines.pop(0)
    client.set_model_version_tag(model, version, names.DECISION, "\n".join(lines))


def decisions(text: str | None) -> list[str]:
    """Pure: a version's decision history, oldest first."""
    return (text or "").splitlines()


def history(client: Any, model: str, alias: str) -> list[str]:
    tags = client.get_registered_model(model).tags
    return json.loads(tags.get(names.alias_history(alias), "[]"))


def push_history(client: Any, model: str, alias: str, previous: str | None) -> None:
    if previous is None:
        return
    hist = history(client, model, alias)
    hist.append(str(previous))
    client.set_registered_model_tag(model, names.alias_history(alias), json.dumps(hist[-50:]))
