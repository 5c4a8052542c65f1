"""A trial's script, run as `wandb agent` runs a sweep's run (trainer.metrics.collector: wandb).

What the agent does for each run (wandb/wandb_agent.py, `Agent._command_run`, wandb 0.31): it
writes the run's params to `$WANDB_DIR/wandb/sweep-<sweep>/config-<run>.yaml` (W&B's config
file format: `wandb_version: 1`, then `name: {value: v}` per param) and sets
`WANDB_SWEEP_PARAM_PATH` to it, with `WANDB_SWEEP_ID` and `WANDB_RUN_ID`; `wandb.init` loads
that file into `wandb.config`, locked over the script's own defaults. The same is done here,
plus what running without a W&B server needs: `WANDB_MODE=offline` (unless the user set a
mode), `WANDB_DIR` in the trial folder (so the run's files are the trial's artifacts and the
collector finds them), and a short flush interval so `wandb.log` reaches the file as it runs.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sweeps.worker.collectors.wandb_log import FLUSH_ENV, FLUSH_S

DEFAULT_SWEEP_ID = "sweeps"
ARGS_FILE = "params.json"  # run_script writes the params here, beside the trial folder


def run_id(*parts: Any) -> str:
    """An 8-character run id, the same on every rank of one attempt of one trial."""
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()[:8]


def write_params(path: Path, params: Mapping[str, Any]) -> None:
    """The agent's param file, as wandb's `config_util.save_config_file_from_dict` writes it."""
    text = "wandb_version: 1"
    if params:
        text += "\n\n" + yaml.safe_dump(
            {k: {"value": v} for k, v in params.items()},
            default_flow_style=False,
            allow_unicode=True,
            sort_keys=False,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def agent_env(
    trial_dir: Path,
    params: Mapping[str, Any],
    *,
    sweep_id: str,
    run: str,
    environ: Mapping[str, str],
) -> dict[str, str]:
    """The variables a W&B agent gives a run (and the param file they name), for `params`."""
    sweep_id = sweep_id or DEFAULT_SWEEP_ID
    param_path = trial_dir / "wandb" / f"sweep-{sweep_id}" / f"config-{run}.yaml"
    write_params(param_path, params)
    env = {
        "WANDB_DIR": str(trial_dir),
        "WANDB_SWEEP_ID": sweep_id,
        "WANDB_RUN_ID": run,
        "WANDB_SWEEP_PARAM_PATH": str(param_path),
        "WANDB_MODE": environ.get("WANDB_MODE") or "offline",
        FLUSH_ENV: environ.get(FLUSH_ENV) or str(FLUSH_S),
    }
    return env


def wants_agent(s: Mapping[str, Any]) -> bool:
    """Whether the trial's metrics come from wandb.log: then its script runs as an agent's."""
    return (s.get("metrics") or {}).get("collector") == "wandb"


def env_for_trial(s: Mapping[str, Any], ctx: Any, trial_dir: Path) -> dict[str, str]:
    """program.script_env's W&B part: the agent's variables, or none for other collectors.

    The params are the script's arguments: run_script's `${args_json_file}` (beside the trial
    folder), which holds the fixed `trainer.params` too; else the trial's sampled params.
    """
    if not wants_agent(s):
        return {}
    args_file = trial_dir.parent / ARGS_FILE
    if args_file.is_file():
        params = json.loads(args_file.read_text())
    else:
        params = {k: ctx.params[k] for k in s.get("param_names", ()) if k in ctx.params}
    return agent_env(
        trial_dir,
        params,
        sweep_id=str(s.get("sweep") or DEFAULT_SWEEP_ID),
        run=run_id(ctx.lane_id, ctx.seq, ctx.restarts, ctx.trial_number),
        environ=os.environ,
    )
