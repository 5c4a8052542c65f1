"""An Optuna define-by-run `objective(trial)` on a lane (`sweeps.optimize`).

The objective gets a `Trial` that behaves as `optuna.Trial` does, but whose study lives in the
driver: rank 0 sends each `suggest_*` to the driver, which calls the same method on its own
`optuna.Trial` (the study records the distribution, the sampler samples), and every rank gets
the same answer from the broker, keyed by (lane, trial, call). `report` goes the way
`sweeps.report` does; `should_prune` is rank 0's answer, shared with the other ranks, so a DDP
trial's ranks agree on every suggestion and every prune decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sweeps.contracts.protocol import Decision, Suggest, Suggested
from sweeps.worker import runtime

# The metrics a trial's return value is reported under: "value", or "values_0", "values_1"...
# for several directions (the columns `study.trials_dataframe()` gives them).
VALUE = "value"


def value_names(n_objectives: int) -> list[str]:
    return [VALUE] if n_objectives == 1 else [f"values_{i}" for i in range(n_objectives)]


class Trial:
    """What `objective(trial)` receives: `optuna.Trial`'s interface, answered by the driver."""

    def __init__(self, ctx: runtime.TrialContext, n_objectives: int) -> None:
        self._ctx = ctx
        self._multi = n_objectives > 1
        self._calls = 0  # suggest_* calls so far: the key every rank shares for the answer
        self._prune_calls = 0
        self._decision = Decision.CONTINUE  # the answer to the latest report (rank 0)
        self._reported: set[int] = set()
        self._params: dict[str, Any] = {}
        self._user_attrs: dict[str, Any] = {}

    # ----- what Optuna's Trial offers -------------------------------------------------------
    @property
    def number(self) -> int:
        return self._ctx.trial_number

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    @property
    def user_attrs(self) -> dict[str, Any]:
        return dict(self._user_attrs)

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        return self._suggest("suggest_float", name, low=low, high=high, step=step, log=log)

    def suggest_int(
        self, name: str, low: int, high: int, *, step: int = 1, log: bool = False
    ) -> int:
        return self._suggest("suggest_int", name, low=low, high=high, step=step, log=log)

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self._suggest("suggest_categorical", name, choices=list(choices))

    def report(self, value: float, step: int) -> None:
        """As `optuna.Trial.report`: rank 0's value and step reach the study (other ranks'
        are checked and not sent); a step reported twice keeps its first value."""
        if self._multi:
            raise NotImplementedError(
                "Trial.report is not supported for multi-objective optimization."
            )
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"The `value` argument is of type '{type(value)}' but supposed to be a float."
            ) from None
        try:
            step = int(step)
        except (TypeError, ValueError):
            raise TypeError(
                f"The `step` argument is of type '{type(step)}' but supposed to be an int."
            ) from None
        if step < 0:
            raise ValueError(f"`{step=}` must be non-negative.")
        ctx = self._ctx
        if step in self._reported or ctx.rank != 0 or ctx.broker is None:
            return
        self._reported.add(step)
        import ray

        runtime.ship_output(ctx)  # the trial's output so far, for `sweeps logs -f`
        ref = ctx.broker.report.remote(ctx.lane_id, ctx.seq, step, {VALUE: value})
        self._decision = ray.get(ref)[0]

    def should_prune(self) -> bool:
        """As `optuna.Trial.should_prune`: the pruner's answer to the latest report. Rank 0's
        answer is every rank's, so all raise `TrialPruned` together. A cancelled sweep also
        answers True (the trial then ends as cancelled, not pruned)."""
        if self._multi:
            raise NotImplementedError(
                "Trial.should_prune is not supported for multi-objective optimization."
            )
        ctx = self._ctx
        self._prune_calls += 1
        prune = self._decision is not Decision.CONTINUE
        if ctx.broker is None or ctx.world_size == 1:
            return prune
        import ray

        key = ("prune", ctx.lane_id, ctx.seq, self._prune_calls)
        if ctx.rank == 0:
            ctx.broker.put.remote(key, prune)
            return prune
        return bool(ray.get(ctx.broker.get.remote(key)))

    def set_user_attr(self, key: str, value: Any) -> None:
        """As `optuna.Trial.set_user_attr` (rank 0's reach the study)."""
        self._user_attrs[key] = value
        ctx = self._ctx
        if ctx.rank == 0 and ctx.broker is not None:
            import ray

            # Waited for: the attr is queued before the trial's end, so it is written first.
            ray.get(ctx.broker.trial_attr.remote(ctx.lane_id, ctx.seq, key, value))

    # ----- the round trip -------------------------------------------------------------------
    def _suggest(self, method: str, name: str, **args: Any) -> Any:
        import ray

        ctx = self._ctx
        if ctx.broker is None:
            raise RuntimeError(f"trial.{method}: only inside a trial run by sweeps.optimize")
        self._calls += 1
        ask = Suggest(ctx.lane_id, ctx.seq, self._calls, method, name, args)
        got = ray.get(
            ctx.broker.suggest.remote(
                ctx.lane_id, ctx.seq, self._calls, ask if ctx.rank == 0 else None
            )
        )
        if not isinstance(got, Suggested):
            raise TypeError(f"trial.{method}({name!r}) got {got!r:.200} from the driver")
        if got.name != name:
            raise RuntimeError(
                f"rank {ctx.rank} asked for {name!r} where rank 0 asked for {got.name!r}: "
                "every rank must call suggest_* in the same order"
            )
        if got.error:
            raise ValueError(got.error)
        self._params[name] = got.value
        return got.value


