"""W&B sweep configs, run unchanged: a sweep config becomes a native spec (pure).

The mapping, key by key:

- `method`: grid, random, bayes (searched with Optuna's TPE; W&B's bayes is a Gaussian process).
- `metric`: `name`, `goal` (W&B's default: minimize), `target` (budget.target).
- `parameters`: `value` (a fixed argument), `values` (categorical), `min`/`max` (int_uniform when
  both are ints, else uniform), and `distribution`: constant, categorical, uniform, int_uniform,
  q_uniform (a float or int step), log_uniform_values, log_uniform (bounds are natural-log
  exponents, as in W&B: searched on [e^min, e^max], log scale) and normal.
  `normal` has no Optuna counterpart: it is searched uniformly on mu ± 3 sigma (99.7% of its
  mass), and a note says so.
- `early_terminate`: hyperband (`min_iter`, or `max_iter` with `s`; `eta`) becomes Optuna's
  HyperbandPruner (min_resource, max_resource, reduction_factor). Without it, no pruning: W&B
  stops nothing early either.
- `run_cap`: budget.trials (a grid without one: the grid's size).
- `program`, `command` (W&B's macros, `sweeps.spec.command`): trainer.program / trainer.command.
  Each run is started as `wandb agent` starts it: its params in `wandb.config` and in
  `${args}`, and its metrics read from what it logs with `wandb.log` (the collector `wandb`,
  `sweeps.worker.wandb_agent`), offline, with no W&B server.
- `name`; `description`, `project`, `entity`: noted, not used.

Anything else is a :class:`SpecError` naming its key path (nested `parameters`, `probabilities`,
other distributions and early-terminate types).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from sweeps.common.errors import SpecError
from sweeps.importers.base import Importer

METHODS = {"grid": "grid", "random": "random", "bayes": "tpe"}
TOP_KEYS = (
    "program",
    "method",
    "metric",
    "parameters",
    "early_terminate",
    "run_cap",
    "command",
    "name",
    "description",
    "project",
    "entity",
)
NOTED = ("description", "project", "entity")
PARAM_KEYS = ("value", "values", "distribution", "min", "max", "q", "mu", "sigma")
DISTRIBUTIONS = (
    "constant",
    "categorical",
    "uniform",
    "int_uniform",
    "q_uniform",
    "log_uniform_values",
    "log_uniform",
    "normal",
)
DEFAULT_TRIALS = 20


def load_config(path: str | Path) -> dict[str, Any]:
    from sweeps.spec.load import read_mapping

    return read_mapping(path, "W&B sweep config", "a mapping (a W&B sweep config)")


def _num(p: dict[str, Any], key: str, where: str) -> float:
    v = p.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SpecError(f"{where}.{key}: a number is required")
    return v


def _bounds(p: dict[str, Any], where: str) -> tuple[float, float]:
    low, high = _num(p, "min", where), _num(p, "max", where)
    if low >= high:
        raise SpecError(f"{where}: min ({low}) must be < max ({high})")
    return low, high


def _param(name: str, p: Any, notes: list[str]) -> tuple[str, Any]:
    """("fixed", value) or ("search", native param dict) for one W&B parameter."""
    where = f"parameters.{name}"
    if not isinstance(p, dict):
        raise SpecError(f"{where}: expected a mapping (value, values, distribution, min, max)")
    if "parameters" in p:
        raise SpecError(f"{where}.parameters: nested parameters are not supported")
    if "probabilities" in p:
        raise SpecError(f"{where}.probabilities: weighted choices are not supported")
    for key in p:
        if key not in PARAM_KEYS:
            raise SpecError(f"{where}.{key}: unknown key (known: {', '.join(PARAM_KEYS)})")
    dist = p.get("distribution")
    if dist is None:
        if "value" in p:
            dist = "constant"
        elif "values" in p:
            dist = "categorical"
        elif "min" in p and "max" in p:
            ints = all(isinstance(p[k], int) and not isinstance(p[k], bool) for k in ("min", "max"))
            dist = "int_uniform" if ints else "uniform"
        else:
            raise SpecError(f"{where}: give value, values, or min and max")
    if dist not in DISTRIBUTIONS:
        known = ", ".join(DISTRIBUTIONS)
        raise SpecError(f"{where}.distribution: {dist!r} is not supported (supported: {known})")
    if dist == "constant":
        if "value" not in p:
            raise SpecError(f"{where}.value: required for a constant")
        return "fixed", p["value"]
    if dist == "categorical":
        values = p.get("values")
        if not isinstance(values, list) or not values:
            raise SpecError(f"{where}.values: a non-empty list is required")
        for i, v in enumerate(values):
            if isinstance(v, list | dict):
                raise SpecError(f"{where}.values[{i}]: only numbers, strings and booleans")
        return "search", {"type": "categorical", "choices": list(values)}
    if dist == "normal":
        mu = float(p.get("mu", 0.0))
        sigma = float(p.get("sigma", 1.0))
        if sigma <= 0:
            raise SpecError(f"{where}.sigma: must be > 0")
        notes.append(
            f"{where}: normal(mu={mu:g}, sigma={sigma:g}) has no Optuna counterpart: searched "
            f"uniformly on [{mu - 3 * sigma:g}, {mu + 3 * sigma:g}] (mu ± 3 sigma)"
        )
        return "search", {"type": "float", "low": mu - 3 * sigma, "high": mu + 3 * sigma}
    low, high = _bounds(p, where)
    if dist == "int_uniform":
        if low != int(low) or high != int(high):
            raise SpecError(f"{where}: int_uniform needs integer min and max")
        return "search", {"type": "int", "low": int(low), "high": int(high)}
    if dist == "uniform":
        return "search", {"type": "float", "low": float(low), "high": float(high)}
    if dist == "q_uniform":
        q = p.get("q", 1)
        if isinstance(q, bool) or not isinstance(q, int | float) or q <= 0:
            raise SpecError(f"{where}.q: a number > 0 is required")
        if all(isinstance(x, int) for x in (p["min"], p["max"], q)):
            return "search", {"type": "int", "low": int(low), "high": int(high), "step": int(q)}
        return "search", {"type": "float", "low": float(low), "high": float(high), "step": q}
    if dist == "log_uniform_values":
        if low <= 0:
            raise SpecError(f"{where}.min: log_uniform_values needs min > 0")
        return "search", {"type": "float", "low": float(low), "high": float(high), "log": True}
    # log_uniform: W&B's bounds are exponents of e.
    return "search", {"type": "float", "low": math.exp(low), "high": math.exp(high), "log": True}


def _pruner(et: Any, notes: list[str]) -> dict[str, Any]:
    where = "early_terminate"
    if not isinstance(et, dict):
        raise SpecError(f"{where}: expected a mapping with type: hyperband")
    if et.get("type") != "hyperband":
        raise SpecError(f"{where}.type: {et.get('type')!r} is not supported (only hyperband)")
    for key in et:
        if key not in ("type", "min_iter", "max_iter", "s", "eta", "strict"):
            raise SpecError(f"{where}.{key}: unknown key")
    eta = et.get("eta", 3)
    if isinstance(eta, bool) or not isinstance(eta, int) or eta < 2:
        raise SpecError(f"{where}.eta: an integer >= 2 is required")
    options: dict[str, Any] = {"reduction_factor": eta}
    for key in ("min_iter", "max_iter", "s"):
        v = et.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise SpecError(f"{where}.{key}: an integer >= 1 is required")
    if et.get("min_iter") is not None:
        options["min_resource"] = et["min_iter"]
        options["max_resource"] = et.get("max_iter") or "auto"
    elif et.get("max_iter") is not None and et.get("s") is not None:
        # W&B's brackets are max_iter / eta^k for k < s+1: the first one is the minimum.
        options["min_resource"] = max(1, round(et["max_iter"] / eta ** et["s"]))
        options["max_resource"] = et["max_iter"]
    else:
        raise SpecError(f"{where}: give min_iter, or max_iter and s")
    if et.get("strict"):
        notes.append(f"{where}.strict: noted, not used (Optuna's Hyperband has no strict mode)")
    return {"name": "hyperband", "options": options}


def _grid_size(space: dict[str, dict[str, Any]]) -> int | None:
    n = 1
    for p in space.values():
        if p["type"] == "categorical":
            n *= len(p["choices"])
        elif p["type"] == "int":
            n *= (p["high"] - p["low"]) // p.get("step", 1) + 1
        elif p.get("step"):
            n *= int(round((p["high"] - p["low"]) / p["step"])) + 1
        else:
            return None
    return n


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-._")[:100] or "wandb-sweep"


def _method(method: Any, notes: list[str]) -> str:
    """The config's method, a key of METHODS."""
    if method not in METHODS:
        raise SpecError(f"method: {method!r} is not supported (grid, random or bayes)")
    if method == "bayes":
        notes.append("method bayes: searched with Optuna's TPE")
    return str(method)


