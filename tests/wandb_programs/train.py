"""A W&B sweep program, written as W&B's PyTorch sweep example is written: `wandb.init()`,
hyperparameters from `wandb.config`, metrics with `wandb.log`. It knows nothing of sweeps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812
import wandb


def build_dataset(batch_size):
    # A small synthetic set keeps the test fast: the label is the largest of 10 features.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 32, generator=g)
    y = x[:, :10].argmax(dim=1)
    dataset = torch.utils.data.TensorDataset(x, y)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True)


def build_network(fc_layer_size, dropout):
    network = nn.Sequential(  # fully connected, single hidden layer
        nn.Linear(32, fc_layer_size),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(fc_layer_size, 10),
        nn.LogSoftmax(dim=1),
    )
    return network


def build_optimizer(network, optimizer, learning_rate):
    if optimizer == "sgd":
        optimizer = torch.optim.SGD(network.parameters(), lr=learning_rate, momentum=0.9)
    elif optimizer == "adam":
        optimizer = torch.optim.Adam(network.parameters(), lr=learning_rate)
    return optimizer


def train_epoch(network, loader, optimizer):
    cumu_loss = 0
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(network(data), target)
        cumu_loss += loss.item()
        loss.backward()
        optimizer.step()
        wandb.log({"batch loss": loss.item()})
    return cumu_loss / len(loader)


def train(config=None):
    # Initialize a new wandb run
    with wandb.init(config=config):
        # If called by wandb.agent, as below, this config will be set by Sweep Controller
        config = wandb.config

        loader = build_dataset(config.batch_size)
        network = build_network(config.fc_layer_size, config.dropout)
        optimizer = build_optimizer(network, config.optimizer, config.learning_rate)

        for epoch in range(config.epochs):
            avg_loss = train_epoch(network, loader, optimizer)
            wandb.log({"loss": avg_loss, "epoch": epoch})

        # Save what was built, with the run's files.
        torch.save(
            {"model": network.state_dict(), "optimizer": optimizer.state_dict()},
            os.path.join(wandb.run.dir, "model.pt"),
        )


if __name__ == "__main__":
    train()
