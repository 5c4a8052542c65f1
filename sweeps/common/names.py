"""Every name sweeps writes into a store, and every module it names as a string.

Optuna study and trial user attributes, MLflow run tags, registry model and version tags, and
the "module:function" entry points and module paths that no import statement shows. Stores
written by earlier releases are read with these same strings, so a name here never changes;
`tests/test_names.py` checks that no other module spells one out.
"""

from __future__ import annotations

from typing import Any

# --- Optuna study attributes: the sweep's record --------------------------------------------
STATE = "sweeps.state"  # study: sweep state (running, finished, ...); run: trial state
STOP_REASON = "sweeps.stop_reason"  # why the sweep ended, one line
CONVERGED = "sweeps.converged"  # budget.stop_when's evidence (JSON); also a parent run tag
WALL_S = "sweeps.wall_s"  # seconds from the command's start to the sweep's close, all drivers
SPEC = "sweeps.spec"  # the validated spec as JSON; also a tag on the parent run
OBJECTIVE = "sweeps.objective"  # the objective's metric name (single objective)
OBJECTIVES = "sweeps.objectives"  # the objectives' metric names, in order
CREATED = "sweeps.created"  # when the study was made (epoch seconds)
JOB_ID = "sweeps.job_id"  # the Ray Job that runs the driver of a submitted sweep
JOB_ADDRESS = "sweeps.job_address"  # the Jobs API address that job was submitted to
SWEEPHOST_ADDRESS = "local-sweep-host"  # JOB_ADDRESS of a sweep the local service forked
SUBMITTED = "sweeps.submitted"  # when `submit` queued the sweep (epoch seconds)
OWNER = "sweeps.owner"  # who started the sweep (OS or MLflow user); also a parent run tag
TEAM = "sweeps.team"  # the owner's team (conf/teams.yaml); also a parent run tag
PRIORITY = "sweeps.priority"  # `submit --priority`: high, normal or low (fair share)
# True while the service's arbiter gives the sweep no lane and it holds none (`ls`: queued)
SERVICE_QUEUED = "sweeps.service_queued"
JOB_NAME = "sweeps.name"  # the sweep's name in a Ray Job's metadata
CANCEL_REQUESTED = "sweeps.cancel_requested"  # `cancel` asked; the driver kills its trials
STOP_REQUESTED = "sweeps.stop_requested"  # `stop` asked; the driver drains
INTERRUPT_REQUESTED = "sweeps.interrupt_requested"  # `down` asked; cancel, end interrupted
PAUSE_REQUESTED = "sweeps.pause_requested"  # `pause` asked; trials park at a checkpoint
MLFLOW_EXPERIMENT_ID = "sweeps.mlflow_experiment_id"  # where the sweep's runs are
MLFLOW_PARENT_RUN_ID = "sweeps.mlflow_parent_run_id"  # the sweep's parent run
REQUEUED = "sweeps.requeued"  # how many trials a recovery re-queued (not counted in the budget)
WARM_COUNT = "sweeps.warm_count"  # how many finished trials a warm start copied in
DRIVER_PREFIX = "sweeps.driver."  # + driver id: that driver's heartbeat (time, host, pid)
RUN_OF_TRIAL_PREFIX = "sweeps.run_of_trial."  # + trial number: its MLflow run id
# + trial number: its replicates (`evaluate`): values, mean, std, n, 95% interval. On the
# study: Optuna keeps a finished trial read-only, and replicates run after the search.
REPLICATES_OF_TRIAL_PREFIX = "sweeps.replicates_of_trial."
# Checkpoint retention (`checkpoints:`): + a trial's number: {"bytes", "kept": [[step, path]]}
# of an ended trial's checkpoints still kept; and the sweep's total bytes of those.
CHECKPOINTS_OF_TRIAL_PREFIX = "sweeps.checkpoints_of_trial."
CHECKPOINT_BYTES = "sweeps.checkpoint_bytes"

