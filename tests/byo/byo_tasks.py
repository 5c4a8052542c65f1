"""Training functions written against the public `sweeps` API, used by the lane tests."""

from __future__ import annotations

import os
import signal
import tempfile
import time

import sweeps


def curve(config):
    """A fake learning curve: converges faster for larger lr."""
    ctx = sweeps.context()
    acc = 0.0
    for e in range(int(config["epochs"])):
        acc = 1 - 0.9 ** ((e + 1) * config["lr"] * 100)
        sweeps.report({"val_accuracy": acc, "epoch": e + 1})
    print(f"trial {ctx.trial_number} done on rank {ctx.rank}")
    return {"val_accuracy": acc}


def init_weights(config):
    """Reports a checksum of freshly built weights: must depend on the trial seed only."""
    import torch

    from trainer.models import build_model

    ctx = sweeps.context()
    if config.get("meet_dir"):
        _meet_other_lanes(config["meet_dir"], int(config.get("lanes", 2)), ctx.rank)
    torch.manual_seed(ctx.seed)
    m = build_model("mlp", (1, 8, 8), 10, hidden=16, layers=1)
    s = float(sum(p.double().sum() for p in m.parameters()))
    # Leak-bait: a module-level list would carry state across trials; the lane must not care.
    sweeps.report({"val_accuracy": 0.5, "weights_sum": s, "seed": float(ctx.seed)})
    return {"val_accuracy": 0.5, "weights_sum": s}


def _meet_other_lanes(meet_dir: str, lanes: int, rank: int, timeout_s: float = 120.0) -> None:
    """Holds a lane's first trial until `lanes` lanes have each started one (rank 0 counts).

    Tiny trials can finish the whole budget on the first lane before the second is up; this
    makes "every lane takes trials" a property of the dispatch, not of the machine's speed.
    A lane that never gets a trial leaves its marker unwritten, so the wait times out and the
    test's assertion fails.
    """
    if rank == 0:  # a lane's worker processes live on across its trials: one marker per lane
        open(os.path.join(meet_dir, f"lane-{os.getpid()}"), "w").close()
    deadline = time.monotonic() + timeout_s
    while len(os.listdir(meet_dir)) < lanes and time.monotonic() < deadline:
        time.sleep(0.1)


def flaky(config):
    """Raises on every rank for lr above 0.01: a user bug that must FAIL only that trial."""
    if config["lr"] > 0.01:
        raise ValueError(f"lr {config['lr']:.4f} is too hot")
    return curve(config)


def nan_loss(config):
    for e in range(int(config["epochs"])):
        sweeps.report({"val_accuracy": 0.1, "train_loss": float("nan") if e == 1 else 1.0})
    return {"val_accuracy": 0.1}


def kill_once(config):
    """SIGKILLs its own worker mid-trial the first time, then resumes from its checkpoint."""
    ctx = sweeps.context()
    marker = os.path.join(config["marker_dir"], f"killed-{ctx.trial_number}")
    start = 0
    resume = sweeps.get_checkpoint()
    if resume:
        with open(os.path.join(resume, "epoch.txt")) as f:
            start = int(f.read())
    for e in range(start, int(config["epochs"])):
        if e == 2 and not os.path.exists(marker) and ctx.rank == 0:
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(float(config.get("epoch_s", 0)))  # an epoch's training
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(e + 1))
            sweeps.report(
                {"val_accuracy": 0.2 * (e + 1), "resumed_from": float(start)},
                checkpoint_dir=d if ctx.rank == 0 else None,
            )
    return {"val_accuracy": 0.2 * int(config["epochs"]), "resumed_from": float(start)}


def no_objective(config):
    sweeps.report({"accuracy": 0.5})
    return {"accuracy": 0.5}


def slow(config):
    """A trial that takes a while: for stop / Ctrl-C / driver-kill tests."""
    import time

    for e in range(int(config["epochs"])):
        time.sleep(float(config.get("sleep", 0.2)))
        sweeps.report({"val_accuracy": 0.1 * (e + 1)})
    return {"val_accuracy": 0.1 * int(config["epochs"])}


