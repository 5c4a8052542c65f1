"""`sweeps.optimize`: an Optuna define-by-run `objective(trial)`, unchanged, run on lanes.

It stands for `optuna.create_study(...)` followed by `study.optimize(objective, ...)`, with the
arguments both take. Each trial is a Ray Train job of `workers` ranks; every rank runs the
objective with a trial whose `suggest_*` the driver answers from its own `optuna.Trial`, so the
study is a real Optuna study in the given storage (define-by-run distributions, intermediate
values, user attrs) and `optuna-dashboard` and `study.trials_dataframe()` read it as usual.
Returns that `optuna.Study`, loaded from the storage with the given sampler and pruner.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sweeps.common import names
from sweeps.common.errors import SpecError

# `n_trials=None` in Optuna means "until stopped"; a budget needs a number.
UNBOUNDED_TRIALS = 1_000_000


def optimize(
    objective: Callable[[Any], Any],
    n_trials: int | None = None,
    timeout: float | None = None,
    n_jobs: int = 1,
    catch: Iterable[type[Exception]] | type[Exception] = (),
    *,
    workers: int = 1,
    study_name: str | None = None,
    storage: str | Any = None,
    sampler: Any = None,
    pruner: Any = None,
    direction: str | Any = None,
    directions: Sequence[str | Any] | None = None,
    load_if_exists: bool = False,
    callbacks: Any = None,
    spec: dict[str, Any] | None = None,
) -> Any:
    """Run `objective(trial)` for `n_trials` trials (`timeout` seconds at most), `n_jobs` at a
    time, each on `workers` Ray Train workers. `study_name`, `storage`, `sampler`, `pruner`,
    `direction(s)` and `load_if_exists` as `optuna.create_study` takes them; `storage=None`
    is the sweeps store (`$SWEEPS_STORAGE`, `$OPTUNA_STORAGE` or SWEEPS_HOME's), not memory.
    `spec`: more sweeps spec fields (resources, tracking...). An exception from the objective
    that is not in `catch` fails its trial, stops the study and is raised here again."""
    from sweeps.notebook import _quiet

    if callbacks is not None:
        raise SpecError(
            "callbacks: not supported by sweeps.optimize (trials end in the driver, not here); "
            "read the study afterwards, or use sweeps' MLflow runs"
        )
    catches = _catch(catch)
    dirs = _directions(direction, directions)
    with _quiet():
        import optuna

        from sweeps.driver.assemble import run_sweep
        from sweeps.driver.define_by_run import DefineByRun

        url = _storage_url(storage)
        name = study_name or f"no-name-{uuid.uuid4()}"
        done = _existing(name, url, load_if_exists)
        s = _spec(name, url, dirs, n_trials, timeout, n_jobs, workers, done, spec or {})
        host = DefineByRun(sampler, pruner)
        fn = _pack(objective, catches, len(dirs))
        outcome = run_sweep(s, function=fn, define_by_run=host, install_signals=False)
    _raise_for(outcome, host)
    return optuna.load_study(
        study_name=name,
        storage=storage if storage is not None and not isinstance(storage, str) else url,
        sampler=sampler,
        pruner=pruner,
    )


def _catch(catch: Any) -> tuple[type[BaseException], ...]:
    """As `study.optimize`: a class or an iterable of classes."""
    out = (catch,) if isinstance(catch, type) else tuple(catch)
    if not all(isinstance(c, type) and issubclass(c, BaseException) for c in out):
        raise SpecError(f"catch: exception classes, not {catch!r:.200}")
    return out


def _directions(direction: Any, directions: Any) -> list[str]:
    """As `optuna.create_study`: one of the two, default minimize; a StudyDirection or a
    string."""
    if direction is not None and directions is not None:
        raise SpecError("direction: specify only one of `direction` and `directions`")
    given = [direction] if directions is None else list(directions)
    given = ["minimize" if d is None else d for d in given] or ["minimize"]
    out = [str(getattr(d, "name", d)).lower() for d in given]
    bad = [d for d in out if d not in ("minimize", "maximize")]
    if bad:
        raise SpecError(f"direction: 'minimize' or 'maximize', not {bad[0]!r}")
    return out


def _storage_url(storage: Any) -> str:
    """A URL as given; an Optuna RDBStorage by its URL; None: the sweeps store. Other storages
    (in memory, journal files) cannot be shared with the driver's writer."""
    from sweeps.common import paths

    if storage is None:
        return paths.storage_url(None)
    if isinstance(storage, str):
        return storage
    url = getattr(storage, "url", None)
    if isinstance(url, str) and type(storage).__name__ == "RDBStorage":
        return url
    raise SpecError(
        f"storage: a database URL or an optuna.storages.RDBStorage, not {type(storage).__name__} "
        "(sweeps writes the study from its driver)"
    )


def _existing(name: str, url: str, load_if_exists: bool) -> int:
    """Trials the study already counts (0 for a new one). As `optuna.create_study`, an
    existing study is an error unless `load_if_exists`."""
    import optuna

    from sweeps.search.study import counted_trials, open_storage

    storage = open_storage(url)
    if name not in {s.study_name for s in storage.get_all_studies()}:
        return 0
    if not load_if_exists:
        raise optuna.exceptions.DuplicatedStudyError(
            f"Another study with name '{name}' already exists. Please specify a different name, "
            "or reuse the existing one by setting `load_if_exists` (for Python API) or "
            "`--skip-if-exists` flag (for CLI)."
        )
    return counted_trials(optuna.load_study(study_name=name, storage=storage))


def _spec(
    name: str,
    url: str,
    dirs: list[str],
    n_trials: int | None,
    timeout: float | None,
    n_jobs: int,
    workers: int,
    done: int,
    extra: dict[str, Any],
) -> Any:
    """The sweep: no search space (the objective defines it), its return value the objective."""
    from sweeps.api import validate_spec
    from sweeps.spec import spec_from_dict
    from sweeps.worker.optuna_trial import value_names

    metrics = value_names(len(dirs))
    objectives = [{"metric": m, "direction": d} for m, d in zip(metrics, dirs, strict=True)]
    parallel = n_jobs if n_jobs > 0 else max(1, (os.cpu_count() or 1) // workers)
    budget = {"trials": done + (n_trials or UNBOUNDED_TRIALS), "parallel": parallel}
    if timeout is not None:
        budget["timeout_s"] = timeout
    fields: dict[str, Any] = {
        "name": name,
        "storage": url,
        "budget": budget,
        "resources": {"workers": workers},
        "trainer": {"entrypoint": names.NOTEBOOK_ENTRYPOINT},
        **({"objectives": objectives} if len(dirs) > 1 else {"objective": objectives[0]}),
    }
    for key, value in extra.items():
        fields[key] = {**fields[key], **value} if isinstance(fields.get(key), dict) else value
    s = spec_from_dict(fields)
    validate_spec(s)
    return s


def _pack(objective: Any, catch: tuple[type[BaseException], ...], n: int) -> dict[str, Any]:
    """The objective as the lanes run it: `run_objective` bound to it, packed as a notebook's
    function is (its module by value when the workers cannot import it)."""
    from sweeps.notebook import pack
    from sweeps.worker.optuna_trial import run_objective

    return pack(functools.partial(run_objective, objective, catch, n), objective, "objective")


def _raise_for(outcome: Any, host: Any) -> None:
    """As `study.optimize`: the objective's uncaught exception is raised again, Ctrl-C is a
    KeyboardInterrupt; a sweep that failed for another reason says why in one line."""
    if host.stop_reason:
        import cloudpickle

        err: BaseException | None = None
        try:
            err = cloudpickle.loads(host.raised) if host.raised else None
        except Exception:
            err = None
        raise err or RuntimeError(host.stop_reason)
    if outcome.state == "interrupted":
        raise KeyboardInterrupt
    if outcome.state == "failed":
        raise RuntimeError(f"optimize: the sweep failed: {outcome.reason}")