# --- Optuna trial attributes ------------------------------------------------------------------
DRIVER = "sweeps.driver"  # the driver that claimed the trial
LANE = "sweeps.lane"  # the lane that ran it; also a trial run tag
SEED = "sweeps.seed"  # its seed; also a trial run tag
CHECKPOINT = "sweeps.checkpoint"  # its latest persisted checkpoint's path
CHECKPOINT_STEP = "sweeps.checkpoint_step"  # the step that checkpoint was written at
# Trial config keys that are not params of the run: a packed trainer package (bytes as text).
NOT_LOGGED = frozenset({"package_archive"})
ERROR = "sweeps.error"  # the end of its error; also a trial run tag
RESTARTS = "sweeps.restarts"  # worker-group restarts it survived; also a trial run tag
REQUEUED_FROM = "sweeps.requeued_from"  # a re-queued trial: the number of the one it continues
CANCELLED = "sweeps.cancelled"  # stopped by a cancel/interrupt, not its own failure: resumable
RESUME_CHECKPOINT = "sweeps.resume_checkpoint"  # a re-queued trial: the checkpoint to start from
RESUME_STEP = "sweeps.resume_step"  # a re-queued trial: that checkpoint's step
RESUMED_FROM_TRIAL = "sweeps.resumed_from_trial"  # the trial it resumed; also a run tag
WARM_FROM = "sweeps.warm_from"  # a warm-started trial: "sweep#number" it was copied from
ATTEMPT = "sweeps.attempt"  # which attempt of its params it is (1, 2, ...); also a run tag
RETRY_OF = "sweeps.retry_of"  # a retry: the number of the trial it retries; also a run tag
FAILURE_CAUSE = "sweeps.failure_cause"  # why it failed (worker_lost, oom, ...); also a run tag
RETRIED = "sweeps.retried"  # its failure was retried: not counted against max_failed_trials
PARKED = "sweeps.parked"  # a pause parked it: the checkpoint step it resumes from; run tag
PREEMPTED = "sweeps.preempted"  # the arbiter took its lane: the checkpoint step; run tag
EXTENDS = "sweeps.extends"  # `extend`: the finished trial it continues; also a run tag
EXTENDS_RUN = "sweeps.extends_run"  # `extend`: that trial's MLflow run; also a run tag
EXTEND_EPOCHS = "sweeps.extend_epochs"  # `extend`: the epochs it trains to (its source's + N)
# `search: pbt` (sweeps/driver/pbt_run.py): each segment of a member is a trial of its own
PBT_MEMBER = "sweeps.pbt.member"  # which member of the population (0, 1, ...)
PBT_GENERATION = "sweeps.pbt.generation"  # which of the member's segments (0, 1, ...)
PBT_PARENT = "sweeps.pbt.parent"  # the trial whose last checkpoint the segment starts from
PBT_CLONED = "sweeps.pbt.cloned"  # the member it exploited (its own number: none)
PBT_FINAL = "sweeps.pbt.final"  # the member's last segment: its value is the member's result
PBT_SCHEDULE = "sweeps.pbt.schedule"  # JSON [[first step, params], ...]; also a version tag
PBT_OPS = "sweeps.pbt.ops"  # JSON {param: "* 1.2" | "resample" | "shift left"}: its explore
PBT_METRIC_PREFIX = "pbt."  # + param: its value at each step, a metric of the segment's run

# --- MLflow run tags --------------------------------------------------------------------------
ROLE = "sweeps.role"  # "sweep" on the parent run, "trial" on a trial's run
STUDY = "sweeps.study"  # the Optuna study (the sweep's name)
TRIAL_NUMBER = "sweeps.trial_number"  # the trial's Optuna number
STORAGE = "sweeps.storage"  # the Optuna storage URL, password masked
BEST_TRIAL = "sweeps.best_trial"  # the parent run's best trial, at the sweep's end
WARM_START_FROM = "sweeps.warm_start.from"  # sweeps a warm start read
WARM_START_NOTES = "sweeps.warm_start.notes"  # what a warm start left out, and why
PLOT_NOTES = "sweeps.plot_notes"  # plots that could not be drawn, and why
PROBLEMS = "sweeps.problems"  # what went wrong in a trial that still ended (restarts, lost logs)
MODEL_ERROR = "sweeps.model_error"  # why a trial's model was not logged
MODEL_FORMAT = "sweeps.model_format"  # how a logged model was packaged
DATASET_DIGEST = "sweeps.dataset_digest"  # the training data's digest; also a version tag
RESUMED_FROM_CHECKPOINT = "sweeps.resumed_from_checkpoint"  # the checkpoint a trial went on from
PYTHON = "sweeps.python"  # the driver's Python version
VERSION_PREFIX = "sweeps.version."  # + package: its installed version
HW_PREFIX = "sweeps.hw."  # + key: the trial's hardware (device, workers, ...)
JOB_DIR = "sweeps.job_dir"  # an AI Platform trial: its job's --job-dir, as given (gs://...)
OUTPUT_URI = "sweeps.output_uri"  # an AI Platform trial: its folder there, JOB_DIR/<trial id>/
OUTPUT_FILES = "sweeps.output_files"  # JSON: count, bytes and names of the files found there

