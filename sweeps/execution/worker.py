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

from sweeps import runtime

BUILTIN_ENTRYPOINT = "trainer.loop:train"


def resolve(entrypoint: str, code_dir: str | None = None) -> Any:
    """Import the user's function; a package in code_dir wins over an installed one.

    Cloud ML Engine packages are conventionally called `trainer`, like ours; an editable
    install's import hook would otherwise hand the user our package instead of theirs.
    """
    module, _, fn = entrypoint.partition(":")
    top = module.split(".")[0]
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


def _resume_checkpoint(trial_number: int) -> Any:
    """The lane's latest Ray Train checkpoint, if it belongs to this trial."""
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
    return ckpt if meta.get("trial_number") == trial_number else None


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
    """What the trial ran on, for the learning log: GPU model, world size, host."""
    import platform

    gpu = "none"
    try:
        import torch

        if getattr(device, "type", "") == "cuda":
            gpu = torch.cuda.get_device_name(device)
    except Exception:
        pass
    return {"gpu_model": gpu, "world_size": str(world), "host": platform.node()}


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


def run_trial(cfg: dict[str, Any], a: dict[str, Any], rank: int, world: int, restarts: int) -> None:
    import ray

    broker, lane_id, seq = cfg["broker"], cfg["lane_id"], a["seq"]
    ctx = runtime.TrialContext(
        rank=rank,
        world_size=world,
        local_rank=cfg.get("local_rank", 0),
        device=_device(),
        data_dir=cfg.get("data_dir"),
        trial_number=a["trial_number"],
        seed=a["seed"],
        params=a["params"],
        lane_id=lane_id,
        seq=seq,
        broker=broker,
        checkpoint_every=cfg.get("checkpoint_every", 1),
        checkpoint_min_interval_s=cfg.get("checkpoint_min_interval_s", 0.0),
        restarts=restarts,
        resume_from=_resume_checkpoint(a["trial_number"]) if restarts else None,
    )
    buf = io.StringIO()
    ctx.extras["log_buf"] = buf
    ctx.extras["started"] = time.monotonic()
    runtime._set_context(ctx)
    t0 = time.time()
    try:
        fn = resolve(cfg.get("entrypoint") or BUILTIN_ENTRYPOINT, cfg.get("code_dir"))
        with (
            contextlib.redirect_stdout(_Tee(sys.stdout, buf)),
            contextlib.redirect_stderr(_Tee(sys.stderr, buf)),
        ):
            out = fn(dict(a["config"]))
        result = _result(out, rank)
        result.update(state="complete", train_seconds=time.time() - t0)
    except runtime.TrialPruned as e:
        result = {"state": "pruned", "reason": str(e), "train_seconds": time.time() - t0}
    except Exception as e:  # user code: FAIL the trial, keep the lane
        err = f"{type(e).__name__}: {e}"
        if rank == 0:
            sent = ctx.extras.get("log_sent", 0)
            ray.get(broker.log.remote(lane_id, seq, buf.getvalue()[sent:] + traceback.format_exc()))
        all_failed = ray.get(broker.fail.remote(lane_id, seq, rank, world, err))
        runtime._set_context(None)
        if not all_failed:
            raise  # other ranks are stuck in a collective: let Ray Train restart the group
        return
    finally:
        runtime._set_context(None)
        resume_dir = ctx.extras.get("resume_dir")
        if resume_dir:
            shutil.rmtree(resume_dir, ignore_errors=True)
    if rank == 0:
        result["worker_rss_mb"] = _rss_mb()
        result["hardware"] = _hardware(ctx.device, world)
        result["log"] = buf.getvalue()[-1_000_000:]
        result["steps"] = ctx.step
        ray.get(broker.finish.remote(lane_id, seq, result))


def _result(out: Any, rank: int) -> dict[str, Any]:
    """The trial's return value: final metrics, and the model for MLflow (rank 0 only)."""
    if out is None:
        return {"metrics": {}}
    if not isinstance(out, dict):
        raise TypeError(f"train() must return a dict or None, not {type(out).__name__}")
    metrics = {k: float(v) for k, v in out.items() if isinstance(v, int | float)}
    result: dict[str, Any] = {"metrics": metrics}
    if rank == 0:
        for key in ("model_blob", "model_info", "input_example", "dataset"):
            if key in out:
                result[key] = out[key]
        if "model" in out and "model_blob" not in out:
            result["model_blob"] = _pickle_module(out["model"])
    return result


def _pickle_module(model: Any) -> bytes | None:
    import torch

    if not isinstance(model, torch.nn.Module):
        return None
    model = getattr(model, "module", model)  # unwrap DDP
    buf = io.BytesIO()
    torch.save(model.to("cpu"), buf)
    return buf.getvalue()


def lane_main(cfg: dict[str, Any]) -> None:
    """Ray Train train_fn of a lane."""
    import ray
    import ray.train

    tc = ray.train.get_context()
    rank, world = tc.get_world_rank(), tc.get_world_size()
    cfg = {**cfg, "local_rank": tc.get_local_rank()}
    broker, lane_id = cfg["broker"], cfg["lane_id"]
    state = ray.get(broker.attach.remote(lane_id, rank, world))
    # Nobody moves on until every rank has attached: keeps generations apart after a restart.
    _barrier(world)
    seq = state["seq"]
    if state["current"] is not None:
        run_trial(cfg, state["current"], rank, world, state["restarts"])
        _cleanup()
    while True:
        seq += 1
        a = ray.get(broker.next_trial.remote(lane_id, seq))
        if a.get("stop"):
            return
        run_trial(cfg, a, rank, world, 0)
        _cleanup()
