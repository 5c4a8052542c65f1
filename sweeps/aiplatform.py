"""Legacy AI Platform (Cloud ML Engine) hyperparameter jobs, run unchanged.

`to_spec` maps a job's `trainingInput` to a native spec (pure). `run_module` is the entrypoint
each Ray Train worker runs for such a trial: the user's module as a subprocess with the params
as `--name=value` flags, `--job-dir`, and torch.distributed variables; the metric is read the way
AI Platform read it, from what `cloudml-hypertune` writes to `CLOUD_ML_HP_METRIC_FILE`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sweeps.errors import SpecError

ALGORITHMS = {"GRID_SEARCH": "grid", "RANDOM_SEARCH": "random", "ALGORITHM_UNSPECIFIED": "tpe"}
TIERS = {"BASIC": "n1-standard-4", "STANDARD_1": "n1-standard-8", "BASIC_GPU": "n1-standard-8-t4"}


def _param(p: dict[str, Any], i: int) -> tuple[str, dict[str, Any], str | None]:
    where = f"trainingInput.hyperparameters.params[{i}]"
    name = p.get("parameterName")
    if not name:
        raise SpecError(f"{where}.parameterName: required")
    kind = p.get("type")
    scale = p.get("scaleType", "UNIT_LINEAR_SCALE")
    note = None
    if kind in ("DOUBLE", "INTEGER"):
        if "minValue" not in p or "maxValue" not in p:
            raise SpecError(f"{where}: {kind} needs minValue and maxValue")
        out: dict[str, Any] = {
            "type": "float" if kind == "DOUBLE" else "int",
            "low": p["minValue"],
            "high": p["maxValue"],
        }
        if scale in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"):
            out["log"] = True
            if scale == "UNIT_REVERSE_LOG_SCALE":
                note = f"{name}: UNIT_REVERSE_LOG_SCALE searched on a log scale"
        return name, out, note
    if kind == "CATEGORICAL":
        return (
            name,
            {"type": "categorical", "choices": list(p.get("categoricalValues") or [])},
            None,
        )
    if kind == "DISCRETE":
        return name, {"type": "categorical", "choices": list(p.get("discreteValues") or [])}, None
    raise SpecError(f"{where}.type: unknown type {kind!r} (DOUBLE, INTEGER, CATEGORICAL, DISCRETE)")


def to_spec(
    config: dict[str, Any],
    *,
    name: str,
    package_path: str,
    module_name: str,
    user_args: list[str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """AI Platform job config -> (raw native spec, notes on what was approximated)."""
    from tracking.costs import machines

    ti = config.get("trainingInput")
    if not isinstance(ti, dict):
        raise SpecError("trainingInput: required (an AI Platform job config)")
    hp = ti.get("hyperparameters") or {}
    if not hp.get("params"):
        raise SpecError("trainingInput.hyperparameters.params: at least one parameter")
    notes: list[str] = []
    space = {}
    for i, p in enumerate(hp["params"]):
        pname, dist, note = _param(p, i)
        space[pname] = dist
        if note:
            notes.append(note)
    goal = str(hp.get("goal", "MAXIMIZE")).upper()
    tag = hp.get("hyperparameterMetricTag") or "training/hptuning/metric"
    machine = ti.get("masterType") or TIERS.get(ti.get("scaleTier", "BASIC"), "n1-standard-4")
    if machine not in machines():
        notes.append(f"machine type {machine} is not in the price table: costed as 'local'")
        machine = "local"
    accel = (ti.get("masterConfig") or {}).get("acceleratorConfig") or {}
    algorithm = ALGORITHMS.get(str(hp.get("algorithm", "ALGORITHM_UNSPECIFIED")))
    if algorithm is None:
        raise SpecError(f"trainingInput.hyperparameters.algorithm: unknown {hp.get('algorithm')!r}")
    spec = {
        "name": name,
        "objective": {"metric": tag, "direction": "maximize" if goal == "MAXIMIZE" else "minimize"},
        "search_space": space,
        "sampler": {"name": algorithm},
        "pruner": {"name": "median" if hp.get("enableTrialEarlyStopping") else "none"},
        "budget": {
            "trials": int(hp.get("maxTrials", 1)),
            "parallel": int(hp.get("maxParallelTrials", 1)),
            "max_failed_trials": hp.get("maxFailedTrials"),
        },
        "resources": {
            "workers": 1 + int(ti.get("workerCount", 0)),
            "machine_type": machine,
            "gpus_per_worker": float(accel.get("count", 0)),
        },
        "trainer": {
            "entrypoint": "sweeps.aiplatform:run_module",
            "code_dir": str(Path(package_path).resolve()),
            "epochs": 1,
            "params": {
                "module_name": module_name,
                "user_args": list(user_args or []),
                "metric_tag": tag,
                "package_path": str(Path(package_path).resolve()),
                "param_names": list(space),
            },
        },
    }
    if spec["budget"]["max_failed_trials"] is None:
        del spec["budget"]["max_failed_trials"]
    return spec, notes


def load_config(path: str | Path) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise SpecError(f"AI Platform config not found: {p}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise SpecError(f"{p}: YAML error: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: expected a mapping with trainingInput")
    return data


# ----- on the workers -------------------------------------------------------------------------
def _read_metrics(path: str, tag: str, seen: set[tuple[str, str]]) -> list[tuple[int, float]]:
    """New (global_step, value) records for `tag` in a hypertune metrics file."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a half-written file: read it again next time
        key = (str(rec.get("timestamp")), str(rec.get("global_step")))
        if tag in rec and key not in seen:
            seen.add(key)
            out.append((int(float(rec.get("global_step") or 0)), float(rec[tag])))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def run_module(config: dict[str, Any]) -> dict[str, Any] | None:
    """Run the user's module on this worker, report its hypertune metrics (rank 0)."""
    import ray

    import sweeps

    ctx = sweeps.context()
    broker = ctx.broker
    tag = config["metric_tag"]
    # A fresh rendezvous for the user's process group: the worker's own group holds its port.
    key = ("aip", ctx.lane_id, ctx.seq)
    if ctx.rank == 0:
        master = socket.gethostbyname(socket.gethostname())
        port = _free_port()
        if broker is not None:
            ray.get(broker.put.remote(key + ("addr",), [master, port]))
    else:
        master, port = ray.get(broker.get.remote(key + ("addr",)))
    job_dir = tempfile.mkdtemp(prefix=f"aip-trial{ctx.trial_number}-rank{ctx.rank}-")
    metric_file = os.path.join(job_dir, "hypertune", "output.metrics")  # one file per worker
    flags = [f"--{n}={config[n]}" for n in config.get("param_names", []) if n in config]
    cmd = [
        sys.executable,
        "-m",
        config["module_name"],
        *flags,
        f"--job-dir={job_dir}",
        *config.get("user_args", []),
    ]
    env = {
        **os.environ,
        "MASTER_ADDR": str(master),
        "MASTER_PORT": str(port),
        "RANK": str(ctx.rank),
        "WORLD_SIZE": str(ctx.world_size),
        "LOCAL_RANK": str(ctx.local_rank),
        "CLOUD_ML_HP_METRIC_FILE": metric_file,
        "CLOUD_ML_TRIAL_ID": str(ctx.trial_number + 1),
        "CLOUD_ML_JOB_DIR": job_dir,
    }
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=config["package_path"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    pump = threading.Thread(
        target=lambda: [print(line, end="") for line in proc.stdout], daemon=True
    )
    pump.start()
    seen: set[tuple[str, str]] = set()
    last: float | None = None
    try:
        while True:
            done = proc.poll() is not None
            if ctx.rank == 0:
                for step, value in _read_metrics(metric_file, tag, seen):
                    ctx.step = max(ctx.step, step - 1)  # global_step becomes the step
                    sweeps.report({tag: value, "global_step": float(step)})
                    last = value
            elif broker is not None and ray.get(broker.peek.remote(key + ("state",))) == "stop":
                break
            if done:
                break
            time.sleep(0.2)
    except sweeps.TrialPruned:
        if broker is not None:
            ray.get(broker.put.remote(key + ("state",), "stop"))
        raise
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        pump.join(timeout=5)
    if proc.returncode not in (0, None, -15):
        if ctx.rank == 0 and broker is not None:
            ray.get(broker.put.remote(key + ("state",), "stop"))
        raise RuntimeError(f"{config['module_name']} exited with code {proc.returncode}")
    if ctx.rank == 0 and last is None:
        raise RuntimeError(f"no '{tag}' metric was written to CLOUD_ML_HP_METRIC_FILE")
    return {tag: last} if ctx.rank == 0 else None
