"""Training functions for the checkpoint-fault tests (issue 32 #7), written against the public
`sweeps` API: a checkpoint each epoch, holding the epoch it was written at."""

from __future__ import annotations

import os
import tempfile
import time

import sweeps


def _start() -> int:
    resume = sweeps.get_checkpoint()
    if not resume:
        return 0
    with open(os.path.join(resume, "epoch.txt")) as f:
        return int(f.read())


def _fill(path: str, leave_kb: int) -> None:
    """Write zeros into `path` until its disk is full, then give back `leave_kb`: a nearly full
    disk, where small files (Ray Train's own records) still fit and a checkpoint does not."""
    chunk = b"\0" * 65536
    with open(path, "wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(max(0, size - leave_kb * 1024))


def disk_fills(config):
    """Checkpoints of `pad_kb` each; the disk at `fill` is full during epochs `full_from` up to
    (not including) `full_until`, as another process filling it would leave it."""
    ctx = sweeps.context()
    start = _start()
    filler = config.get("fill")
    for e in range(start, int(config["epochs"])):
        time.sleep(float(config.get("epoch_s", 0.0)))
        if filler and ctx.rank == 0:
            if e == int(config["full_from"]):
                _fill(filler, int(config.get("leave_kb", 0)))
            if e == int(config["full_until"]) and os.path.exists(filler):
                os.remove(filler)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(e + 1))
            with open(os.path.join(d, "pad.bin"), "wb") as f:
                f.write(os.urandom(int(config.get("pad_kb", 64)) * 1024))
            sweeps.report(
                {"val_accuracy": 0.1 * (e + 1), "started_at": float(start)},
                checkpoint_dir=d if ctx.rank == 0 else None,
            )
    print(f"trained epochs {start + 1}..{config['epochs']}")
    return {"val_accuracy": 0.1 * int(config["epochs"]), "started_at": float(start)}


def torn_then_killed(config):
    """The sweep's first attempt tears its own latest checkpoint (step 3: its pad file cut
    short, as an upload cut off leaves it) and SIGKILLs its worker at epoch 4; a marker file in
    `marker_dir` says it did. Any later attempt trains to the end."""
    import glob
    import signal

    ctx = sweeps.context()
    marker = os.path.join(config["marker_dir"], "torn")
    start = _start()
    for e in range(start, int(config["epochs"])):
        if e == 3 and ctx.rank == 0 and not os.path.exists(marker):
            name = f"trial{ctx.trial_number:06d}-step00003-*"
            (latest,) = glob.glob(os.path.join(config["store"], "*", name))
            with open(os.path.join(latest, "pad.bin"), "r+b") as f:
                f.truncate(1000)
            with open(marker, "w") as f:
                f.write(latest)
            os.kill(os.getpid(), signal.SIGKILL)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(e + 1))
            with open(os.path.join(d, "pad.bin"), "wb") as f:
                f.write(os.urandom(4096))
            sweeps.report(
                {"val_accuracy": 0.1 * (e + 1)}, checkpoint_dir=d if ctx.rank == 0 else None
            )
    print(f"trained epochs {start + 1}..{config['epochs']}")
    return {"val_accuracy": 0.1 * int(config["epochs"])}


def lr_curve(config):
    """A learning curve that rises with lr, a checkpoint of `pad_kb` each epoch: tiny trials
    whose checkpoints the retention tests count."""
    ctx = sweeps.context()
    acc = 0.0
    for e in range(_start(), int(config["epochs"])):
        acc = 1 - 0.9 ** ((e + 1) * config["lr"] * 100)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as f:
                f.write(str(e + 1))
            with open(os.path.join(d, "pad.bin"), "wb") as f:
                f.write(os.urandom(int(config.get("pad_kb", 16)) * 1024))
            sweeps.report({"val_accuracy": acc}, checkpoint_dir=d if ctx.rank == 0 else None)
    return {"val_accuracy": acc}
