"""The built-in training loop, written against the same API user code gets
(`sweeps.worker.runtime`).

Small datasets live as tensors on the worker's device: batches are index gathers, not per-sample
Python. Each rank trains on a disjoint, equal-sized shard that is reshuffled every epoch, and
every metric is all-reduced so all ranks agree (and so take the same prune decision).
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from sweeps.common import names
from sweeps.worker import runtime
from trainer.best import BestKeeper
from trainer.data import DatasetBundle, augment_cifar, data_key, load_dataset
from trainer.models import arch_params, build_model, param_count
from trainer.shards import check_shards as _check_shards
from trainer.shards import spread as _spread

_DATA: dict[tuple[Any, ...], DatasetBundle] = {}
_ON_DEVICE: dict[tuple[Any, ...], tuple[torch.Tensor, ...]] = {}


def dataset(
    config: dict[str, Any], device: torch.device
) -> tuple[DatasetBundle, tuple[torch.Tensor, ...]]:
    """Load once per worker process and keep it on the device across the lane's trials."""
    key = data_key(config)  # the locked test rows (data.test_fraction) are never loaded here
    if key not in _DATA:
        _DATA[key] = load_dataset(*key)  # type: ignore[arg-type]
        _ON_DEVICE.clear()  # a lane serves one dataset at a time; do not hoard device memory
    b = _DATA[key]
    dkey = (*key, str(device))
    if dkey not in _ON_DEVICE:
        _ON_DEVICE[dkey] = tuple(t.to(device) for t in (b.x_train, b.y_train, b.x_val, b.y_val))
    return b, _ON_DEVICE[dkey]


def warm_up(config: dict[str, Any], device: torch.device, log_models: bool = True) -> None:
    """A lane's first step before its first trial: data on the device, the model's kernels and
    the allocator warm (one forward/backward pass on a batch), and the MLflow model folder's
    fixed part written, so the lane's first trial costs what the others do."""
    bundle, (x_tr, y_tr, x_va, _) = dataset(config, device)
    join: Any = None
    if log_models and device.type == "cpu":  # a GPU context must not be forked
        from trainer.packaging import template_in_child

        join = template_in_child(*_template_args(bundle, x_va))
    try:
        name = config.get("model", "mlp")
        arch = arch_params(name, config)
        model = build_model(name, bundle.input_shape, bundle.num_classes, **arch).to(device)
        n = min(len(x_tr), int(config.get("batch_size", 64)))
        F.cross_entropy(model(x_tr[:n]), y_tr[:n]).backward()
        # An optimizer's first construction in a process costs ~1.5 s here (torch.optim's lazy
        # imports), which made a lane's first trial twice a later one. Its step on this
        # throwaway model warms the update kernels too.
        with contextlib.suppress(ValueError):  # an unknown optimizer: the trial says so
            make_optimizer(model, config).step()
    finally:
        if join is not None:
            join()  # the child is reaped even when this warm-up fails
    if log_models:
        _package(model, name, arch, bundle, x_va)


def shard_indices(n: int, rank: int, world: int, seed: int, epoch: int) -> torch.Tensor:
    """This rank's shard for an epoch: a seeded permutation, cut into `world` equal disjoint parts.

    The tail that does not divide evenly is dropped (like DistributedSampler(drop_last=True)) so
    every rank runs the same number of steps and DDP's all-reduces stay in step.
    """
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    perm = torch.randperm(n, generator=g)
    per = n // world
    return perm[rank * per : (rank + 1) * per]


def _all_reduce(t: torch.Tensor, world: int) -> torch.Tensor:
    if world > 1:
        import torch.distributed as dist

        dist.all_reduce(t)
    return t


def make_optimizer(model: nn.Module, cfg: dict[str, Any]) -> torch.optim.Optimizer:
    name = cfg.get("optimizer", "adamw")
    lr = float(cfg.get("lr", 1e-3))
    wd = float(cfg.get("weight_decay", 0.0))
    if name == "sgd":
        momentum = float(cfg.get("momentum", 0.9))
        return torch.optim.SGD(
            model.parameters(),
            lr=lr,
            momentum=momentum,
            weight_decay=wd,
            nesterov=bool(cfg.get("nesterov", False)) and momentum > 0,
        )
    if name in ("adamw", "adam"):
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    raise ValueError(f"unknown optimizer '{name}' (known: sgd, adamw)")


def make_schedule(
    opt: torch.optim.Optimizer, cfg: dict[str, Any], epochs: int, steps_per_epoch: int
) -> tuple[torch.optim.lr_scheduler.LRScheduler | None, bool]:
    """Returns the scheduler and whether it steps per batch (one-cycle) or per epoch (cosine)."""
    name = cfg.get("schedule", "none")
    if name in ("none", None):
        return None, False
    if name == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs), False
    if name == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(
            opt,
            max_lr=float(cfg.get("lr", 1e-3)),
            epochs=epochs,
            steps_per_epoch=max(1, steps_per_epoch),
        ), True
    raise ValueError(f"unknown schedule '{name}' (known: none, cosine, onecycle)")


