"""The driver–worker protocol: what a lane's workers send, and what the driver answers.

Workers never touch Optuna or MLflow. They post events to the broker actor (`NextTrial`,
`Report`, `Finished`, `Failed`, `Restarted`, `Log`, `Checkpointed`); the driver drains them,
writes the stores, and answers under a key built here, so broker and driver can never disagree
on a key's shape. A `NextTrial` is answered with an `Assignment` or a `Stop`, a `Report` with a
`Decision`, a `Suggest` (an Optuna objective's `suggest_*`, `sweeps.optimize`) with
`Suggested`. Anything else is a bug: `check_answer` raises instead of letting a rank wait forever.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

from sweeps.common.errors import ProtocolError

Key = tuple[Any, ...]


class Decision(StrEnum):
    """The answer to an epoch's report; every rank of the trial gets the same one."""

    CONTINUE = "continue"
    PRUNE = "prune"  # the pruner stopped the trial: it ends PRUNED
    CANCEL = "cancel"  # the sweep is cancelled, or the trial is broken: it ends FAIL


# ----- keys ---------------------------------------------------------------------------------
def next_key(lane: str, seq: int) -> Key:
    """The lane's `seq`-th trial assignment."""
    return ("next", lane, seq)


def step_key(lane: str, seq: int, step: int) -> Key:
    """The decision for step `step` of the lane's `seq`-th trial."""
    return ("step", lane, seq, step)


def suggest_key(lane: str, seq: int, call: int) -> Key:
    """The value of the `call`-th `suggest_*` of the lane's `seq`-th trial (sweeps.optimize)."""
    return ("suggest", lane, seq, call)


def board_key(*parts: Any) -> Key:
    """A value ranks of one trial share (a rendezvous address chosen by rank 0)."""
    return ("board", *parts)


# ----- what a lane runs ----------------------------------------------------------------------
@dataclass(frozen=True)
class TrainerSettings:
    """How every trial of a sweep is run. Travels in each Assignment, not with the lane, so one
    warm lane can serve several sweeps of the same code."""

    sweep: str = ""  # the sweep's name (its checkpoints' names on another sweep's warm lane)
    entrypoint: str | None = None  # "module:function"; None: the built-in trainer
    code_dir: str | None = None  # where the entrypoint imports from, on the worker
    data_dir: str | None = None
    checkpoint_every: int = 1
    checkpoint_min_interval_s: float = 0.0
    log_models: bool = True
    pickle_models: bool = False
    # tracking.model: best (sweeps/spec/model_pick.py): the metric and direction the built-in
    # trainer keeps its best epoch's weights by, for the trial's model; None: the last weights.
    model_metric: str | None = None
    model_direction: str = "maximize"
    prunes: bool = True  # a report's answer may prune (the sweep has a pruner)
    program: dict[str, Any] | None = None  # program mode (sweeps.worker.program.settings)
    callable: bytes | None = None  # a function handed to sweeps.run, cloudpickled
    callable_digest: str | None = None


@dataclass(frozen=True)
class WarmUp:
    """What a lane prepares before its first trial: the user's imports, or (built-in trainer)
    its data on the device and one step."""

    entrypoint: str | None = None
    code_dir: str | None = None
    config: dict[str, Any] | None = None  # the built-in trainer's config
    log_models: bool = False


# ----- answers ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Assignment:
    """One trial for a lane: what every rank runs."""

    trial_number: int
    seed: int
    params: dict[str, Any]
    config: dict[str, Any]
    seq: int
    trainer: TrainerSettings = field(default_factory=TrainerSettings)
    # A persisted checkpoint of an earlier attempt of this trial (a resumed sweep): the trial
    # continues from it instead of from epoch 0.
    resume_from: str | None = None


@dataclass(frozen=True)
class Stop:
    """No trial for this lane: its workers return and the lane's `fit()` ends. With
    `keep_warm`, a service's broker holds the lane idle instead, for the next sweep."""

    reason: str = ""
    keep_warm: bool = False


NextAnswer = Assignment | Stop


@dataclass(frozen=True)
class Suggested:
    """The answer to a `Suggest`: the value the driver's `optuna.Trial` sampled, or why it
    could not (Optuna's own message, raised on every rank)."""

    name: str
    value: Any = None
    error: str = ""


