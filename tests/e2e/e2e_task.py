"""A training function as a user writes one (the public `sweeps` API), for the e2e's worker-kill
check: epochs that take a while, a checkpoint every epoch, and a line per epoch on the shared
volume saying which container ran it, so the test knows what to kill and what resumed."""

import os
import socket
import tempfile
import time

import sweeps


def slow_epochs(config):
    ctx = sweeps.context()
    start = 0
    resume = sweeps.get_checkpoint()
    if resume:
        with open(os.path.join(resume, "epoch.txt")) as f:
            start = int(f.read())
    log = os.path.join(config["progress_dir"], f"trial{ctx.trial_number}-rank{ctx.rank}.log")
    os.makedirs(config["progress_dir"], exist_ok=True)
    for e in range(start, int(config["epochs"])):
        time.sleep(float(config["epoch_s"]))  # an epoch's training
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(e + 1))
            sweeps.report(
                {"val_accuracy": config["lr"] * (e + 1), "resumed_from": float(start)},
                checkpoint_dir=d if ctx.rank == 0 else None,
            )
        with open(log, "a") as f:
            f.write(f"{socket.gethostname()} {e + 1}\n")
    return {"val_accuracy": config["lr"] * int(config["epochs"]), "resumed_from": float(start)}