def _save(path: str, model: nn.Module, opt: Any, sched: Any, epoch: int) -> None:
    state = {
        "model": getattr(model, "module", model).state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict() if sched is not None else None,
        "epoch": epoch,
    }
    torch.save(state, os.path.join(path, "state.pt"))


def train(config: dict[str, Any]) -> dict[str, Any]:
    ctx = runtime.context()
    device = torch.device(ctx.device) if not isinstance(ctx.device, torch.device) else ctx.device
    rank, world = ctx.rank, ctx.world_size
    bundle, (x_tr, y_tr, x_va, y_va) = dataset(config, device)

    torch.manual_seed(ctx.seed)  # initial weights depend only on the trial's seed
    name, arch, base, model = _build_model(config, bundle, device, world)
    cuda = device.type == "cuda"

    epochs = int(config.get("epochs", 10))
    bs = max(1, int(config.get("batch_size", 64)) // world)  # batch_size is the global batch
    shard_n = len(x_tr) // world
    steps = max(1, math.ceil(shard_n / bs))
    opt = make_optimizer(model, config)
    sched, per_batch = make_schedule(opt, config, epochs, steps)
    smoothing = float(config.get("label_smoothing", 0.0))
    augment = bundle.name == "cifar10" and config.get("augment", True)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    start = _resume(base, opt, sched, device)
    best = BestKeeper(ctx.model_metric, ctx.model_direction, rank)  # tracking.model: best
    best.resume(runtime.get_checkpoint())

    metrics: dict[str, float] = {}
    shard_check: dict[str, float] = {}
    for epoch in range(start, epochs):
        t0 = time.perf_counter()
        model.train()
        idx = shard_indices(len(x_tr), rank, world, ctx.seed, epoch).to(device)
        shard_check = _check_shards(idx, len(x_tr), world)
        gen = torch.Generator(device="cpu").manual_seed(ctx.seed * 7919 + epoch * 31 + rank)
        loss_sum = torch.zeros((), device=device)
        # The batch loop stays inline: no per-batch helper call on the hot path.
        for i in range(0, len(idx), bs):
            b = idx[i : i + bs]
            xb, yb = x_tr[b], y_tr[b]
            if augment:
                xb = augment_cifar(xb, gen)
            if cuda:
                xb = xb.contiguous(memory_format=torch.channels_last)
            with autocast:
                loss = F.cross_entropy(model(xb), yb, label_smoothing=smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if per_batch and sched is not None:
                sched.step()
            loss_sum += loss.detach() * len(b)
        if sched is not None and not per_batch:
            sched.step()
        train_s = time.perf_counter() - t0
        val = evaluate(base, x_va, y_va, rank, world, bs=max(bs, 512), autocast=autocast)
        metrics = _epoch_metrics(
            epoch, t0, train_s, val, loss_sum, len(idx), shard_check, world, device
        )
        if rank == 0:  # the trial's log: what `sweeps logs` shows
            _print_epoch(metrics, epochs)
        best.offer(metrics, base, ctx.step + 1)  # before the report: its checkpoint has it
        _report_epoch(metrics, model, opt, sched, epoch, rank, best)

    out: dict[str, Any] = {**metrics, "param_count": param_count(base)}
    if rank == 0:
        out["dataset"] = _dataset_record(bundle, len(x_tr), len(x_va))
        if ctx.log_model:
            out["model_checkpoint"] = best.restore(base)  # None: the last weights are the model
            out["model_package"] = _package(base, name, arch, bundle, x_va)
    return out


def _build_model(
    config: dict[str, Any], bundle: DatasetBundle, device: torch.device, world: int
) -> tuple[str, dict[str, Any], nn.Module, nn.Module]:
    """The trial's network on its device: (model name, arch params, the bare model, the one
    trained: DDP-wrapped and/or compiled)."""
    name = config.get("model", "mlp")
    arch = arch_params(name, config)
    base = build_model(name, bundle.input_shape, bundle.num_classes, **arch)
    if device.type == "cuda":
        base = base.to(memory_format=torch.channels_last)
    base = base.to(device)
    model: nn.Module = base
    if world > 1:
        from ray.train.torch import prepare_model

        model = prepare_model(base, move_to_device=False)
    if config.get("compile"):
        model = torch.compile(model)
    return name, arch, base, model


def _resume(
    base: nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler | None,
    device: torch.device,
) -> int:
    """Loads the trial's checkpoint, if it has one; the epoch to start from."""
    resume = runtime.get_checkpoint()
    if resume is None:
        return 0
    state = torch.load(os.path.join(resume, "state.pt"), map_location=device)
    base.load_state_dict(state["model"])
    fresh = [dict(g) for g in opt.param_groups]  # made from this trial's config
    opt.load_state_dict(state["optimizer"])
    if sched is None:  # the config's lr etc. win over the checkpoint's (PBT perturbs them)
        for group, made in zip(opt.param_groups, fresh, strict=True):
            group.update({k: made[k] for k in ("lr", "weight_decay", "momentum") if k in made})
    if sched is not None and state["scheduler"] is not None:
        sched.load_state_dict(state["scheduler"])
    return int(state["epoch"])


def _epoch_metrics(
    epoch: int,
    t0: float,
    train_s: float,
    val: dict[str, float],
    loss_sum: torch.Tensor,
    n_seen: int,
    shard_check: dict[str, float],
    world: int,
    device: torch.device,
) -> dict[str, float]:
    """One epoch's reported metrics, all-reduced so every rank holds the same numbers."""
    tot = _all_reduce(
        torch.stack([loss_sum.float(), torch.tensor(float(n_seen), device=device)]), world
    )
    m = {
        "epoch": epoch + 1,
        "train_loss": (tot[0] / tot[1]).item(),
        **val,
        "epoch_seconds": time.perf_counter() - t0,
        "samples_per_s": tot[1].item() / max(train_s, 1e-9),
        "world_size": world,
        **shard_check,
        "val_rank_spread": _spread(val["val_accuracy"], world, device),
    }
    return {k: m[k] for k in names.TRAINER_EPOCH_METRICS}  # what `sweeps validate` accepts


def _print_epoch(metrics: dict[str, float], epochs: int) -> None:
    print(
        f"epoch {metrics['epoch']}/{epochs}: train_loss={metrics['train_loss']:.4f} "
        f"val_loss={metrics['val_loss']:.4f} val_accuracy={metrics['val_accuracy']:.4f}",
        flush=True,
    )


def _report_epoch(
    metrics: dict[str, float],
    model: nn.Module,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LRScheduler | None,
    epoch: int,
    rank: int,
    best: BestKeeper,
) -> None:
    """Reports the epoch; rank 0 attaches a checkpoint when one is due."""
    with tempfile.TemporaryDirectory(prefix="sweeps-ckpt-") as tmp:
        if rank == 0 and runtime.checkpoint_due():
            _save(tmp, model, opt, sched, epoch + 1)
            best.save(tmp)
        runtime.report(metrics, checkpoint_dir=tmp if rank == 0 else None)


def _dataset_record(bundle: DatasetBundle, rows_train: int, rows_val: int) -> dict[str, Any]:
    """What the trial trained and validated on, as the driver logs it to MLflow."""
    return {
        "name": bundle.name,
        "source": bundle.source,
        "digest": bundle.digest_val,  # what models are compared on (the registry's gate)
        "digest_train": bundle.digest_train,
        "digest_val": bundle.digest_val,
        "rows_train": rows_train,
        "rows_val": rows_val,
        "split_seed": bundle.split_seed,
        "val_fraction": bundle.val_fraction,
    }


def _package(model: nn.Module, name: str, arch: dict[str, Any], bundle: Any, x_val: Any) -> bytes:
    """The trained network as an MLflow pyfunc folder (weights + build config, no pickle)."""
    from trainer.packaging import package_builtin

    info = {
        "model": name,
        "arch": arch,
        "input_shape": list(bundle.input_shape),
        "num_classes": bundle.num_classes,
    }
    _, _, example, meta = _template_args(bundle, x_val)
    return package_builtin(model, info, example, meta)


def _template_args(bundle: Any, x_val: Any) -> tuple[tuple[int, ...], int, Any, dict[str, str]]:
    """What the MLflow model folder's fixed part is made of: input shape, classes, the input
    example (four validation samples) and the dataset's metadata."""
    from trainer.data import input_scaling

    example = x_val[:4].detach().float().cpu().numpy()
    meta = {names.DATASET: bundle.name, names.INPUT_SCALING: input_scaling(bundle.name)}
    return tuple(bundle.input_shape), bundle.num_classes, example, meta


@torch.no_grad()
def evaluate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    rank: int,
    world: int,
    bs: int,
    autocast: Any = None,
) -> dict[str, float]:
    """Validation over this rank's slice, summed across ranks: identical numbers everywhere."""
    model.eval()
    n = len(x)
    lo, hi = rank * n // world, (rank + 1) * n // world
    loss = torch.zeros((), device=x.device)
    correct = torch.zeros((), device=x.device)
    for i in range(lo, hi, bs):
        xb, yb = x[i : min(i + bs, hi)], y[i : min(i + bs, hi)]
        with autocast or nullcontext():
            logits = model(xb)
        loss += F.cross_entropy(logits.float(), yb, reduction="sum")
        correct += (logits.argmax(1) == yb).sum()
    t = _all_reduce(
        torch.stack([loss, correct.float(), torch.tensor(float(hi - lo), device=x.device)]), world
    )
    return {"val_loss": (t[0] / t[2]).item(), "val_accuracy": (t[1] / t[2]).item()}