def _metric(metric: Any) -> tuple[dict[str, Any], str]:
    """The config's metric and its goal (W&B's default: minimize)."""
    if not isinstance(metric, dict) or not metric.get("name"):
        raise SpecError("metric.name: required (the metric the script prints or writes)")
    for key in metric:
        if key not in ("name", "goal", "target"):
            raise SpecError(f"metric.{key}: not supported (name, goal, target)")
    goal = metric.get("goal", "minimize")
    if goal not in ("minimize", "maximize"):
        raise SpecError(f"metric.goal: {goal!r}: minimize or maximize")
    return metric, goal


def _space(params: Any, method: str, notes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(search space, fixed arguments): W&B's constants are passed, not searched."""
    if not isinstance(params, dict) or not params:
        raise SpecError("parameters: at least one parameter")
    space: dict[str, Any] = {}
    fixed: dict[str, Any] = {}
    for pname, p in params.items():
        kind, value = _param(str(pname), p, notes)
        (fixed if kind == "fixed" else space)[str(pname)] = value
    if not space:
        raise SpecError("parameters: every parameter is a constant: nothing to search")
    if method == "grid":
        for pname, p in space.items():
            if p["type"] == "float" and not p.get("step"):
                raise SpecError(
                    f"parameters.{pname}: grid search needs values, int_uniform or q_uniform"
                )
    return space, fixed


def _trials(trials: Any, method: str, space: dict[str, Any], notes: list[str]) -> Any:
    """budget.trials: run_cap, at most a grid's size; without it, the grid's size or the default."""
    if trials is not None and (type(trials) is not int or trials < 1):
        raise SpecError("run_cap: an integer >= 1 is required")
    if method == "grid":
        size = _grid_size(space) or DEFAULT_TRIALS
        trials = min(trials, size) if trials else size
    elif trials is None:
        trials = DEFAULT_TRIALS
        notes.append(f"run_cap not set: {DEFAULT_TRIALS} trials (W&B would run until stopped)")
    return trials


def _trainer(config: dict[str, Any], code_dir: str | None, fixed: dict[str, Any]) -> dict[str, Any]:
    """The trainer section: W&B's program or command, run from `code_dir` with the constants."""
    command, program = config.get("command"), config.get("program")
    if command is None and program is None:
        raise SpecError("program: required (the script the sweep runs), or command")
    # The script logs with wandb.log: its run's transaction log is where its metrics are.
    trainer: dict[str, Any] = {"metrics": {"collector": "wandb"}}
    if program is not None:
        trainer["program"] = str(program)
    if command is not None:
        if not isinstance(command, list) or not command:
            raise SpecError("command: a non-empty list of strings")
        trainer["command"] = [str(c) for c in command]
    if code_dir is not None:
        trainer["code_dir"] = str(code_dir)
    if fixed:
        trainer["params"] = fixed
    return trainer


def to_spec(
    config: dict[str, Any],
    *,
    name: str | None = None,
    fallback_name: str = "wandb-sweep",
    code_dir: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """A W&B sweep config -> (raw native spec, notes on what was approximated or ignored).

    The sweep's name: `name` (the command line's), else the config's, else `fallback_name`.
    """
    if not isinstance(config, dict):
        raise SpecError("a W&B sweep config is a mapping")
    for key in config:
        if key not in TOP_KEYS:
            raise SpecError(f"{key}: not supported (supported: {', '.join(TOP_KEYS)})")
    notes = [f"{k}: noted, not used" for k in NOTED if k in config]
    method = _method(config.get("method"), notes)
    metric, goal = _metric(config.get("metric"))
    space, fixed = _space(config.get("parameters"), method, notes)
    trials = _trials(config.get("run_cap"), method, space, notes)
    trainer = _trainer(config, code_dir, fixed)
    budget: dict[str, Any] = {"trials": int(trials)}
    if metric.get("target") is not None:
        budget["target"] = metric["target"]
    et = config.get("early_terminate")
    spec = {
        "name": _name(str(name or config.get("name") or fallback_name)),
        "objective": {"metric": str(metric["name"]), "direction": goal},
        "search_space": space,
        "sampler": {"name": METHODS[method]},
        "pruner": _pruner(et, notes) if et is not None else {"name": "none"},
        "budget": budget,
        "trainer": trainer,
    }
    return spec, notes


class WandbImporter(Importer):
    """A W&B sweep config; the program it runs sits next to it."""

    name = "wandb"
    reads = "a W&B sweep config (YAML)"

    def read(self, path: Path) -> dict[str, Any]:
        return load_config(path)

    def to_spec(
        self, config: dict[str, Any], *, source: Path, name: str | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        code_dir = str(source.parent.resolve())
        return to_spec(config, name=name, fallback_name=source.stem, code_dir=code_dir)
