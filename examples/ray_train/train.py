"""A Ray Train function as Ray's "Get started with PyTorch" writes one (prepare_model,
prepare_data_loader, a checkpoint per epoch, get_checkpoint at the start), on the digits data set
so it needs no download. Nothing in it knows about sweeps:

    python train.py                   # Ray Train, one run of 2 workers
    sweeps run spec.yaml              # the same train_func as the trials of a sweep
"""

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
    # Model, Loss, Optimizer
    model = nn.Sequential(
        nn.Linear(64, config["hidden"]), nn.ReLU(), nn.Linear(config["hidden"], 10)
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


if __name__ == "__main__":
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"lr": 0.1, "hidden": 32, "batch_size": 64, "epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
    )
    result = trainer.fit()
    print(result.metrics)
