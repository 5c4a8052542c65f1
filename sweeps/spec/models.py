"""The sweep spec: one pydantic model tree, YAML in, validated object out.

Everything downstream (driver, lanes, trainer, tracking) takes a :class:`Spec`, never a raw dict,
so a typo is caught once, here, with the field path in the message.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.spec.checkpoints import Checkpoints, check_checkpoints
from sweeps.spec.command import DEFAULT_COMMAND, check_command
from sweeps.spec.data import DataSpec, check_data
from sweeps.spec.evaluate import EvaluateSpec, check_evaluate
from sweeps.spec.params import HUGE, CategoricalParam, FloatParam, Param, _Model
from sweeps.spec.pbt import PbtSpec, check_pbt
from sweeps.spec.retries import Retries
from sweeps.spec.stop import StopWhen

SAMPLERS = tuple(names.SAMPLERS)
PRUNERS = tuple(names.PRUNERS)
MODELS = ("mlp", "cnn", "resnet")
DATASETS = ("digits", "mnist", "fashion_mnist", "cifar10")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def registered(table: dict[str, str], value: str) -> str:
    """A name from one of the extension tables (`sweeps.common.names`), checked as a Literal
    of the table's names would be, with the same message."""
    if value not in table:
        quoted = [repr(k) for k in table]
        choices = ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
        raise ValueError(f"unknown value {value!r}; input should be {choices}")
    return value


class Objective(_Model):
    metric: str = "val_accuracy"
    direction: Literal["maximize", "minimize"] = "maximize"


class SamplerSpec(_Model):
    name: str = "tpe"  # a key of names.SAMPLERS
    seed: int | None = None
    options: dict[str, Any] = {}

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return registered(names.SAMPLERS, v)


class PrunerSpec(_Model):
    name: str = "median"  # a key of names.PRUNERS
    options: dict[str, Any] = {}
    # `patient` wraps another pruner: {name: patient, wraps: {name: median}, options: {patience: 2}}
    wraps: PrunerSpec | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return registered(names.PRUNERS, v)


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
    # End the search once it converged (sweeps.driver.convergence).
    stop_when: StopWhen | None = None
    # Also cancel running trials once spend crosses a limit (default: let them finish).
    hard: bool = False
    # A trial running longer than this fails as `timed out` (its checkpoint is kept).
    trial_timeout_s: float | None = Field(None, gt=0, le=HUGE)


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
    # Priced at the table's spot price (conf/machines.yaml); the machine type must have one.
    preemptible: bool = False
    # Each worker is billed as a whole machine of machine_type, as AI Platform bills each
    # replica (a VM of its own); otherwise a worker pays its share of one (tracking.costs).
    whole_machines: bool = False
    # Restarts of a trial's worker group after a lost worker before the trial is marked FAIL.
    max_failures: int = Field(2, ge=0, le=100)
    # pack: a trial's workers on as few nodes as fit; spread: on as many (one lost node then
    # costs fewer workers, and the group restarts on the others).
    placement: Literal["pack", "spread"] = "pack"
    # A container image the trials' workers run in (Ray's `image_uri`: podman on every node
    # that runs trials; the image holds the code, and the same Ray and Python as the cluster).
    image: str | None = Field(None, min_length=1, pattern=r"^\S+$")

    @field_validator("gpus_per_worker")
    @classmethod
    def _fraction(cls, v: float) -> float:
        if v > 1 and v != int(v):
            raise ValueError("a worker takes a fraction of one GPU or a whole number of GPUs")
        return v


