"""A seed-004-style training job, unchanged: CLI flags in; a `.pth` model and `metrics.json` out.

`--model-dir` defaults to AI Platform's `AIP_MODEL_DIR` (set per trial by sweeps, as by Vertex
AI). `metrics.json` is rewritten after every epoch with the latest metrics; `--bucket-name`, when
given, also uploads both files to that GCS bucket.
"""

import argparse
import json
import os

import torch
import torch.nn.functional as F  # noqa: N812
from sklearn.datasets import load_digits
from torch import nn


def upload(bucket_name: str, folder: str, names: list[str]) -> None:
    from google.cloud import storage

    bucket = storage.Client().bucket(bucket_name)
    for name in names:
        bucket.blob(f"model/{name}").upload_from_filename(os.path.join(folder, name))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--bucket-name", default="")
    p.add_argument("--model-dir", default=os.environ.get("AIP_MODEL_DIR", "model"))
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--hidden-units", type=int, default=64)
    args = p.parse_args()

    os.makedirs(args.model_dir, exist_ok=True)
    torch.manual_seed(0)
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target)
    x_tr, y_tr, x_va, y_va = x[:1400], y[:1400], x[1400:], y[1400:]
    model = nn.Sequential(
        nn.Linear(64, args.hidden_units), nn.ReLU(), nn.Linear(args.hidden_units, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
    metrics_path = os.path.join(args.model_dir, "metrics.json")
    for epoch in range(1, args.epochs + 1):
        for i in range(0, len(x_tr), 32):
            loss = F.cross_entropy(model(x_tr[i : i + 32]), y_tr[i : i + 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            val_loss = F.cross_entropy(model(x_va), y_va).item()
            acc = (model(x_va).argmax(1) == y_va).float().mean().item()
        with open(metrics_path, "w") as f:
            json.dump({"epoch": epoch, "accuracy": acc, "val_loss": val_loss}, f)
        print(f"epoch {epoch}: accuracy {acc:.4f}")
    torch.save(model.state_dict(), os.path.join(args.model_dir, "model.pth"))
    if args.bucket_name:
        upload(args.bucket_name, args.model_dir, ["model.pth", "metrics.json"])


if __name__ == "__main__":
    main()
