"""Program mode: any training script, unchanged, on every Ray Train worker of a trial.

:func:`run_program` is the trial's entrypoint (called like any `trainer.entrypoint` with the
trial config). Each rank runs `trainer.command` (W&B's macros, `sweeps.spec.command`) in
code_dir as a child process with torch.distributed's variables,
`AIP_MODEL_DIR`/`SWEEPS_TRIAL_DIR` (a fresh folder per trial and rank) and AI Platform's
`CLOUD_ML_*`. Rank 0 reads the metrics with the configured collector
(`sweeps.worker.collectors`) and reports every new step through `sweeps.report`, so pruning and
the learning log see a script like any trial. A pruned, failed or stopped rank stops the others
through the broker's board.

Rank 0 returns the final metrics, plus `artifacts`: a tar.gz (bytes) of its trial folder, when
the script wrote files there (at most `workdir.MAX_ARTIFACTS_MB`, uncompressed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sweeps.common import names, paths
from sweeps.common.extras import install_hint
from sweeps.spec.command import expand, missing_files
from sweeps.worker import cloudml, collectors, runtime, workdir
from sweeps.worker.procgroup import Script

ENTRYPOINT = names.PROGRAM_ENTRYPOINT
# The driver passes `settings(spec)` to the workers in the trial config under this key.
SETTINGS_KEY = names.PROGRAM_SETTINGS
POLL_S = 0.5  # file collectors and the board are checked this often
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
# torch 2.x with gloo: a DDP model keeps its process group, and so its worker threads, alive
# past destroy_process_group(); one that frees its last work item while Python exits aborts
# the process (pytorch/pytorch#190489). 18 of 100 two-rank runs of an example did so here.
GLOO_EXIT_HINT = (
    "torch.distributed's gloo threads outlived Python: before the script ends, "
    "`del` the DDP model and optimizer, call gc.collect(), then dist.destroy_process_group()"
)


class ProgramError(RuntimeError):
    """The script failed, or its metrics never came: the trial fails with this message."""

    def __init__(self, message: str, returncode: int | None = None, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr_tail = stderr_tail


def settings(spec: Any) -> dict[str, Any]:
    """What a worker needs to run a program-mode trial (JSON-able; built on the driver)."""
    t = spec.trainer
    space = [k for k in spec.search_space if not k.startswith("resources.")]
    return {
        "command": t.command_line,
        "program": t.program,
        "code_dir": paths.worker_code_dir(t.code_dir) or os.getcwd(),
        "metrics": t.metrics.model_dump() if t.metrics else {"collector": "stdout"},
        "objectives": [o.metric for o in spec.objective_list()],
        # Sampled params, then the fixed trainer.params: the script's arguments.
        "param_names": space + [k for k in t.params if k not in space],
        "cpus_per_worker": spec.resources.cpus_per_worker,
        "stop_grace_s": t.stop_grace_s,
        "sweep": spec.name,  # W&B's sweep id, for a script that reads it
    }


def run_program(config: dict[str, Any]) -> dict[str, Any] | None:
    """Entrypoint of a program-mode trial (every rank)."""
    s = config.get(SETTINGS_KEY)
    if not isinstance(s, dict):
        raise RuntimeError(f"run_program: the trial config has no '{SETTINGS_KEY}' settings")
    params = {k: config[k] for k in s["param_names"] if k in config}
    return run_script(s, params)


# ----- the board: ranks of one trial agree on a rendezvous and on stopping ----------------------
def _resolve(ref: Any) -> Any:
    if type(ref).__module__.startswith("ray"):
        import ray

        return ray.get(ref)
    return ref  # a plain value (a broker object in-process)


class _Board:
    def __init__(self, ctx: runtime.TrialContext) -> None:
        self.broker, self.rank, self.world = ctx.broker, ctx.rank, ctx.world_size
        self.key = ("program", ctx.lane_id, ctx.seq, ctx.restarts)
        if self.world > 1 and self.broker is None:
            raise RuntimeError("a program on several workers needs the trial's broker")

    def _call(self, method: str, *args: Any) -> Any:
        return _resolve(getattr(self.broker, method).remote(*args))

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0 picks a fresh address for the script's own process group; others read it."""
        if self.rank == 0:
            addr = [_node_ip(), _free_port()]
            if self.world > 1:
                self._call("put", (*self.key, "addr"), addr)
        else:
            addr = self._call("get", (*self.key, "addr"))
        return str(addr[0]), int(addr[1])

    def announce(self, state: str) -> None:
        if self.world > 1 and self.peek() is None:
            self._call("put", (*self.key, "state"), [state, self.rank])

    def peek(self) -> list[Any] | None:
        return self._call("peek", (*self.key, "state")) if self.world > 1 else None


