"""Evidence that DDP sharding is right, recorded each epoch: the ranks' shards are disjoint and
cover the training set, and every rank computed the same validation numbers."""

from __future__ import annotations

import torch


def spread(value: float, world: int, device: torch.device) -> float:
    """Max minus min of a metric across ranks: 0 when every rank computed the same number."""
    if world == 1:
        return 0.0
    import torch.distributed as dist

    t = torch.tensor([value], device=device, dtype=torch.float64)
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t)
    vals = torch.cat(parts)
    return float(vals.max() - vals.min())


def check_shards(idx: torch.Tensor, n: int, world: int) -> dict[str, float]:
    """Gathers every rank's shard indices each epoch to record that they are disjoint and cover
    the training set (all but the < world tail): cheap evidence that DDP sharding is right."""
    if world == 1:
        return {"shard_size": float(len(idx)), "shard_coverage": len(idx) / n, "shard_overlap": 0.0}
    import torch.distributed as dist

    parts = [torch.empty_like(idx) for _ in range(world)]
    dist.all_gather(parts, idx.contiguous())
    allidx = torch.cat(parts)
    unique = torch.unique(allidx).numel()
    return {
        "shard_size": float(len(idx)),
        "shard_coverage": unique / n,
        "shard_overlap": float(allidx.numel() - unique),
    }
