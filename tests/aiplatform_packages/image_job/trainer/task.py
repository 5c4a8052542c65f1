"""A PyTorch trainer in the style of Google's cloudml-samples, for a custom container: argparse
flags, the trial id from TF_CONFIG joined with --job-dir, hypertune per epoch, the model saved
to Cloud Storage with what it ran on (its Python, and where hypertune came from)."""

import argparse
import json
import os
import sys
import tempfile
from importlib import metadata

import hypertune
import torch
from google.cloud import storage
from sklearn.datasets import load_digits
from torch import nn


def get_args():
    parser = argparse.ArgumentParser(description="Digits in a custom container")
    parser.add_argument(
        "--job-dir",  # handled automatically by AI Platform
        help="GCS location to write checkpoints and export models",
    )
    parser.add_argument("--model-name", type=str, default="model.pt")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    return parser.parse_args()


def save_model(job_dir, local_path):
    """Saves the model to Google Cloud Storage"""
    model_name = os.path.basename(local_path)
    # Example: job_dir = 'gs://BUCKET_ID/hptuning_digits/1'
    job_dir = job_dir.replace("gs://", "")  # Remove the 'gs://'
    bucket_id = job_dir.split("/")[0]
    bucket_path = job_dir[len(f"{bucket_id}/") :]
    bucket = storage.Client().bucket(bucket_id)
    blob = bucket.blob(f"{bucket_path}/{model_name}")
    blob.upload_from_filename(local_path)


def main():
    args = get_args()
    env = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task_data = env.get("task") or {"type": "master", "index": 0}
    trial = task_data.get("trial")
    if trial is not None:
        args.job_dir = os.path.join(args.job_dir, trial)

    torch.manual_seed(0)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    hpt = hypertune.HyperTune()
    for epoch in range(1, args.epochs + 1):
        for i in range(0, 1400, 64):
            loss = nn.functional.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            accuracy = (model(x[1400:]).argmax(1) == y[1400:]).float().mean().item()
        hpt.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag="accuracy", metric_value=accuracy, global_step=epoch
        )
        print(f"epoch {epoch}: accuracy {accuracy:.4f}", flush=True)

    local = tempfile.mkdtemp()
    torch.save(model.state_dict(), os.path.join(local, args.model_name))
    ran = {
        "python": sys.executable,
        "hypertune_version": metadata.version("cloudml-hypertune"),
        "hypertune_file": hypertune.__file__,
        "torch_file": torch.__file__,
        "job_dir": args.job_dir,
        "lr": args.lr,
    }
    with open(os.path.join(local, "ran.json"), "w") as f:
        json.dump(ran, f)
    save_model(args.job_dir, os.path.join(local, args.model_name))
    save_model(args.job_dir, os.path.join(local, "ran.json"))


if __name__ == "__main__":
    main()