def _node_ip() -> str:
    try:
        import ray

        if ray.is_initialized():
            return str(ray.util.get_node_ip_address())
    except ImportError:
        pass
    return "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# ----- the run --------------------------------------------------------------------------------
def script_env(
    ctx: runtime.TrialContext,
    s: dict[str, Any],
    master: tuple[str, int],
    trial_dir: Path,
    hypertune_file: Path,
) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",  # print() reaches the collector as it happens
        "MASTER_ADDR": master[0],
        "MASTER_PORT": str(master[1]),
        "RANK": str(ctx.rank),
        "WORLD_SIZE": str(ctx.world_size),
        "LOCAL_RANK": str(ctx.local_rank),
        "SWEEPS_TRIAL_DIR": str(trial_dir),
        "SWEEPS_TRIAL_NUMBER": str(ctx.trial_number),
        "AIP_MODEL_DIR": str(trial_dir),
        "AIP_TENSORBOARD_LOG_DIR": str(trial_dir / "tensorboard"),
        "CLOUD_ML_JOB_DIR": str(trial_dir),
        "CLOUD_ML_HP_METRIC_FILE": str(hypertune_file),  # one per worker: hypertune races
        "CLOUD_ML_TRIAL_ID": str(ctx.trial_number + 1),
        **cloudml.trial_env(ctx.trial_number, ctx.rank, s, master),
    }
    from sweeps.worker import wandb_agent  # the collector `wandb`: run as `wandb agent` runs it

    env.update(wandb_agent.env_for_trial(s, ctx, trial_dir))
    if ctx.world_size > 1 and getattr(ctx.device, "type", "cpu") != "cuda":
        # Ranks on CPU share the machine: each gets its share of threads, not all cores.
        share = str(max(1, int(float(s.get("cpus_per_worker") or 1))))
        env.update(dict.fromkeys(THREAD_VARS, share))
    return env


def run_script(s: dict[str, Any], params: dict[str, Any]) -> dict[str, Any] | None:
    """Run the settings' command with `params` on this rank; see the module docstring."""
    ctx = runtime.context()
    board = _Board(ctx)
    master = board.rendezvous()  # first: no rank then waits on one that failed early
    base = Path(tempfile.mkdtemp(prefix=f"sweeps-trial{ctx.trial_number}-rank{ctx.rank}-"))
    script: Script | None = None
    try:
        trial_dir = base / "trial"
        trial_dir.mkdir()
        args_file = base / "params.json"
        args_file.write_text(json.dumps(params))
        hypertune_file = base / "hypertune" / "output.metrics"
        code_dir = str(workdir.source(s["code_dir"]))
        problems = missing_files(s["command"], s.get("program"), code_dir)
        if problems:
            raise FileNotFoundError(f"trainer.command: {'; '.join(problems)}")
        work = base / "work"  # the trial's own working directory (sweeps.worker.workdir)
        work.mkdir()
        placed = workdir.make_view(Path(code_dir), work)
        argv = expand(
            s["command"],
            params,
            program=s.get("program"),
            interpreter=sys.executable,
            args_json_file=str(args_file),
            trial_dir=str(trial_dir),
        ) + list(s.get("append") or [])
        env = script_env(ctx, s, master, trial_dir, hypertune_file)
        objectives = list(s["objectives"])
        collector = None
        if ctx.rank == 0:
            collector = collectors.make(
                s.get("metrics") or {},
                objective=objectives[0],
                trial_dir=str(trial_dir),
                hypertune_file=str(hypertune_file),
            )
        reporter = _Reporter(ctx, objectives, (s.get("metrics") or {}).get("names"))
        script = Script(argv, str(work), env, collect=collector is not None)
        _watch(script, collector, reporter, board)
        script.close()
        if collector is not None:
            reporter.handle(collector.feed_all(script.drain(0)) + collector.finish())
        _check_exit(script, s)
        if collector is None:
            return None
        missing = [m for m in objectives if m not in reporter.seen]
        if missing:
            seen = ", ".join(sorted(reporter.seen)) or "nothing"
            raise ProgramError(
                f"metric '{missing[0]}' was never seen in {collector.describe()}; seen: {seen}"
            )
        out: dict[str, Any] = dict(reporter.final)
        limit = int(s.get("max_artifacts_mb", workdir.MAX_ARTIFACTS_MB))
        blob = workdir.pack(trial_dir, limit, work, workdir.written(work, placed))
        if blob is not None:
            out["artifacts"] = blob
        return out
    except BaseException as e:
        if script is not None:
            script.stop(float(s.get("stop_grace_s", 10.0)))
        with contextlib.suppress(Exception):  # the trial's own error is the one to raise
            board.announce("pruned" if isinstance(e, runtime.TrialPruned) else "failed")
        raise
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _watch(
    script: Script,
    collector: collectors.Collector | None,
    reporter: _Reporter,
    board: _Board,
) -> None:
    """Until the script exits: feed its lines and files to the collector, obey the board."""
    next_poll = 0.0
    while True:
        exited = script.returncode is not None
        lines = script.drain(0.1)
        now = time.monotonic()
        if collector is not None:
            records = collector.feed_all(lines)
            if now >= next_poll:
                records += collector.poll()
            reporter.handle(records)
        if now >= next_poll:
            next_poll = now + POLL_S
            state = board.peek()
            if state is not None and state[1] != board.rank:
                if state[0] == "pruned":
                    raise runtime.TrialPruned(f"rank {state[1]} was pruned")
                raise ProgramError(f"stopped: rank {state[1]} of the trial failed")
        if exited:
            return


