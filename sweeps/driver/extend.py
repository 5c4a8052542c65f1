"""`sweeps extend NAME --top K --epochs N`: train finished trials N more epochs, each from its
last checkpoint, with the same params.

Optuna keeps a finished trial read-only, so an extension is a NEW trial, queued with its
source's params fixed and linked to it explicitly: `names.EXTENDS` (the source's number),
`EXTENDS_RUN` (its MLflow run), `RESUME_CHECKPOINT`/`RESUME_STEP` (where it starts) and
`EXTEND_EPOCHS` (the source's epochs + N, the epochs its config gets). Its value is the value
after the extra epochs; the source keeps the value it had. Both stay in the study, so the
sampler sees what each budget of epochs gave.

In MLflow the extension is a run of its own (one run per Optuna trial, as for a retry), tagged
with the run it extends. It logs steps S+1..S+N beside the source's 1..S, so the two draw one
continuous curve in MLflow's charts, and the source's run still holds the result its trial has.

The sweep's driver runs the extensions: the stored spec with its search-ending rules (target,
stop_when, money, wall time) off, no pruner (an extension is asked for, not searched) and a
trial budget that the queued extensions alone fill (they are not counted, as re-queued trials).
"""

from __future__ import annotations

from typing import Any

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.common.words import plural
from sweeps.driver.recovery import requeue_params
from sweeps.search.constraints import rankable
from sweeps.search.study import counted_trials, run_id_of

ENDED = ("finished", "stopped", "failed")  # states a sweep can be extended in


def check_args(top: int | None, trials: list[int] | None, epochs: int) -> None:
    """Pure: one line for a bad command line."""
    if epochs < 1:
        raise SpecError(f"--epochs: must be 1 or more, got {epochs}")
    if (top is None) == (not trials):
        raise SpecError("extend: give --top K or --trials 3,7 (one of them)")
    if top is not None and top < 1:
        raise SpecError(f"--top: must be 1 or more, got {top}")


def parse_trials(text: str | None) -> list[int] | None:
    """Pure: `--trials 3,7` as numbers."""
    if text is None:
        return None
    try:
        out = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise SpecError(f"--trials: expected trial numbers such as 3,7, got '{text}'") from None
    if not out:
        raise SpecError("--trials: expected trial numbers such as 3,7")
    return out


def check_state(name: str, state: str) -> None:
    """Pure: extensions run on an ended sweep, never beside its own driver."""
    if state in ("running", "queued"):
        raise SpecError(f"sweep '{name}' is {state}: extend it once it has ended")
    if state not in ENDED:
        raise SpecError(
            f"sweep '{name}' is {state}: `sweeps resume {name}` first, then extend its trials"
        )


def top_trials(trials: list[Any], k: int, maximize: bool, multi: bool, name: str) -> list[Any]:
    """Pure: the `k` best COMPLETE feasible trials, ranked as the sweep's best is
    (`constraints.best_feasible`: by value, ties to the earliest)."""
    if multi:
        raise SpecError(
            f"sweep '{name}' has several objectives: no single ranking; name the trials with "
            "--trials 3,7"
        )
    pool = [t for t in trials if rankable(t)]  # pbt: a member's last segment only
    if len(pool) < k:
        raise SpecError(
            f"--top {k}: sweep '{name}' has {plural(len(pool), 'completed feasible trial')}"
        )
    pool.sort(key=lambda t: t.number)
    pool.sort(key=lambda t: t.values[0], reverse=maximize)  # stable: ties keep the earliest
    return pool[:k]


def named_trials(trials: list[Any], numbers: list[int], name: str) -> list[Any]:
    """Pure: the trials `--trials` names, each COMPLETE."""
    by_number = {t.number: t for t in trials}
    out = []
    for n in dict.fromkeys(numbers):
        t = by_number.get(n)
        if t is None:
            raise SpecError(f"sweep '{name}' has no trial {n}")
        if t.state.name != "COMPLETE":
            raise SpecError(
                f"trial {n} of sweep '{name}' is {t.state.name}: only COMPLETE trials are extended"
            )
        out.append(t)
    return out


def source_epochs(t: Any, config: dict[str, Any]) -> int:
    """Pure: the epochs trial `t` trained (an extension's own total, or its config's)."""
    if t.user_attrs.get(names.EXTEND_EPOCHS):
        return int(t.user_attrs[names.EXTEND_EPOCHS])
    return int(config["epochs"])


