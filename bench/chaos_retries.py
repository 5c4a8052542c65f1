"""The chaos report's rows for a trial's time limit and for retries (issue 32, item 4).

    .venv/bin/python bench/chaos_report.py --only retries

- "worker killed, retried": `resources.max_failures: 0` (no restart inside the lane) and
  `retries: {max: 1}`; the first attempt's worker SIGKILLs itself at epoch 3. Survived: the
  retry completed with the same params from a checkpoint at step > 0.
- "trial past its time limit": `budget.trial_timeout_s: 3` on an endless trial. Survived: it
  failed as `timed out` with its checkpoint kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BYO = ROOT / "tests" / "byo"
Row = tuple[str, int, int, int, int]


def _spec(home: Path, name: str, fn: str, extra: str, epochs: int, params: str) -> Path:
    p = home.parent / f"{name}.yaml"
    p.write_text(
        f"name: {name}\nsearch_space: {{lr: {{type: float, low: 0.001, high: 0.02}}}}\n"
        "sampler: {name: random, seed: 1}\npruner: {name: none}\n"
        "execution: {checkpoint_min_interval_s: 0}\n"
        f"{extra}"
        f"trainer: {{entrypoint: 'retry_tasks:{fn}', code_dir: '{BYO}', epochs: {epochs}, "
        f"params: {params}}}\n"
    )
    return p


def retry_rows(home: Callable[[str], Path], cli: Callable[..., object], audit: Callable) -> list:
    """The two rows; `home`, `cli` and `audit` are chaos_report's."""
    from sweeps import api

    rows: list[Row] = []
    h = home("retried")
    marker = h.parent / "markers"
    marker.mkdir()
    s = _spec(
        h,
        "retried",
        "killed_once",
        "budget: {trials: 2, parallel: 1}\nresources: {max_failures: 0}\nretries: {max: 1}\n",
        4,
        f"{{marker_dir: '{marker}', epoch_s: 0.6}}",
    )
    cli(h, "run", str(s), timeout=600)
    lost, left, _ = audit(h, "retried")
    trials = api.show("retried", f"sqlite:///{h}/optuna.db")["trials"]
    first = {t["number"]: t for t in trials}
    ok = sum(
        t["state"] == "COMPLETE"
        and t["params"] == first[t["retry_of"]]["params"]
        and t["resumed_from_trial"] == t["retry_of"]
        for t in trials
        if t["retry_of"] is not None
    )
    rows.append(("worker killed, retried (max_failures 0, retries 1)", 1, ok, lost, left))

    h = home("timeout")
    s = _spec(
        h,
        "timeout",
        "endless",
        "budget: {trials: 1, parallel: 1, trial_timeout_s: 3}\n",
        10_000,
        "{epoch_s: 0.1}",
    )
    cli(h, "run", str(s), timeout=600)
    lost, left, _ = audit(h, "timeout")
    (t,) = api.show("timeout", f"sqlite:///{h}/optuna.db")["trials"]
    import optuna

    study = optuna.load_study(study_name="timeout", storage=f"sqlite:///{h}/optuna.db")
    kept = study.trials[0].user_attrs.get("sweeps.checkpoint") or ""
    ok = int(t["failure_cause"] == "timeout" and os.path.isdir(kept))
    rows.append(("trial past its time limit (timed out, checkpoint kept)", 1, ok, lost, left))
    return rows
