"""A Ray Train function written as Ray's "Get started with PyTorch" writes one (prepare_model,
prepare_data_loader, a checkpoint per epoch, get_checkpoint at the start), on the digits data
set so it needs no download. It imports nothing from sweeps: the same file runs under Ray
Train with `RAY_CHDIR_TO_TRIAL_DIR=0 python ray_quickstart.py` from its folder (Ray's way to
read files relative to the original working directory), and as a sweep with trainer.entrypoint.
Like many training scripts it reads a file shipped beside it (`data/classes.txt`) and saves its
model and metrics with relative paths (`model.pth`, `out/metrics.json`).

`record_dir` (test instrumentation only) gets one line per rank and epoch: what the function
saw, for the test to read back.
"""

import json
import os
import tempfile

import ray.train
import ray.train.torch
import torch
from ray.train import Checkpoint, ScalingConfig
from ray.train.torch import TorchTrainer
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


def train_func(config):
    with open("data/classes.txt") as f:
        classes = f.read().split()

    # Model, Loss, Optimizer
    model = nn.Sequential(
        nn.Linear(64, config["hidden"]), nn.ReLU(), nn.Linear(config["hidden"], len(classes))
    )
    # [1] Prepare model.
    model = ray.train.torch.prepare_model(model)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)

    # Resume from the latest checkpoint, if any.
    start_epoch = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            state = torch.load(os.path.join(checkpoint_dir, "checkpoint.pt"))
            getattr(model, "module", model).load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start_epoch = state["epoch"] + 1

    # Data
    x, y = load_digits(return_X_y=True)
    data = TensorDataset(torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y))
    train_data, val_data = random_split(data, [0.8, 0.2], torch.Generator().manual_seed(0))
    train_loader = DataLoader(train_data, batch_size=config["batch_size"], shuffle=True)
    val_loader = DataLoader(val_data, batch_size=256)
    # [2] Prepare dataloader.
    train_loader = ray.train.torch.prepare_data_loader(train_loader)
    val_loader = ray.train.torch.prepare_data_loader(val_loader)

    # Training
    context = ray.train.get_context()
    for epoch in range(start_epoch, config["epochs"]):
        _record(config, context, epoch, checkpoint)
        if context.get_world_size() > 1:
            train_loader.sampler.set_epoch(epoch)
        model.train()
        for images, labels in train_loader:
            loss = criterion(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        model.eval()
        correct = total = 0
        with torch.no_grad():
            for images, labels in val_loader:
                correct += (model(images).argmax(1) == labels).sum().item()
                total += len(labels)

        # [3] Report metrics and checkpoint.
        metrics = {"loss": loss.item(), "accuracy": correct / total, "epoch": epoch}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            torch.save(
                {
                    "model": getattr(model, "module", model).state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "epoch": epoch,
                },
                os.path.join(temp_checkpoint_dir, "checkpoint.pt"),
            )
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(temp_checkpoint_dir))
        if context.get_world_rank() == 0:
            print(metrics)

    # Save the trained model and its final metrics.
    if context.get_world_rank() == 0:
        torch.save(getattr(model, "module", model).state_dict(), "model.pth")
        os.makedirs("out", exist_ok=True)
        with open("out/metrics.json", "w") as f:
            json.dump(metrics, f)


def _record(config, context, epoch, checkpoint):
    if not config.get("record_dir"):
        return
    line = {
        "lr": config["lr"],
        "epoch": epoch,
        "rank": context.get_world_rank(),
        "world_size": context.get_world_size(),
        "resumed": checkpoint is not None,
        "cwd": os.getcwd(),
        "leftover": os.path.exists("model.pth"),
    }
    with open(os.path.join(config["record_dir"], "seen.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"lr": 0.1, "hidden": 32, "batch_size": 64, "epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
    )
    result = trainer.fit()
    print(result.metrics)