def check_answer(key: Key, value: Any) -> Any:
    """The one rule for answers: a next-key takes an Assignment or a Stop, a step-key a
    Decision; board values are free-form. Raises ProtocolError for anything else."""
    kind = key[0] if key else None
    if kind == "next" and not isinstance(value, Assignment | Stop):
        raise ProtocolError(f"answer to {key} must be Assignment or Stop, not {value!r:.200}")
    if kind == "step" and not isinstance(value, Decision):
        raise ProtocolError(f"answer to {key} must be a Decision, not {value!r:.200}")
    if kind == "suggest" and not isinstance(value, Suggested):
        raise ProtocolError(f"answer to {key} must be Suggested, not {value!r:.200}")
    if kind not in ("next", "step", "suggest", "board"):
        raise ProtocolError(f"unknown answer key {key!r:.200}")
    return value


# ----- results ------------------------------------------------------------------------------
@dataclass
class TrialResult:
    """What rank 0 hands back when a trial ends without an error (complete or pruned)."""

    state: Literal["complete", "pruned"]
    metrics: dict[str, float] = field(default_factory=dict)
    train_seconds: float = 0.0
    reason: str = ""
    steps: int = 0
    worker_rss_mb: float = 0.0
    hardware: dict[str, str] = field(default_factory=dict)
    # The trained model as an MLflow model folder (tar.gz), built on the worker so the driver
    # never imports torch; its format ("pyfunc", "pt2", "pickle"), or why there is none.
    model_package: bytes | None = None
    model_format: str = ""
    model_error: str = ""
    # The report the model's weights are from (tracking.model: best), and its metrics; None:
    # the weights the trial ended with.
    model_step: int | None = None
    model_metrics: dict[str, float] = field(default_factory=dict)
    dataset: dict[str, Any] | None = None
    # A tar.gz of the files rank 0 wrote under the trial dir (program mode).
    artifacts: bytes | None = None
    # Tags for the trial's MLflow run that link what it wrote outside MLflow (an AI Platform
    # job dir: names.JOB_DIR, OUTPUT_URI, OUTPUT_FILES).
    links: dict[str, str] = field(default_factory=dict)


# ----- events (worker -> broker -> driver) --------------------------------------------------
@dataclass(frozen=True)
class Event:
    lane: str
    seq: int

    @property
    def key(self) -> tuple[str, int]:
        """The running trial this event is about: (lane, seq)."""
        return (self.lane, self.seq)


@dataclass(frozen=True)
class NextTrial(Event):
    """The lane wants its `seq`-th trial."""


@dataclass(frozen=True)
class Report(Event):
    step: int
    metrics: dict[str, float]


@dataclass(frozen=True)
class Finished(Event):
    result: TrialResult


@dataclass(frozen=True)
class Failed(Event):
    error: str


@dataclass(frozen=True)
class Restarted(Event):
    """Ray Train restarted the lane's worker group; the trial resumes from its checkpoint."""

    restarts: int


@dataclass(frozen=True)
class Log(Event):
    text: str
    rank: int = 0


@dataclass(frozen=True)
class Checkpointed(Event):
    """Rank 0 persisted a checkpoint of the trial at `step`, at `path` (under the lanes'
    storage root): a resumed sweep continues the trial from there."""

    step: int
    path: str


@dataclass(frozen=True)
class UserMetrics(Event):
    """`sweeps.log` from training code: into the trial's run, not seen by the pruner."""

    step: int
    metrics: dict[str, float]


@dataclass(frozen=True)
class UserArtifact(Event):
    """`sweeps.log_artifact` / `log_figure`: a file for the trial's run."""

    name: str
    data: bytes


@dataclass(frozen=True)
class Suggest(Event):
    """A define-by-run objective (sweeps.optimize) asks for a param: the driver calls
    `trial.<method>(name, **args)` on its optuna.Trial, so the study records the distribution."""

    call: int  # the how-many-th suggest of the trial: every rank's key for the same answer
    method: str  # "suggest_float", "suggest_int" or "suggest_categorical"
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class TrialAttr(Event):
    """`trial.set_user_attr(key, value)` in a define-by-run objective."""

    name: str
    value: Any


@dataclass(frozen=True)
class StopStudy(Event):
    """No more trials: the objective raised an exception `optimize(catch=...)` does not
    catch. Running trials finish, as in Optuna, and `optimize` raises the exception again."""

    reason: str
    error: bytes | None = None  # the exception, cloudpickled


class Channel(Protocol):
    """The driver's side of the broker: events in, answers out (`BrokerChannel` on Ray; the
    driver's unit tests use a fake)."""

    def poll(self, timeout: float) -> list[Event]:
        """The events the lanes posted, waiting up to `timeout` for the first."""
        ...

    def answer(self, key: Key, value: Any) -> None:
        """Queue an answer (checked by `check_answer`); it goes out at `flush`."""

    def flush(self) -> None:
        """Send the queued answers, in one round trip."""