def values_of(out: Any, n_objectives: int) -> dict[str, float]:
    """The objective's return value as the trial's metrics. What Optuna would fail the trial
    for (not a float, a wrong count) fails it here, with Optuna's message."""
    names = value_names(n_objectives)
    seq = list(out) if isinstance(out, list | tuple) else [out]
    if len(seq) != n_objectives:
        raise ValueError(
            f"The number of the values {len(seq)} did not match the number of the objectives "
            f"{n_objectives}."
        )
    try:
        return {k: float(v) for k, v in zip(names, seq, strict=True)}
    except (TypeError, ValueError):
        raise TypeError(
            f"The value {out!r:.200} could not be cast to float (objective's return value)."
        ) from None


class ObjectiveValueError(ValueError):
    """The objective returned what Optuna fails a trial for (not a float, a wrong count): the
    trial fails and the study goes on, as in Optuna; raised after the `catch` check."""


def run_objective(
    objective: Any, catch: tuple[type[BaseException], ...], n_objectives: int, conf: Any
) -> dict[str, float]:
    """What the lane runs for each trial (the trainer function; `conf` is unused): the
    objective with a `Trial`. `optuna.TrialPruned` prunes; an exception not in `catch` fails
    the trial and stops the study (no new trials), as `study.optimize` does."""
    import optuna

    ctx = runtime.context()
    try:
        out = objective(Trial(ctx, n_objectives))
    except optuna.TrialPruned as e:
        raise runtime.TrialPruned(str(e) or "pruned") from None
    except Exception as e:
        if not isinstance(e, catch) and ctx.rank == 0 and ctx.broker is not None:
            import ray

            why = f"trial {ctx.trial_number} raised {type(e).__name__}: {e}"
            ray.get(ctx.broker.stop_study.remote(ctx.lane_id, ctx.seq, why[:2000], _pickled(e)))
        raise
    try:
        return values_of(out, n_objectives)
    except (TypeError, ValueError) as e:
        raise ObjectiveValueError(str(e)) from None


def _pickled(e: BaseException) -> bytes | None:
    """The exception for `optimize` to raise again; None if it does not pickle."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(e)  # args and attributes; tracebacks never pickle
        cloudpickle.loads(data)
    except Exception:
        return None
    return data
