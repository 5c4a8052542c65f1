"""A sweep's name already in the store: what running the spec under it would do, said before
anything starts.

The name is the sweep (an Optuna study of that name, as `optuna.create_study(...,
load_if_exists=True)` makes it). Running a spec under a name that exists continues that sweep;
that is only sound when the spec is the same sweep (same objectives, search space and trainer:
a budget, parallelism or resources may change), and only does something when the budget leaves
trials to run. Anything else is one line naming the sweep's state, its trials and the ways out,
never a run that silently does nothing or mixes two sweeps in one study. Configurations to try
first (`--enqueue`) count in the budget: a budget too small for them is refused too, since a
queued trial past the budget would wait forever.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.common.redact import redacted_spec_yaml
from sweeps.common.words import plural

if TYPE_CHECKING:
    from sweeps.spec import Spec

# The fields that make two specs the same sweep: trials of one are comparable with the other's.
IDENTITY = ("objective", "objectives", "search_space", "trainer")
# Where the code is, not what it is: a submitted sweep's driver reads it from the job's folder.
PLACES = (("trainer", "code_dir"), ("trainer", "params", "package_path"))


@dataclass(frozen=True)
class Words:
    """How the caller's user changes the name and the budget (CLI flags, or notebook args)."""

    name: str = "--name"
    trials: str = "--trials"


CLI = Words()


@dataclass
class Existing:
    state: str  # running, finished, interrupted, failed, cancelled, queued
    counted: int  # trials that used budget
    rerun: int  # trials a driver takes over again (cancelled or left by a dead driver)
    waiting: int  # configurations already queued
    tried: list[dict[str, Any]]  # params of every trial, queued ones included
    spec: dict[str, Any] | None  # the stored spec, as `redacted_spec_yaml` wrote it


def existing(name: str, storage_url: str) -> Existing | None:
    """The sweep of that name in the store, or None: reading never creates a store."""
    import optuna

    from sweeps.search.liveness import live_drivers
    from sweeps.search.study import counted_trials, open_storage

    path = storage_url.removeprefix("sqlite:///")
    if path != storage_url and not os.path.exists(path):
        return None
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(storage_url))
    except KeyError:
        return None
    trials = study.get_trials(deepcopy=False)
    attrs = study.user_attrs
    live = bool(live_drivers(study))
    if not trials and not attrs.get(names.SPEC):
        return None  # created, never run: nothing to continue
    running = [t for t in trials if t.state.name == "RUNNING"]
    cancelled = _cancelled_not_requeued(trials)
    stored = attrs.get(names.STATE)
    if live:
        state = "running"
    elif stored == "running" or running:
        state = "interrupted"
    else:
        state = str(stored or ("queued" if attrs.get(names.SUBMITTED) else "finished"))
    return Existing(
        state=state,
        counted=counted_trials(study),
        rerun=(0 if live else len(running)) + cancelled,
        waiting=sum(t.state.name == "WAITING" for t in trials),
        tried=[_params(t) for t in trials],
        spec=_stored_spec(attrs.get(names.SPEC)),
    )


def _cancelled_not_requeued(trials: list[Any]) -> int:
    cancelled = getattr(names, "CANCELLED", None)
    requeued_from = getattr(names, "REQUEUED_FROM", None)
    done = {t.user_attrs.get(requeued_from) for t in trials}
    return sum(
        1
        for t in trials
        if cancelled and t.state.name == "FAIL" and t.user_attrs.get(cancelled)
        and t.number not in done
    )  # fmt: skip


def _params(t: Any) -> dict[str, Any]:
    """A trial's params; a queued one's are still the fixed params `enqueue_trial` stored (the
    system attr its `skip_if_exists` compares, too)."""
    if t.params:
        return dict(t.params)
    return dict(t.system_attrs.get("fixed_params") or {})


def _stored_spec(text: str | None) -> dict[str, Any] | None:
    """The stored spec with today's defaults filled in (a spec stored by an earlier release
    lacks the fields added since), or None when it no longer reads as a spec."""
    import yaml

    from sweeps.spec import spec_from_dict

    if not text:
        return None
    try:
        return yaml.safe_load(redacted_spec_yaml(spec_from_dict(yaml.safe_load(text))))
    except (SpecError, yaml.YAMLError, TypeError, ValueError):
        return None


def differences(spec: Spec, stored: dict[str, Any]) -> list[str]:
    """The identity fields (one level down) in which `spec` is not the stored sweep."""
    import yaml

    new = yaml.safe_load(redacted_spec_yaml(spec))
    stored = yaml.safe_load(yaml.safe_dump(stored))  # a copy
    for doc in (new, stored):
        for *path, key in PLACES:
            node = doc
            for k in path:
                node = node.get(k) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(key, None)
    out = []
    for key in IDENTITY:
        a, b = new.get(key), stored.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{key}.{k}" for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
        else:
            out.append(key)
    return out


def check_reuse(
    spec: Spec,
    storage_url: str,
    enqueue: list[dict[str, Any]] | None = None,
    words: Words = CLI,
) -> str | None:
    """Raise a one-line :class:`SpecError` when running `spec` under its name would mix two
    sweeps, run nothing, or queue configurations the budget cannot run. Returns a note to show
    when it continues or joins an existing sweep; None for a new one."""
    old = existing(spec.name, storage_url)
    queued = [p for p in enqueue or [] if old is None or p not in old.tried]
    trials = spec.budget.trials
    if old is None:
        if len(queued) > trials:
            raise SpecError(
                f"--enqueue: {plural(len(queued), 'configuration')} to try, and a budget of "
                f"{plural(trials, 'trial')}: raise {words.trials} to {len(queued)} or more"
            )
        return None
    n = spec.name
    about = f"sweep '{n}' exists ({old.state}, {plural(old.counted, 'trial')})"
    diff = differences(spec, old.spec) if old.spec is not None else []
    if diff:
        shown = ", ".join(diff[:3]) + (f" and {len(diff) - 3} more" if len(diff) > 3 else "")
        raise SpecError(
            f"{about} with another {shown}: a new {words.name} starts a new sweep; "
            f"`sweeps resume {n}` continues that one as it was"
        )
    if old.state == "running":
        return f"joining the running sweep '{n}' ({plural(old.counted, 'trial')} so far)"
    # Budget left for new trials. Queued ones take theirs when they run; a trial taken over
    # again (re-queued) runs in the place its failed first try gives back.
    left = trials - old.counted - old.waiting
    if queued and len(queued) > left:
        raise SpecError(
            f"--enqueue: {about} and {plural(max(left, 0), 'trial')} left of its budget of "
            f"{trials} for {plural(len(queued), 'configuration')}: raise {words.trials} to "
            f"{trials - left + len(queued)}"
        )
    if left <= 0 and not old.rerun and not old.waiting:
        raise SpecError(
            f"{about}, and a budget of {plural(trials, 'trial')} runs none: raise "
            f"{words.trials} above {old.counted} to continue it, or a new {words.name} starts "
            "a new sweep"
        )
    more = max(left, 0) + old.rerun + old.waiting
    done = f"{old.state}, {plural(old.counted, 'trial')}"
    return f"continuing sweep '{n}' ({done}): up to {plural(more, 'trial')} more"