class MetricsSpec(_Model):
    """Where program mode reads a script's metrics (see `sweeps.worker.collectors`)."""

    collector: str = "stdout"  # a key of names.COLLECTORS
    # stdout: groups (name, value) per match, Katib's style, or one group: the objective's value.
    regex: str | None = None
    # file: a JSON object or JSON-lines file, relative to the trial dir (default metrics.json).
    path: str | None = None
    # Keep only these metrics (the objective is always kept).
    names: list[str] | None = Field(None, min_length=1)

    @field_validator("collector")
    @classmethod
    def _collector(cls, v: str) -> str:
        return registered(names.COLLECTORS, v)

    @field_validator("regex")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            rx = re.compile(v)
        except re.error as e:
            raise ValueError(f"not a regular expression: {e}") from None
        if rx.groups == 0:
            raise ValueError("needs a capture group: (name)(value), or (value) of the objective")
        bad = set(rx.groupindex) - {"name", "value", "step"}
        if bad:
            raise ValueError(f"named groups may be name, value, step; not {sorted(bad)}")
        return v

    @field_validator("path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        if v is not None and (v.startswith("/") or ".." in v.split("/") or not v.strip()):
            raise ValueError("a path inside the trial dir (SWEEPS_TRIAL_DIR), e.g. metrics.json")
        return v

    @model_validator(mode="after")
    def _fits_collector(self) -> MetricsSpec:
        if self.regex is not None and self.collector != "stdout":
            raise ValueError("regex: only with collector stdout")
        if self.path is not None and self.collector != "file":
            raise ValueError("path: only with collector file")
        return self


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
    # Program mode: run any script on every worker; params become its arguments (W&B macros).
    program: str | None = None
    command: list[str] | None = Field(None, min_length=1)
    metrics: MetricsSpec | None = None
    # A pruned script's process group gets SIGTERM, then SIGKILL after this long.
    stop_grace_s: float = Field(10.0, ge=0, le=3600)

    @property
    def command_line(self) -> list[str] | None:
        """The program-mode command (W&B's default when only `program` is given), else None."""
        if self.command:
            return list(self.command)
        return list(DEFAULT_COMMAND) if self.program else None

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
    # How long a lane's workers may wait to be placed (Ray Train's worker-group start timeout);
    # past it Ray Train tries once more, then the sweep fails, saying what the lane waited for.
    lane_start_timeout_s: float = Field(60.0, gt=0, le=HUGE)


class Tracking(_Model):
    uri: str | None = None
    experiment: str | None = None
    log_models: bool = True
    # Which weights become the trial's model: `best` (the epoch with the best objective) or
    # `last`; unset, `best` where the trainer can keep it (sweeps/spec/model_pick.py).
    model: Literal["best", "last"] | None = None
    # A user's nn.Module that torch.export cannot trace is kept by pickle only if this says so
    # (loading a pickled model runs its code); the model then carries the format it was saved in.
    pickle_models: bool = False
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
# What the built-in trainer (trainer.loop) reports: each epoch, then param_count at its end.
TRAINER_METRICS = (*names.TRAINER_EPOCH_METRICS, "param_count")


def check_reported(spec: Spec) -> None:
    """With the built-in trainer, each objective must be a metric it reports (or one the driver
    computes): `val_acc` is a typo found now, not a sweep whose every trial fails."""
    t = spec.trainer
    if t.entrypoint is not None or t.command_line is not None:
        return  # the user's code reports what it reports
    known = tuple(dict.fromkeys((*TRAINER_METRICS, *COMPUTED_METRICS)))
    for i, o in enumerate(spec.objective_list()):
        if o.metric in known:
            continue
        where = f"objectives.{i}.metric" if spec.multi_objective else "objective.metric"
        close = difflib.get_close_matches(o.metric, known, n=1, cutoff=0.5)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise SpecError(
            f"{where}: the built-in trainer does not report '{o.metric}'; {hint}"
            f"it reports {', '.join(known)}"
        )


class Spec(_Model):
    name: str
    objective: Objective = Objective()
    # Several objectives make a multi-objective study (a Pareto front); pruning is then off.
    objectives: list[Objective] | None = Field(None, min_length=2, max_length=8)
    warm_start: WarmStart | None = None
    search_space: dict[str, Param] = {}
    # Outcome constraints, `NAME OP NUMBER` over final metrics, params and costs
    # (sweeps/search/constraints.py reads them; `validate` checks the names it can know).
    constraints: list[str] = []
    sampler: SamplerSpec = SamplerSpec()
    pruner: PrunerSpec = PrunerSpec()
    budget: Budget = Budget()
    resources: Resources = Resources()
    trainer: TrainerSpec = TrainerSpec()
    execution: Execution = Execution()
    tracking: Tracking = Tracking()
    retries: Retries = Retries()
    data: DataSpec = DataSpec()  # the locked test split (sweeps/spec/data.py)
    _data = model_validator(mode="after")(check_data)
    evaluate: EvaluateSpec | None = None  # replicated winners (sweeps/spec/evaluate.py)
    _evaluate = model_validator(mode="after")(check_evaluate)
    checkpoints: Checkpoints | None = None  # sweep-wide retention (sweeps/spec/checkpoints.py)
    _checkpoints = model_validator(mode="after")(check_checkpoints)
    search: PbtSpec | None = None  # population-based training (sweeps/spec/pbt.py)
    _search = model_validator(mode="after")(check_pbt)
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
            and self.trainer.command_line is None
            and self.trainer.dataset != "digits"
            and not (self.trainer.data_dir)
        ):
            raise ValueError(f"trainer.data_dir: required for dataset '{self.trainer.dataset}'")
        return self

    @model_validator(mode="after")
    def _image(self) -> Spec:
        if self.resources.image and self.trainer.code_dir:
            # Ray's image_uri takes no working dir or path: a host folder is not in the image.
            raise ValueError(
                "resources.image: the trials' code comes in the image; drop trainer.code_dir"
            )
        return self

    @model_validator(mode="after")
    def _program_mode(self) -> Spec:
        t = self.trainer
        command = t.command_line
        if command is None:
            if t.metrics is not None:
                raise ValueError("trainer.metrics: only with trainer.command or trainer.program")
            return self
        if t.entrypoint is not None:
            raise ValueError("trainer.command: runs a program; drop trainer.entrypoint")
        try:
            check_command(command, t.program)
        except SpecError as e:
            raise ValueError(str(e)) from None
        return self

    def objective_list(self) -> list[Objective]:
        return list(self.objectives) if self.objectives else [self.objective]

    @property
    def multi_objective(self) -> bool:
        return bool(self.objectives)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", by_alias=True), sort_keys=False)