# --- Trial metadata reported by the built-in trainer --------------------------------------------
DATASET = "sweeps.dataset"  # the built-in dataset's name
INPUT_SCALING = "sweeps.input_scaling"  # how inputs were scaled; also a version tag for predict
# The metrics the built-in trainer reports each epoch (trainer.loop reports these, and only
# these), then param_count at its end: `sweeps validate` holds an objective to this list.
TRAINER_EPOCH_METRICS = (
    "epoch",
    "train_loss",
    "val_loss",
    "val_accuracy",
    "epoch_seconds",
    "samples_per_s",
    "world_size",
    "shard_size",
    "shard_coverage",
    "shard_overlap",
    "val_rank_spread",
)

# --- Model registry tags ----------------------------------------------------------------------
MANAGED = "sweeps.managed"  # a registered model that sweeps made
SWEEP = "sweeps.sweep"  # version: the sweep it came from
TRIAL = "sweeps.trial"  # version: the trial number
PARAMS = "sweeps.params"  # version: the trial's params as JSON
METRIC = "sweeps.metric"  # version: the objective's metric name
METRIC_VALUE = "sweeps.metric_value"  # version: its value
OBJECTIVE_METRIC = "sweeps.objective_metric"  # version: the metric promotion compared
DIRECTION = "sweeps.direction"  # version: maximize or minimize
DECISION = "sweeps.decision"  # version: why `promote` did or did not move the alias
ROLLBACK = "sweeps.rollback"  # version: what a rollback did
RUN_ID = "sweeps.run_id"  # version: the trial's MLflow run
COST_USD = "sweeps.cost_usd"  # version: the trial's cost
ALIAS_HISTORY_PREFIX = "sweeps.alias_history."  # + alias: the versions it pointed at
PROMOTION_PREFIX = "sweeps.promotion."  # + "model.vN": the decision, on the parent run
# promote --if-better's significance gate (tracking/significance.py) and the locked test split
GATE_TEST = "sweeps.gate_test"  # version: "welch" (t-test on replicates) or "single" (values)
GATE_P_VALUE = "sweeps.p_value"  # version: the test's one-sided p-value
GATE_ALPHA = "sweeps.alpha"  # version: the significance level it was held to
GATE_MIN_EFFECT = "sweeps.min_effect"  # version: the minimum gain asked for, if any
SAMPLES = "sweeps.samples"  # version: its trial's replicate values (JSON list)
HOLDER_SAMPLES = "sweeps.holder_samples"  # version: the alias holder's, as compared against
TEST_METRICS = "sweeps.test_metrics"  # version: its scores on the locked test split (JSON)
TEST_DIGEST = "sweeps.test_digest"  # version: the test split's digest
TEST_NOTE = "sweeps.test_note"  # version: why no test split was scored
REPLICATE_VALUES = "sweeps.replicate_values"  # trial run: its replicates' objective values
REPLICATE_OF = "sweeps.replicate_of"  # replicate run: the trial number whose params it reruns
REPLICATE = "sweeps.replicate"  # replicate run: "i/n", which replicate of how many

# --- Keys inside a trial's trainer settings ---------------------------------------------------
PROGRAM_SETTINGS = "sweeps.program"  # program mode's command and collector

# --- Modules named as strings (entry points imported on workers, processes started with -m) ----
PROGRAM_ENTRYPOINT = "sweeps.worker.program:run_program"
AIPLATFORM_ENTRYPOINT = "sweeps.importers.aiplatform:run_module"
NOTEBOOK_ENTRYPOINT = "sweeps.notebook:train_function"
BUILTIN_ENTRYPOINT = "trainer.loop:train"
JOBS_MODULE = "sweeps.jobs"  # a submitted sweep's driver: python -m, or forked by the zygote
ZYGOTE_MODULE = "sweeps.service.zygote"  # the service's driver forker: python -m
SWEEPHOST_MODULE = "sweeps.service.sweephost"  # a hosted sweep's supervisor, in a zygote fork
CLAIM_MODULE = "sweeps.service.claim"  # holds a service's claim on its stores: python -m
CLAIM_SUFFIX = ".sweeps-service"  # beside a SQLite store: the claim's lock file and its record
CLAIM_PG_KEY = 0x5357_4545_5053  # PostgreSQL advisory lock key of a service's claim on a DB
CLAIM_PG_TABLE = "sweeps_service_claim"  # its holder's record, one row, in that database
CLI_MODULE = "sweeps.cli"  # `sweeps submit` forked by the zygote (sweeps/cli/thin.py)
# The service's fair-share arbiter (sweeps/service/arbiter.py): a detached named Ray actor.
ARBITER_ACTOR = "sweeps-arbiter"
ARBITER_NAMESPACE = "sweeps"  # the service's namespace (its broker and lane host too)
# What the zygote imports before it forks a driver.
DRIVER_WARM_MODULES = ("sweeps.spec", "sweeps.driver.assemble")
# Entry points that earlier releases stored in specs, and what they are now.
LEGACY_ENTRYPOINTS = {
    "sweeps.program:run_program": PROGRAM_ENTRYPOINT,
    "sweeps.aiplatform:run_module": AIPLATFORM_ENTRYPOINT,
}


