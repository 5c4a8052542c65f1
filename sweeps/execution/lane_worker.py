"""What every Ray Train worker of a lane runs: pull trials from the broker until told to stop.

One `TorchTrainer.fit()` runs this once per worker; the process group, imported libraries and
loaded datasets stay warm between trials, which is what makes a trial cost its training time.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.machinery
import importlib.util
import io
import json
import os
import shutil
import sys
import time
import traceback
from typing import Any

from sweeps.common import names
from sweeps.common.errors import ProtocolError
from sweeps.contracts.protocol import Assignment, Stop, TrainerSettings, TrialResult, WarmUp
from sweeps.execution.raytrain import trial_session
from sweeps.worker import raylines, runtime, workdir

BUILTIN_ENTRYPOINT = names.BUILTIN_ENTRYPOINT


def resolve(entrypoint: str, code_dir: str | None = None) -> Any:
    """Import the user's function; a package in code_dir wins over an installed one.

    Cloud ML Engine packages are conventionally called `trainer`, like ours; an editable
    install's import hook would otherwise hand the user our package instead of theirs.
    """
    module, _, fn = names.entrypoint(entrypoint).partition(":")
    top = module.split(".")[0]
    if code_dir:
        # Relative in a Ray Job: to this worker's cwd, the job's working dir on this node.
        code_dir = os.path.abspath(code_dir)
        if code_dir not in sys.path:  # the user's own modules import each other
            sys.path.insert(0, code_dir)
    if code_dir and (
        os.path.isdir(os.path.join(code_dir, top))
        or os.path.isfile(os.path.join(code_dir, f"{top}.py"))
    ):
        loaded = sys.modules.get(top)
        origin = getattr(loaded, "__file__", "") or ""
        if loaded is None or not os.path.abspath(origin).startswith(os.path.abspath(code_dir)):
            for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
                del sys.modules[name]
            spec = importlib.machinery.PathFinder.find_spec(top, [code_dir])
            if spec is not None and spec.loader is not None:
                mod = importlib.util.module_from_spec(spec)
                sys.modules[top] = mod
                spec.loader.exec_module(mod)
    try:
        return getattr(importlib.import_module(module), fn)
    except (ImportError, AttributeError) as e:
        where = f" (code_dir {code_dir})" if code_dir else ""
        raise ImportError(
            f"trainer.entrypoint '{entrypoint}' cannot be loaded{where}: {e}"
        ) from None


def _barrier(world_size: int) -> None:
    if world_size > 1:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()


def _device() -> Any:
    import torch

    try:
        from ray.train.torch import get_device

        return get_device()
    except Exception:  # local mode without a Train context
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _resume_checkpoint(a: Assignment, restarts: int, recorded: str | None) -> Any:
    """Where this attempt of the trial starts from, or None for epoch 0.

    After a worker-group restart: the checkpoint rank 0 last persisted (the broker recorded its
    path the moment the upload returned), else Ray Train's latest registered one if it belongs
    to this trial. For a trial continued by a resumed sweep: the checkpoint its earlier attempt
    persisted (`Assignment.resume_from`).
    """
    from sweeps.execution.storage import checkpoint_at

    if restarts and recorded:
        return checkpoint_at(recorded)
    if restarts:
        import ray.train

        ckpt = ray.train.get_checkpoint()
        if ckpt is None:
            return None
        with ckpt.as_directory() as d:
            meta_path = os.path.join(d, runtime.META)
            if not os.path.exists(meta_path):
                return None
            with open(meta_path) as f:
                meta = json.load(f)
        return ckpt if meta.get("trial_number") == a.trial_number else None
    if a.resume_from:
        return checkpoint_at(a.resume_from)
    return None


class _Tee(io.TextIOBase):
    """Copies a trial's stdout/stderr into a buffer that goes to its MLflow run."""

    def __init__(self, stream: Any, buf: io.StringIO) -> None:
        self.stream, self.buf = stream, buf

    def write(self, s: str) -> int:
        self.buf.write(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()


def _hardware(device: Any, world: int) -> dict[str, str]:
    """What the trial ran on, for the learning log: GPU model, world size, host, and the
    interpreter (a trial in a container image runs the image's)."""
    import platform

    gpu = "none"
    try:
        import torch

        if getattr(device, "type", "") == "cuda":
            gpu = torch.cuda.get_device_name(device)
    except Exception:
        pass
    return {
        "gpu_model": gpu,
        "world_size": str(world),
        "host": platform.node(),
        "python": sys.executable,
    }


def _rss_mb() -> float:
    """This worker's resident memory, after the trial: the lane recycles itself on growth."""
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except Exception:
        return 0.0


def _cleanup() -> None:
    """Drop what a trial left behind so the next one starts from a clean slate."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def run_trial(
    cfg: dict[str, Any],
    a: Assignment,
    rank: int,
    world: int,
    restarts: int,
    recorded: str | None = None,
) -> TrialResult | None:
    """Run one trial on this rank. Rank 0 returns its result for the driver; a trial that
    raised has already been reported as failed and returns None."""
    import ray

    broker, lane_id, seq, how = cfg["broker"], cfg["lane_id"], a.seq, a.trainer
    buf = io.StringIO()
    ctx = _trial_context(cfg, a, rank, world, restarts, recorded, buf)
    runtime._set_context(ctx)
    t0 = time.time()
    try:
        conf = dict(a.config)
        fn = _train_function(how, conf)
        with (
            # A function's own view of code_dir; program mode makes one for its script.
            workdir.for_function(
                None if how.program else how.code_dir, a.trial_number, rank
            ) as view,
            raylines.kept_out(sys.stderr),  # Ray's own records are not the trial's output
            contextlib.redirect_stdout(_Tee(sys.stdout, buf)),
            contextlib.redirect_stderr(_Tee(sys.stderr, buf)),
            # A function's ray.train.* calls reach the trial, not the lane's Ray Train session.
            contextlib.nullcontext() if how.program else trial_session(),
        ):
            out = fn(conf)
            result = _result(out, rank, how)
            # As program mode logs its script's writes; a runner that returns its own
            # artifacts (an AI Platform package's trial folder) keeps them.
            if view is not None and rank == 0 and result.artifacts is None:
                result.artifacts = view.pack()
        result.train_seconds = time.time() - t0
    except runtime.TrialPruned as e:
        result = TrialResult(state="pruned", reason=str(e), train_seconds=time.time() - t0)
    except Exception as e:  # user code: FAIL the trial, keep the lane
        err = f"{type(e).__name__}: {e}"
        print(traceback.format_exc(), file=buf, end="")  # the trial's log says where it broke
        runtime.ship_output(ctx, final=True)
        all_failed = ray.get(broker.fail.remote(lane_id, seq, rank, world, err))
        runtime._set_context(None)
        if not all_failed:
            raise  # other ranks are stuck in a collective: let Ray Train restart the group
        return None
    finally:
        runtime._set_context(None)
        runtime.ship_output(ctx, final=True)
        if ctx.resume_dir:
            shutil.rmtree(ctx.resume_dir, ignore_errors=True)
    # Every rank's last lines are at the broker (ship_output waited for it) before rank 0 hands
    # in the result: the driver drops output of a trial that has ended, and rank 1's tail once
    # lost that race (a trial's log with rank 0's lines only).
    _barrier(world)
    if rank != 0:
        return None
    result.worker_rss_mb = _rss_mb()
    result.hardware = _hardware(ctx.device, world)
    result.steps = ctx.step
    return result


def _trial_context(
    cfg: dict[str, Any],
    a: Assignment,
    rank: int,
    world: int,
    restarts: int,
    recorded: str | None,
    buf: io.StringIO,
) -> runtime.TrialContext:
    """What the trial's code reads through sweeps.worker.runtime while it runs on this rank."""
    how = a.trainer
    return runtime.TrialContext(
        rank=rank,
        world_size=world,
        local_rank=cfg.get("local_rank", 0),
        device=_device(),
        data_dir=how.data_dir,
        trial_number=a.trial_number,
        seed=a.seed,
        params=a.params,
        lane_id=cfg["lane_id"],
        sweep=how.sweep,
        seq=a.seq,
        broker=cfg["broker"],
        checkpoint_every=how.checkpoint_every,
        checkpoint_min_interval_s=how.checkpoint_min_interval_s,
        restarts=restarts,
        log_model=how.log_models,
        model_metric=how.model_metric,
        model_direction=how.model_direction,
        prunes=how.prunes,
        resume_from=_resume_checkpoint(a, restarts, recorded),
        storage_scheme=cfg.get("storage_scheme", ""),
        log_buf=buf,
    )


def _train_function(how: TrainerSettings, conf: dict[str, Any]) -> Any:
    """The function the trial calls with `conf`; program mode adds its settings to `conf`."""
    if how.program:  # program mode: ours runs the user's script (sweeps.worker.program)
        from sweeps.worker import program

        conf[program.SETTINGS_KEY] = how.program
        return program.run_program
    if how.callable:  # a function handed to sweeps.run (a notebook's)
        return _function(how)
    return resolve(how.entrypoint or BUILTIN_ENTRYPOINT, how.code_dir)


def _result(out: Any, rank: int, how: TrainerSettings) -> TrialResult:
    """The trial's return value: final metrics, and (rank 0) the model packaged for MLflow."""
    if out is None:
        return TrialResult(state="complete")
    if not isinstance(out, dict):
        raise TypeError(f"train() must return a dict or None, not {type(out).__name__}")
    metrics = {k: float(v) for k, v in out.items() if isinstance(v, int | float)}
    result = TrialResult(state="complete", metrics=metrics)
    if rank != 0:
        return result
    result.dataset = out.get("dataset")
    result.artifacts = out.get("artifacts")
    result.links = {str(k): str(v) for k, v in (out.get("links") or {}).items()}
    if out.get("model_package"):
        result.model_package, result.model_format = out["model_package"], "pyfunc"
        picked = out.get("model_checkpoint") or {}  # the built-in trainer's best epoch
        result.model_step, result.model_metrics = picked.get("step"), picked.get("metrics") or {}
    elif out.get("model") is not None and how.log_models:
        from trainer.errors import ModelNotPackaged
        from trainer.packaging import package_module

        try:
            result.model_package, result.model_format = package_module(
                out["model"], out.get("input_example"), how.pickle_models
            )
        except ModelNotPackaged as e:
            result.model_error = str(e)
    return result


_FUNCTIONS: dict[str, Any] = {}


def _function(how: TrainerSettings) -> Any:
    """The function a notebook handed to sweeps.run, unpickled once per worker."""
    key = how.callable_digest or ""
    if key not in _FUNCTIONS:
        import cloudpickle

        _FUNCTIONS.clear()
        _FUNCTIONS[key] = cloudpickle.loads(how.callable or b"")
    return _FUNCTIONS[key]


def _warm_up(how: WarmUp, rank: int) -> None:
    """Before the lane's first trial: import the training code and, for the built-in trainer,
    load the dataset onto the device and run one step, so the first trial costs what later
    ones do. A failure here is left for the first trial to report."""
    try:
        if how.entrypoint:
            resolve(how.entrypoint, how.code_dir)
        elif how.config:
            from trainer.loop import warm_up

            # Only rank 0 packages a trial's model, so only it writes the folder's fixed part.
            log_models = how.log_models and rank == 0
            warm_up(how.config, _device(), log_models=log_models)
    except Exception:  # the trial that hits it again says what is wrong, in its own record
        pass


def _next(cfg: dict[str, Any], seq: int, done: TrialResult | None, rank: int) -> Assignment | None:
    """The lane's next assignment (None: stop). Rank 0 hands in the finished trial's result in
    the same round trip, and only rank 0 asks (see Broker.next_trial)."""
    import ray

    broker, lane_id = cfg["broker"], cfg["lane_id"]
    if done is not None:
        answer = ray.get(broker.finish_and_next.remote(lane_id, seq - 1, done))
    else:
        answer = ray.get(broker.next_trial.remote(lane_id, seq, rank == 0))
    if isinstance(answer, Stop):
        return None
    if not isinstance(answer, Assignment):
        raise ProtocolError(f"lane {lane_id} got {answer!r:.200} for its next trial")
    return answer


def lane_main(cfg: dict[str, Any]) -> None:
    """Ray Train train_fn of a lane."""
    import ray
    import ray.train

    from sweeps.common.quietlogs import quiet_ray

    quiet_ray()  # a cluster started by `ray start` (compose, a team's) logs Ray Train's INFO

    tc = ray.train.get_context()
    rank, world = tc.get_world_rank(), tc.get_world_size()
    cfg = {**cfg, "local_rank": tc.get_local_rank()}
    broker, lane_id = cfg["broker"], cfg["lane_id"]
    state = ray.get(broker.attach.remote(lane_id, rank, world))
    # Nobody moves on until every rank has attached: keeps generations apart after a restart.
    _barrier(world)
    if state["current"] is None:
        _warm_up(cfg.get("warmup") or WarmUp(), rank)
    # What is here now (Ray, torch, the data, the imports of the user's code) lives as long as
    # the lane: frozen, it is left out of the collection after every trial, which otherwise
    # scanned it all and took most of a tiny trial's time (61% of a lane worker's samples).
    gc.freeze()
    seq = state["seq"]
    done: TrialResult | None = None
    if state["current"] is not None:
        done = run_trial(cfg, state["current"], rank, world, state["restarts"], state["checkpoint"])
        _cleanup()
    while True:
        seq += 1
        a = _next(cfg, seq, done, rank)
        if a is None:
            return
        done = run_trial(cfg, a, rank, world, 0)
        _cleanup()