def extension_attrs(t: Any, epochs: int, total: int, run_id: str | None) -> dict[str, Any]:
    """The user attributes an extension of `t` is queued with. Raises when `t` has no
    checkpoint to start from, or when its checkpoint is gone."""
    checkpoint = t.user_attrs.get(names.CHECKPOINT)
    if not checkpoint:
        raise SpecError(
            f"trial {t.number} has no checkpoint to continue from (none was persisted: see "
            "execution.checkpoint_every and checkpoint_min_interval_s)"
        )
    if not checkpoint_exists(checkpoint):
        raise SpecError(
            f"trial {t.number}'s checkpoint is gone ({checkpoint}); raise "
            "execution.keep_checkpoints so a lane keeps its finished trials' checkpoints"
        )
    return {
        names.EXTENDS: t.number,
        names.EXTENDS_RUN: run_id,
        names.EXTEND_EPOCHS: total + epochs,
        names.RESUME_CHECKPOINT: checkpoint,
        names.RESUME_STEP: t.user_attrs.get(names.CHECKPOINT_STEP),
        names.RESUMED_FROM_TRIAL: t.number,
    }


def checkpoint_exists(uri: str) -> bool:
    """Whether a persisted checkpoint is still there (a lane keeps only its
    `execution.keep_checkpoints` latest). A store that cannot be asked counts as present: the
    extension then fails with the store's own error."""
    import os

    from sweeps.execution.storage import filesystem

    fs, path = filesystem(uri)
    try:
        if fs is None and uri.startswith("gs://"):
            from pyarrow.fs import FileSystem

            fs, path = FileSystem.from_uri(uri)
        if fs is None:
            return os.path.isdir(path)
        from pyarrow.fs import FileType

        return bool(fs.get_file_info(path).type != FileType.NotFound)
    except OSError:
        return True


def extension_spec(raw: dict[str, Any], counted: int, k: int) -> dict[str, Any]:
    """Pure: the stored spec as the driver of `k` extensions runs it: a trial budget the queued
    (uncounted) extensions fill, no rule that ends a search early, no pruner."""
    out = dict(raw)
    budget = dict(out.get("budget") or {})
    for key in ("target", "stop_when", "max_cost_usd", "max_gpu_hours", "timeout_s", "hard"):
        budget.pop(key, None)
    budget["trials"] = counted
    budget["parallel"] = min(int(budget.get("parallel", 1)), k)
    out["budget"] = budget
    out["pruner"] = {"name": "none"}
    out.pop("warm_start", None)
    return out


def prepare(
    study: Any, raw: dict[str, Any], top: int | None, numbers: list[int] | None, epochs: int
) -> tuple[dict[str, Any], list[int]]:
    """Queue the extensions in `study`; returns the spec (as a dict) their driver runs with and
    the numbers of the trials they extend. Every check runs before anything is queued."""
    from sweeps.driver.trial_config import trial_config
    from sweeps.spec import spec_from_dict

    name = study.study_name
    spec = spec_from_dict(raw)
    trials = study.get_trials(deepcopy=False)
    if top is not None:
        maximize = study.directions[0].name == "MAXIMIZE"
        chosen = top_trials(trials, top, maximize, len(study.directions) > 1, name)
    else:
        chosen = named_trials(trials, numbers or [], name)
    if "epochs" in spec.search_space:
        raise SpecError(f"sweep '{name}' searches 'epochs': an extension would change its params")
    queued = []
    for t in chosen:
        config = trial_config(spec, t.params)
        if "epochs" not in config:
            raise SpecError(f"trial {t.number}: its program takes no epochs to extend")
        if not spec.trainer.entrypoint and config.get("schedule") == "onecycle":
            raise SpecError(
                f"trial {t.number} uses schedule onecycle, whose length is fixed when it "
                "starts: it cannot train past its epochs"
            )
        total = source_epochs(t, config)
        queued.append((t, extension_attrs(t, epochs, total, run_id_of(study.user_attrs, t))))
    counted = counted_trials(study)
    if counted < 1:  # a trial budget of 0 cannot be set: the driver would sample one more
        raise SpecError(
            f"sweep '{name}' ran no trial of its own (all warm-started): none to extend"
        )
    for t, attrs in queued:
        requeue_params(study, t.params, attrs)
    return extension_spec(raw, counted, len(queued)), [t.number for t, _ in queued]