def _check_exit(script: Script, s: dict[str, Any]) -> None:
    rc = script.returncode
    if rc == 0:
        return
    name = _script_name(script.argv, s.get("program"))
    how = f"was killed by {signal.Signals(-rc).name}" if rc and rc < 0 else f"exited with code {rc}"
    tail = script.stderr_tail()
    hint = ""
    if "No module named 'hypertune'" in tail:
        hint = f" (cloudml-hypertune is not installed: {install_hint('aiplatform')})"
    elif "No module named 'wandb'" in tail:
        hint = " (wandb is not installed where the trial runs: pip install wandb)"
    elif rc == -signal.SIGABRT and "terminate called without an active exception" in tail:
        hint = f" ({GLOO_EXIT_HINT})"
    lines = len(script.tail)
    raise ProgramError(
        f"{name} {how}{hint}" + (f"; last {lines} lines of stderr:\n{tail}" if tail else ""),
        returncode=rc,
        stderr_tail=tail,
    )


def _script_name(argv: list[str], program: str | None) -> str:
    """What the user calls their script: train.py, the module after -m, or the tool."""
    if program:
        return program
    for i, arg in enumerate(argv):
        if arg.endswith(".py"):
            return arg
        if arg == "-m" and i + 1 < len(argv):
            return argv[i + 1]
    return os.path.basename(argv[0])


class _Reporter:
    """Turns collector records into `sweeps.report` calls, one per step with the objective.

    A record without the objective is kept for its step (a line of train metrics before the
    validation line of the same epoch); an explicit step already reported is skipped.
    """

    def __init__(
        self, ctx: runtime.TrialContext, objectives: list[str], keep: list[str] | None
    ) -> None:
        self.ctx = ctx
        self.primary = objectives[0]
        self.keep = set(keep) | set(objectives) if keep else None
        self.seen: set[str] = set()
        self.final: dict[str, float] = {}
        self.pending: dict[str, float] = {}
        self.pending_step: int | None = None
        self.last_step: int | None = None

    def handle(self, records: list[collectors.Record]) -> None:
        for step, metrics in records:
            self.seen.update(metrics)
            if self.keep is not None:
                metrics = {k: v for k, v in metrics.items() if k in self.keep}
            if step is not None and step != self.pending_step:
                self.pending, self.pending_step = {}, step
            if self.primary not in metrics:
                if step is not None:
                    self.pending.update(metrics)
                continue
            if step is not None:
                metrics = {**self.pending, **metrics}
                self.pending = {}
                if self.last_step is not None and step <= self.last_step:
                    continue
                self.last_step = step
                self.ctx.step = max(self.ctx.step, step - 1)  # the script's step is the step
            runtime.report(metrics)
            self.final.update(metrics)