# --- Extension tables: the name a spec or command uses -> "module:Class" that implements it ----
# Program mode's metric collectors: subclasses of sweeps.worker.collectors.base.Collector.
COLLECTORS = {
    "stdout": "sweeps.worker.collectors.stdout:StdoutCollector",
    "file": "sweeps.worker.collectors.file:FileCollector",
    "hypertune": "sweeps.worker.collectors.hypertune:HypertuneCollector",
    "tensorboard": "sweeps.worker.collectors.tensorboard:TensorboardCollector",
    "wandb": "sweeps.worker.collectors.wandb:WandbCollector",
}
# Search strategies: subclasses of optuna.samplers.BaseSampler; a spec's `sampler.options` are
# the class's keyword arguments.
SAMPLERS = {
    "tpe": "sweeps.search.tpe:TPESampler",  # Optuna's, with a bounded history
    "random": "optuna.samplers:RandomSampler",
    "grid": "optuna.samplers:GridSampler",
    "cmaes": "optuna.samplers:CmaEsSampler",
    "gp": "optuna.samplers:GPSampler",
    "nsga2": "optuna.samplers:NSGAIISampler",
    "qmc": "optuna.samplers:QMCSampler",
}
# Pruners: subclasses of optuna.pruners.BasePruner.
PRUNERS = {
    "median": "optuna.pruners:MedianPruner",
    "percentile": "optuna.pruners:PercentilePruner",
    "successive_halving": "optuna.pruners:SuccessiveHalvingPruner",
    "hyperband": "optuna.pruners:HyperbandPruner",
    "patient": "optuna.pruners:PatientPruner",
    "none": "optuna.pruners:NopPruner",
}
# Other tools' configs: subclasses of sweeps.importers.base.Importer (`sweeps import NAME FILE`).
IMPORTERS = {
    "wandb": "sweeps.importers.wandb:WandbImporter",
    "aiplatform": "sweeps.importers.aiplatform:AIPlatformImporter",
}


def run_of_trial(number: int) -> str:
    """Study attribute: the MLflow run id of trial `number`."""
    return f"{RUN_OF_TRIAL_PREFIX}{number}"


def replicates_of_trial(number: int) -> str:
    """Study attribute: the replicate summary of trial `number` (`evaluate`)."""
    return f"{REPLICATES_OF_TRIAL_PREFIX}{number}"


def driver_beat(driver_id: str) -> str:
    """Study attribute: a driver's heartbeat."""
    return f"{DRIVER_PREFIX}{driver_id}"


def requested(kind: str) -> str:
    """Study attribute: a `stop`, `cancel`, `pause` or `down` (interrupt) request."""
    return {
        "stop": STOP_REQUESTED,
        "cancel": CANCEL_REQUESTED,
        "interrupt": INTERRUPT_REQUESTED,
        "pause": PAUSE_REQUESTED,
    }[kind]


def hw(key: str) -> str:
    """Trial run tag: one fact of the trial's hardware."""
    return f"{HW_PREFIX}{key}"


def version(package: str) -> str:
    """Run tag: an installed package's version."""
    return f"{VERSION_PREFIX}{package}"


def alias_history(alias: str) -> str:
    """Registered model tag: the versions an alias pointed at."""
    return f"{ALIAS_HISTORY_PREFIX}{alias}"


def promotion(model: str, version_: int | str) -> str:
    """Parent run tag: a promotion's decision for one model version."""
    return f"{PROMOTION_PREFIX}{model}.v{version_}"


def load(ref: str) -> Any:
    """What a table entry names: "module:attr", imported."""
    import importlib

    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def entrypoint(name: str) -> str:
    """Where an entry point lives now (a stored one may name a module that has moved)."""
    return LEGACY_ENTRYPOINTS.get(name, name)