def nodes(config):
    """Reports on how many Ray nodes the trial's workers run (for the two-node cluster test)."""
    import ray
    import torch.distributed as dist

    ctx = sweeps.context()
    me = ray.get_runtime_context().get_node_id()
    ids = [None] * ctx.world_size
    if ctx.world_size > 1:
        dist.all_gather_object(ids, me)
    else:
        ids = [me]
    print("nodes:", ",".join(ids))
    sweeps.report({"val_accuracy": 1.0, "distinct_nodes": float(len(set(ids)))})
    return {"val_accuracy": 1.0, "distinct_nodes": float(len(set(ids)))}


def long_resumable(config):
    """Many short epochs, a checkpoint each; resumes from the latest one it is given."""
    ctx = sweeps.context()
    start = 0
    resume = sweeps.get_checkpoint()
    if resume:
        with open(os.path.join(resume, "epoch.txt")) as f:
            start = int(f.read())
    for e in range(start, int(config["epochs"])):
        time.sleep(float(config.get("epoch_s", 0.0)))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(e + 1))
            sweeps.report(
                {"val_accuracy": min(1.0, 0.001 * (e + 1)), "started_at": float(start)},
                checkpoint_dir=d if ctx.rank == 0 else None,
            )
    return {"val_accuracy": min(1.0, 0.001 * int(config["epochs"])), "started_at": float(start)}


def worker_pid(config):
    """Reports the worker's process id: tells which worker processes a trial ran on."""
    pid = float(os.getpid())
    sweeps.report({"val_accuracy": config["lr"], "worker_pid": pid})
    return {"val_accuracy": config["lr"], "worker_pid": pid}


def nodes_long(config):
    """Epochs with a checkpoint each, reporting how many Ray nodes this epoch's workers are on:
    for the lost-node test (the trial goes on, on fewer nodes, from its last checkpoint)."""
    import ray
    import torch.distributed as dist

    ctx = sweeps.context()
    start = 0
    resume = sweeps.get_checkpoint()
    if resume:
        with open(os.path.join(resume, "epoch.txt")) as f:
            start = int(f.read())
    me = ray.get_runtime_context().get_node_id()
    ids = [me] * ctx.world_size
    if ctx.world_size > 1:
        dist.all_gather_object(ids, me)
    for e in range(start, int(config["epochs"])):
        time.sleep(float(config.get("epoch_s", 0.5)))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(e + 1))
            metrics = {
                "val_accuracy": 0.01 * (e + 1),
                "nodes": float(len(set(ids))),
                "resumed_from": float(start),
            }
            sweeps.report(metrics, checkpoint_dir=d if ctx.rank == 0 else None)
    return {"val_accuracy": 0.01 * int(config["epochs"]), "resumed_from": float(start)}


def chatty(config):
    """Prints a line per epoch on every rank, as users' code does (issue 17: logs); the last
    epoch is checkpointed, so Ray Train logs its report while the trial runs (issue 29 #15)."""
    import logging
    import threading

    ctx = sweeps.context()
    acc = 0.0
    epochs = int(config["epochs"])
    # A record of Ray Train's, from a thread of its (as its report thread logs), and one of
    # the user's own: only the user's belongs in the trial's log.
    ray_says = threading.Thread(
        target=logging.getLogger("ray.train.v2").warning, args=("TrainingReport(from Ray)",)
    )
    ray_says.start()
    ray_says.join()
    logging.getLogger("chatty").warning("chatty's own warning on rank %d", ctx.rank)
    for e in range(epochs):
        acc = 0.5 + 0.1 * e * config["lr"]
        print(f"epoch {e} on rank {ctx.rank}: acc {acc:.4f}", flush=True)
        if e < epochs - 1:
            sweeps.report({"val_accuracy": acc})
            continue
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(e + 1))
            sweeps.report({"val_accuracy": acc}, checkpoint_dir=d if ctx.rank == 0 else None)
    return {"val_accuracy": acc}
