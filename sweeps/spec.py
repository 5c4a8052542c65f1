"""The sweep spec: one pydantic model tree, YAML in, validated object out.

Everything downstream (driver, lanes, trainer, tracking) takes a :class:`Spec`, never a raw dict,
so a typo is caught once, here, with the field path in the message.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sweeps.errors import SpecError

SAMPLERS = ("tpe", "random", "grid", "cmaes", "gp", "nsga2", "qmc")
PRUNERS = ("median", "percentile", "successive_halving", "hyperband", "patient", "none")
MODELS = ("mlp", "cnn", "resnet")
DATASETS = ("digits", "mnist", "fashion_mnist", "cifar10")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# Values past this are typos (1e400 epochs), not intentions; bounding them keeps a bad spec from
# turning into an hour-long allocation.
HUGE = 1e12


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


Scalar = str | int | float | bool


class _ParamBase(_Model):
    # `when: {optimizer: sgd}` makes the parameter exist only when another one has that value
    # (or one of a list of values): a conditional search space.
    when: dict[str, Scalar | list[Scalar]] | None = None


class FloatParam(_ParamBase):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = None

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        for v in (self.low, self.high):
            if not math.isfinite(v) or abs(v) > HUGE:
                raise ValueError(f"bounds must be finite numbers below {HUGE:g}")
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be < high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("log scale needs low > 0")
        if self.step is not None and (self.step <= 0 or self.log):
            raise ValueError("step must be > 0 and cannot be combined with log")
        return self


class IntParam(_ParamBase):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = 1

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        if abs(self.low) > HUGE or abs(self.high) > HUGE:
            raise ValueError(f"bounds must be below {HUGE:g}")
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be < high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("log scale needs low > 0")
        if self.step <= 0 or (self.log and self.step != 1):
            raise ValueError("step must be > 0 (and 1 with log)")
        return self


class CategoricalParam(_ParamBase):
    type: Literal["categorical"]
    choices: list[Scalar | None]

    @field_validator("choices")
    @classmethod
    def _non_empty(cls, v: list[Any]) -> list[Any]:
        if not v:
            raise ValueError("choices must not be empty")
        if len({repr(c) for c in v}) != len(v):
            raise ValueError("choices must be distinct")
        return v


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class Objective(_Model):
    metric: str = "val_accuracy"
    direction: Literal["maximize", "minimize"] = "maximize"


class SamplerSpec(_Model):
    name: Literal["tpe", "random", "grid", "cmaes", "gp", "nsga2", "qmc"] = "tpe"
    seed: int | None = None
    options: dict[str, Any] = {}


class PrunerSpec(_Model):
    name: Literal["median", "percentile", "successive_halving", "hyperband", "patient", "none"] = (
        "median"
    )
    options: dict[str, Any] = {}
    # `patient` wraps another pruner: {name: patient, wraps: {name: median}, options: {patience: 2}}
    wraps: PrunerSpec | None = None


class Budget(_Model):
    trials: int = Field(20, ge=1, le=1_000_000)
    parallel: int = Field(1, ge=1, le=1024)
    timeout_s: float | None = Field(None, gt=0, le=HUGE)
    max_failed_trials: int | None = Field(None, ge=0)
    # Money and GPU time: no launch whose forecast cost would cross the limit.
    max_cost_usd: float | None = Field(None, gt=0, le=HUGE)
    max_gpu_hours: float | None = Field(None, gt=0, le=HUGE)
    # Stop launching once the (single) objective reaches this value.
    target: float | None = None
    # Also cancel running trials once spend crosses a limit (default: let them finish).
    hard: bool = False


class WarmStart(_Model):
    from_: list[str] = Field(alias="from", min_length=1)
    top_k: int | None = Field(None, ge=1, le=10_000)
    # Copy finished trials into the new study (True) or only enqueue the top_k configurations.
    copy_trials: bool = True


class Resources(_Model):
    workers: int = Field(1, ge=1, le=4096)
    cpus_per_worker: float = Field(1.0, gt=0, le=1024)
    # Fractions (0.25) let several lanes share one GPU.
    gpus_per_worker: float = Field(0.0, ge=0, le=64)
    machine_type: str = "local"
    # Restarts of a trial's worker group after a lost worker before the trial is marked FAIL.
    max_failures: int = Field(2, ge=0, le=100)

    @field_validator("gpus_per_worker")
    @classmethod
    def _fraction(cls, v: float) -> float:
        if v > 1 and v != int(v):
            raise ValueError("a worker takes a fraction of one GPU or a whole number of GPUs")
        return v


class TrainerSpec(_Model):
    model: Literal["mlp", "cnn", "resnet"] = "mlp"
    dataset: Literal["digits", "mnist", "fashion_mnist", "cifar10"] = "digits"
    # Local folder or gs://bucket/prefix holding the dataset files (digits needs none).
    data_dir: str | None = None
    epochs: int = Field(10, ge=1, le=100_000)
    batch_size: int = Field(64, ge=1, le=1_000_000)
    val_fraction: float = Field(0.2, gt=0, lt=1)
    limit: int | None = Field(None, ge=10)
    # Fixed hyper-parameters, merged under the trial's sampled params.
    params: dict[str, Any] = {}
    # "pkg.module:function" runs user code instead of the built-in loop.
    entrypoint: str | None = None
    # Folder shipped to workers (Ray runtime env working_dir) so the entrypoint imports there.
    code_dir: str | None = None
    compile: bool = False

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", v):
            raise ValueError("must look like 'package.module:function'")
        return v

    @field_validator("data_dir")
    @classmethod
    def _data_dir(cls, v: str | None) -> str | None:
        if v is not None and "://" in v and not v.startswith(("gs://", "file://")):
            raise ValueError("must be a local folder or a gs://bucket/prefix URI")
        return v


class Execution(_Model):
    # lanes: warm worker groups run many trials each; isolated: one Ray Train run per trial.
    mode: Literal["lanes", "isolated"] = "lanes"
    # Restart a lane's worker group after this many trials (0: never), bounding slow leaks.
    recycle_after_trials: int = Field(0, ge=0)
    # ... or once a worker's memory grew by this fraction over its first trial (0: never).
    recycle_rss_growth: float = Field(0.5, ge=0)
    checkpoint_every: int = Field(1, ge=0)
    # ... but not more often than this: a lost worker costs at most this much redone work,
    # and trials shorter than it never pay for a checkpoint.
    checkpoint_min_interval_s: float = Field(5.0, ge=0, le=HUGE)
    keep_checkpoints: int = Field(2, ge=1)


class Tracking(_Model):
    uri: str | None = None
    experiment: str | None = None
    log_models: bool = True
    system_metrics: bool = False

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str | None) -> str | None:
        if v is not None and not re.match(
            r"^(sqlite:///|https?://|postgresql(\+\w+)?://|file:|/)", v
        ):
            raise ValueError("must be sqlite:///PATH, http(s)://HOST, postgresql://… or a path")
        return v


# Resources the sweep itself may search, for cost/speed trade-offs: each shape gets a lane.
SEARCHABLE_RESOURCES = ("resources.workers", "resources.gpus_per_worker", "resources.machine_type")
COMPUTED_METRICS = ("cost_usd", "gpu_hours", "train_seconds", "param_count")


class Spec(_Model):
    name: str
    objective: Objective = Objective()
    # Several objectives make a multi-objective study (a Pareto front); pruning is then off.
    objectives: list[Objective] | None = Field(None, min_length=2, max_length=8)
    warm_start: WarmStart | None = None
    search_space: dict[str, Param] = {}
    sampler: SamplerSpec = SamplerSpec()
    pruner: PrunerSpec = PrunerSpec()
    budget: Budget = Budget()
    resources: Resources = Resources()
    trainer: TrainerSpec = TrainerSpec()
    execution: Execution = Execution()
    tracking: Tracking = Tracking()
    storage: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must be 1-100 letters, digits, '_', '.' or '-'")
        return v

    @field_validator("storage")
    @classmethod
    def _storage(cls, v: str | None) -> str | None:
        if v is not None and not re.match(
            r"^(sqlite:///|postgresql(\+\w+)?://|mysql(\+\w+)?://)", v
        ):
            raise ValueError("must be an Optuna RDB URL: sqlite:///PATH or postgresql://…")
        return v

    @model_validator(mode="after")
    def _conditions(self) -> Spec:
        for pname, p in self.search_space.items():
            if pname.startswith("resources.") and pname not in SEARCHABLE_RESOURCES:
                raise ValueError(
                    f"search_space.{pname}: only {', '.join(SEARCHABLE_RESOURCES)} can be searched"
                )
            if pname == "resources.workers" and isinstance(p, FloatParam):
                raise ValueError(f"search_space.{pname}: must be int or categorical")
            if pname == "resources.machine_type" and not isinstance(p, CategoricalParam):
                raise ValueError(f"search_space.{pname}: must be categorical")
        for pname, p in self.search_space.items():
            for dep, value in (p.when or {}).items():
                if dep == pname:
                    raise ValueError(
                        f"search_space.{pname}.when: a parameter cannot depend on itself"
                    )
                if dep not in self.search_space:
                    raise ValueError(f"search_space.{pname}.when: unknown parameter '{dep}'")
                dp = self.search_space[dep]
                wanted = value if isinstance(value, list) else [value]
                if isinstance(dp, CategoricalParam):
                    bad = [w for w in wanted if w not in dp.choices]
                    if bad:
                        raise ValueError(
                            f"search_space.{pname}.when.{dep}: {bad[0]!r} is not among its choices"
                        )
        if (
            self.trainer.entrypoint is None
            and self.trainer.dataset != "digits"
            and not (self.trainer.data_dir)
        ):
            raise ValueError(f"trainer.data_dir: required for dataset '{self.trainer.dataset}'")
        return self

    def objective_list(self) -> list[Objective]:
        return list(self.objectives) if self.objectives else [self.objective]

    @property
    def multi_objective(self) -> bool:
        return bool(self.objectives)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", by_alias=True), sort_keys=False)


def _set_path(raw: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node: Any = raw
    for k in keys[:-1]:
        if not isinstance(node, dict):
            raise SpecError(f"--set {path}: '{k}' is not a mapping")
        node = node.setdefault(k, {})
        if node is None:
            node = {}
    if not isinstance(node, dict):
        raise SpecError(f"--set {path}: parent is not a mapping")
    node[keys[-1]] = value


def parse_overrides(items: list[str]) -> list[tuple[str, Any]]:
    """`key.path=value` strings to (path, YAML-parsed value) pairs."""
    out = []
    for item in items:
        if "=" not in item:
            raise SpecError(f"--set {item}: expected key.path=value")
        key, _, text = item.partition("=")
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key.strip()):
            raise SpecError(f"--set {item}: bad key path '{key}'")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = text
        out.append((key.strip(), value))
    return out


def format_validation_error(err: ValidationError) -> str:
    """One line: `field.path: problem` for each error, joined by '; '."""
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(
            str(x)
            for x in e["loc"]
            if not (isinstance(x, str) and x in ("float", "int", "categorical"))
        )
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "literal_error":
            msg = f"unknown value {e.get('input')!r}; {msg.lower()}"
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = len(err.errors()) - 5
    line = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    return " ".join(line.split())


def spec_from_dict(raw: Any, overrides: list[str] | None = None) -> Spec:
    if not isinstance(raw, dict):
        raise SpecError("spec: the top level must be a mapping of fields")
    raw = dict(raw)
    for path, value in parse_overrides(overrides or []):
        _set_path(raw, path, value)
    try:
        return Spec.model_validate(raw)
    except ValidationError as err:
        raise SpecError(f"invalid spec: {format_validation_error(err)}") from None
    except (TypeError, ValueError, RecursionError) as err:
        raise SpecError(f"invalid spec: {' '.join(str(err).split())}") from None


def load_spec(
    path: str | Path, overrides: list[str] | None = None, name: str | None = None
) -> Spec:
    """Read, override and validate a spec file; every problem is a one-line :class:`SpecError`."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"spec file not found: {p}")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise SpecError(f"{p}: YAML error{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{p}: cannot read: {err}") from None
    if raw is None:
        raise SpecError(f"{p}: the spec is empty")
    if name is not None and isinstance(raw, dict):
        raw = {**raw, "name": name}
    spec = spec_from_dict(raw, overrides)
    code_dir = spec.trainer.code_dir
    if code_dir and not Path(code_dir).is_absolute():
        # A spec ships next to its code: resolve code_dir from the spec file, not the shell.
        resolved = str((p.parent / code_dir).resolve())
        spec = spec.model_copy(
            update={"trainer": spec.trainer.model_copy(update={"code_dir": resolved})}
        )
    return spec
