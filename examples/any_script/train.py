"""A training script that knows nothing about sweeps: flags in, `epoch=N val_accuracy=X` out.

Runs alone (`python train.py --lr=0.05`) or as one rank of a torch.distributed job when
WORLD_SIZE > 1 (gloo, so it works on CPU): each rank trains on its shard, DDP averages the
gradients, rank 0 prints the metrics.
"""

import argparse
import gc
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812
from sklearn.datasets import load_digits
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    torch.manual_seed(args.seed)
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    x_tr, y_tr, x_va, y_va = x[:1400], y[:1400], x[1400:], y[1400:]
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if rank == 0:
        print(f"training on {world} process(es), threads per process: {torch.get_num_threads()}")
    for epoch in range(1, args.epochs + 1):
        perm = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(epoch))
        shard = perm[rank::world]
        total = 0.0
        for i in range(0, len(shard), args.batch_size):
            b = shard[i : i + args.batch_size]
            loss = F.cross_entropy(model(x_tr[b]), y_tr[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(b)
        with torch.no_grad():
            acc = (model(x_va).argmax(1) == y_va).float().mean().item()
        if rank == 0:
            print(f"epoch={epoch} loss={total / len(shard):.4f} val_accuracy={acc:.4f}")
    if world > 1:
        # DDP keeps the process group alive; free it and its gloo threads now, or one of them
        # may still be cleaning up when Python exits, and abort the process (torch 2.x).
        del model, opt
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
