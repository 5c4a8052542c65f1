"""Training functions for the time-limit and retry tests, written against the public API."""

from __future__ import annotations

import os
import signal
import tempfile
import time

import sweeps


def _start() -> int:
    """The epoch to start from: the one after the checkpoint this attempt was given."""
    resume = sweeps.get_checkpoint()
    if not resume:
        return 0
    with open(os.path.join(resume, "epoch.txt")) as f:
        return int(f.read())


def _epoch(e: int, start: int, rank: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "epoch.txt"), "w") as f:
            f.write(str(e + 1))
        sweeps.report(
            {"val_accuracy": 0.1 * (e + 1), "started_at": float(start)},
            checkpoint_dir=d if rank == 0 else None,
        )


def killed_once(config):
    """Writes its worker's pid and SIGKILLs it at epoch 3 of the sweep's first attempt (a marker
    file in `marker_dir` says it did); any later attempt trains to the end."""
    ctx = sweeps.context()
    marker = os.path.join(config["marker_dir"], "killed")
    start = _start()
    for e in range(start, int(config["epochs"])):
        if e == 2 and ctx.rank == 0 and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(float(config.get("epoch_s", 0)))
        _epoch(e, start, ctx.rank)
    return {"val_accuracy": 0.1 * int(config["epochs"]), "started_at": float(start)}


def endless(config):
    """Checkpointed epochs, far more than a time limit lets it run."""
    ctx = sweeps.context()
    start = _start()
    for e in range(start, int(config["epochs"])):
        time.sleep(float(config.get("epoch_s", 0)))
        _epoch(e, start, ctx.rank)
    return {"val_accuracy": 0.1 * int(config["epochs"])}
