"""An AI Platform-era training module, unchanged: argparse flags, torch.distributed from the
environment (MASTER_ADDR, RANK, WORLD_SIZE...), the metric reported with cloudml-hypertune, and
the model saved under --job-dir joined with the trial id from TF_CONFIG, as Google's samples do.
It knows nothing about sweeps."""

import argparse
import gc
import io
import json
import os

import hypertune
import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812
from sklearn.datasets import load_digits
from torch import nn


def save_model(model: nn.Module, job_dir: str) -> None:
    """model.pt under JOB_DIR/TRIAL (each HP-tuning trial its own folder): GCS or a folder."""
    trial = (json.loads(os.environ.get("TF_CONFIG", "{}")).get("task") or {}).get("trial")
    out = os.path.join(job_dir, trial) if trial else job_dir
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    if out.startswith("gs://"):
        from google.cloud import storage

        bucket, _, path = out[len("gs://") :].partition("/")
        blob = storage.Client().bucket(bucket).blob(f"{path}/model.pt".lstrip("/"))
        blob.upload_from_string(buf.getvalue())
    else:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "model.pt"), "wb") as f:
            f.write(buf.getvalue())
    print(f"model saved to {out}/model.pt", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--learning_rate", type=float, default=0.01)
    p.add_argument("--hidden_units", type=int, default=64)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--job-dir", default="")
    args = p.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    torch.manual_seed(0)
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    x_tr, y_tr, x_va, y_va = x[:1400], y[:1400], x[1400:], y[1400:]
    model = nn.Sequential(
        nn.Linear(64, args.hidden_units), nn.ReLU(), nn.Linear(args.hidden_units, 10)
    )
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = (
        torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
        if args.optimizer == "sgd"
        else torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    )
    hpt = hypertune.HyperTune()
    print(
        f"rank {rank} of {world}: lr={args.learning_rate} hidden={args.hidden_units} "
        f"optimizer={args.optimizer} job_dir={args.job_dir}",
        flush=True,
    )
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(epoch))
        shard = perm[rank::world]
        for i in range(0, len(shard), 32):
            b = shard[i : i + 32]
            loss = F.cross_entropy(model(x_tr[b]), y_tr[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            acc = (model(x_va).argmax(1) == y_va).float().mean().item()
        if rank == 0:
            hpt.report_hyperparameter_tuning_metric(
                hyperparameter_metric_tag="accuracy", metric_value=acc, global_step=epoch + 1
            )
            print(f"epoch {epoch + 1}: accuracy={acc:.4f}", flush=True)
    if rank == 0 and args.job_dir:
        net = model.module if world > 1 else model
        save_model(net, args.job_dir)
    if world > 1:
        # DDP keeps the process group alive; free it and its gloo threads now, or one of them
        # may still be cleaning up when Python exits, and abort the process (torch 2.x).
        del model, opt
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
