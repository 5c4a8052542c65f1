"""What a trial runs with, as pure functions of the spec: the config its training function
gets, its resources (searched ones override the spec's), its seed, and how every trial of the
sweep is run (the settings each Assignment carries) or a lane warms up."""

from __future__ import annotations

from typing import Any

from sweeps.common import names, paths
from sweeps.contracts.protocol import TrainerSettings, WarmUp
from sweeps.spec import Spec

# Keys of the trial config that are not hyper-parameters of the training function.
BUILTIN_FIELDS = ("model", "dataset", "data_dir", "epochs", "batch_size", "val_fraction", "limit")


def trial_config(spec: Spec, params: dict[str, Any]) -> dict[str, Any]:
    """Pure: what the training function receives. Fixed settings, then `trainer.params`, then
    the sampled params (searched resources are not the function's business)."""
    t = spec.trainer
    if t.command_line is not None:  # program mode: the script's arguments, nothing of ours
        config: dict[str, Any] = {}
    elif t.entrypoint:
        config = {
            "epochs": t.epochs,
            "batch_size": t.batch_size,
            "data_dir": t.data_dir,
        }
    else:
        config = {k: getattr(t, k) for k in BUILTIN_FIELDS}
        config["compile"] = t.compile
        if spec.data.test_fraction:  # rows the trainer leaves out: the locked test split
            config["test_fraction"] = spec.data.test_fraction
    config.update(t.params)
    config.update({k: v for k, v in params.items() if not k.startswith("resources.")})
    return config


def final_step(spec: Spec, config: dict[str, Any]) -> int | None:
    """Pure: the step of a trial's last report, where the sweep knows it: the built-in trainer
    reports once per epoch. User code and programs may stop anywhere (None)."""
    t = spec.trainer
    if t.entrypoint or t.command_line is not None:
        return None
    return int(config.get("epochs", t.epochs))


def trial_resources(spec: Spec, params: dict[str, Any]) -> dict[str, Any]:
    """Pure: the trial's resources, where searched ones override the spec's."""
    r = spec.resources
    return {
        "workers": int(params.get("resources.workers", r.workers)),
        "cpus_per_worker": r.cpus_per_worker,
        "gpus_per_worker": float(params.get("resources.gpus_per_worker", r.gpus_per_worker)),
        "machine_type": str(params.get("resources.machine_type", r.machine_type)),
        "preemptible": bool(getattr(r, "preemptible", False)),
        "whole_machines": bool(getattr(r, "whole_machines", False)),
    }


def trainer_settings(spec: Spec, function: dict[str, Any] | None = None) -> TrainerSettings:
    """Pure: how every trial of the sweep is run (travels in each Assignment). `function`: a
    function handed to `sweeps.run`, packed by `sweeps.notebook.pack`."""
    from sweeps.worker import program

    t, e = spec.trainer, spec.execution
    return TrainerSettings(
        sweep=spec.name,
        program=program.settings(spec) if t.command_line is not None else None,
        entrypoint=t.entrypoint,
        code_dir=paths.worker_code_dir(t.code_dir),
        data_dir=t.data_dir,
        checkpoint_every=e.checkpoint_every,
        checkpoint_min_interval_s=e.checkpoint_min_interval_s,
        log_models=spec.tracking.log_models,
        pickle_models=spec.tracking.pickle_models,
        **_model_pick(spec),
        **(function or {}),
    )


def _model_pick(spec: Spec) -> dict[str, Any]:
    """Pure: the TrainerSettings fields that say which epoch's weights become the model."""
    from sweeps.spec.model_pick import model_pick

    pick = model_pick(spec)
    return {} if pick is None else {"model_metric": pick[0], "model_direction": pick[1]}


def warm_up_settings(spec: Spec, how: TrainerSettings) -> WarmUp:
    """Pure: what a lane prepares before its first trial (imports; data for the built-in)."""
    if how.program or how.entrypoint == names.NOTEBOOK_ENTRYPOINT:
        return WarmUp()
    if how.entrypoint:
        return WarmUp(entrypoint=how.entrypoint, code_dir=how.code_dir)
    return WarmUp(config=trial_config(spec, {}), log_models=how.log_models)


def trial_seed(spec: Spec, number: int) -> int:
    """Pure: one seed per trial, from the sweep's seed and the trial number."""
    return (spec.sampler.seed or 0) * 1_000_003 + number
