"""Sweeping a Python function from a notebook or a script: `sweeps.run(spec, train=fn)`.

The function gets the same contract as any trainer (a config dict in; `sweeps.report` each
epoch; a dict of final metrics out). It is pickled by value with cloudpickle, so a function
defined in a notebook cell reaches the Ray workers without being importable there.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.contracts.records import SweepOutcome
from sweeps.spec import Spec, load_spec, spec_from_dict

# The entrypoint a spec gets when its trainer is a function handed to `run`.
CALLABLE = names.NOTEBOOK_ENTRYPOINT


def train_function(config: dict[str, Any]) -> Any:  # pragma: no cover - never called
    raise RuntimeError("a function-trainer sweep runs the function given to sweeps.run")


def pack(fn: Any, source: Any = None, what: str = "train") -> dict[str, Any]:
    """The function as it travels to the workers: cloudpickle bytes and their digest.
    `source` (default `fn`) is the user's function whose module may have to go by value."""
    import sys

    import cloudpickle

    source = fn if source is None else source
    if not callable(source):
        raise SpecError(f"{what}: expected a function, not {type(source).__name__}")
    module = sys.modules.get(getattr(source, "__module__", "") or "")
    where = getattr(module, "__file__", "") or ""
    if module is not None and module.__name__ != "__main__" and "site-packages" not in where:
        # A function in the user's own module (a script's helper file, a test): by value, as
        # a notebook's is, since the workers cannot import that module.
        cloudpickle.register_pickle_by_value(module)
    data = cloudpickle.dumps(fn)
    return {"callable": data, "callable_digest": hashlib.sha256(data).hexdigest()[:16]}


@dataclass
class SweepResult:
    """What `sweeps.run` returns: the outcome (state, reason, summary, MLflow ids) plus the
    sweep read back from its stores."""

    outcome: SweepOutcome

    def __getattr__(self, name: str) -> Any:
        return getattr(self.outcome, name)

    def _doc(self) -> dict[str, Any]:
        from sweeps.queries import show

        return show(self.outcome.name, self.outcome.storage_url)

    @property
    def best(self) -> dict[str, Any] | None:
        """The best trial: number, value, params, MLflow run id (None if none completed)."""
        return self._doc()["best"]

    def trials_dataframe(self) -> Any:
        """A pandas DataFrame, one row per trial: number, state, value, each param
        (`params_<name>`), duration_s, cost_usd, mlflow_run_id."""
        import pandas as pd

        rows = []
        for t in self._doc()["trials"]:
            row = {k: t[k] for k in ("number", "state", "value", "duration_s", "cost_usd")}
            row.update({f"params_{k}": v for k, v in t["params"].items()})
            row["mlflow_run_id"] = t["mlflow_run_id"]
            rows.append(row)
        return pd.DataFrame(rows)


def _spec(spec: Any) -> Spec:
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, dict):
        return spec_from_dict(spec)
    if isinstance(spec, str | Path):
        return load_spec(spec)
    raise SpecError(f"spec: a Spec, a dict or a YAML path, not {type(spec).__name__}")


def sweep(spec: Any, *, train: Any = None, **kw: Any) -> SweepResult:
    """`sweeps.run`: run a sweep from Python. `spec` is a Spec, a dict or a YAML path; `train`,
    a function to sweep instead of the spec's trainer (Ray ships it to the workers); `kw` as
    for `sweeps.api.run`. Returns a `SweepResult` (`.best`, `.trials_dataframe()`)."""
    with _quiet():
        from sweeps.api import validate_spec
        from sweeps.driver.assemble import run_sweep

        s = _spec(spec)
        function = None
        if train is not None:
            trainer = s.trainer.model_copy(update={"entrypoint": CALLABLE, "code_dir": None})
            s = s.model_copy(update={"trainer": trainer})
            function = pack(train)
        validate_spec(s)
        _check_name(s, kw.get("enqueue"))
        kw.setdefault("install_signals", False)  # a notebook's kernel owns Ctrl-C
        return SweepResult(run_sweep(s, function=function, **kw))


def _check_name(s: Spec, enqueue: list[dict[str, Any]] | None) -> None:
    """An existing sweep of this name runs on only as the same sweep, with budget left: a new
    `train` under an old name raises rather than returning the old sweep's trials."""
    from sweeps.common import paths
    from sweeps.search.reuse import Words, check_reuse
    from sweeps.spec.params import check_enqueued

    check_enqueued(s.search_space, enqueue or [], "enqueue")
    note = check_reuse(s, paths.storage_url(s.storage), enqueue, Words("name", "budget.trials"))
    if note:
        print(note)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The cell shows the sweep, not our libraries' notes (tqdm's "IProgress not found", Ray's
    token and ipywidgets notes, MLflow's table creation), as the CLI does; SWEEPS_VERBOSE=1 shows
    them. Only while the sweep runs: the user's own warnings and logging are left as they were."""
    import logging
    import warnings

    from sweeps.common.quietlogs import quiet_ray, verbose

    if verbose():
        yield
        return
    names = ("ray", "optuna", "mlflow", "alembic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Each sets its own loggers up while it is imported, and Ray logs notes right then.
        logging.disable(logging.WARNING)
        try:
            import mlflow  # noqa: F401
            import optuna  # noqa: F401
            import ray  # noqa: F401
        finally:
            logging.disable(logging.NOTSET)
        levels = {n: logging.getLogger(n).level for n in names}
        quiet_ray(logging.ERROR)
        for n in names:
            logging.getLogger(n).setLevel(logging.ERROR)
        try:
            yield
        finally:
            for n, level in levels.items():
                logging.getLogger(n).setLevel(level)
