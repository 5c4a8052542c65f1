"""A W&B program with flags, as W&B's examples with argparse are written: the flags become the
run's config (`wandb.init(config=args)`), and each epoch is logged at its own step."""

import argparse
import os

import torch
import torch.nn.functional as F  # noqa: N812
import wandb
from torch import nn


def main():
    parser = argparse.ArgumentParser(description="W&B flags example")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate")
    parser.add_argument("--hidden", type=int, default=12, help="hidden units")
    parser.add_argument("--epochs", type=int, default=3, help="epochs to train")
    args = parser.parse_args()

    wandb.init(config=args)

    torch.manual_seed(0)
    x = torch.randn(256, 16)
    y = (x[:, 0] > 0).long()
    model = nn.Sequential(nn.Linear(16, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

    for epoch in range(1, args.epochs + 1):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
        wandb.log({"train_loss": loss.item(), "val_accuracy": accuracy}, step=epoch)

    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict()},
        os.path.join(wandb.run.dir, "model.pt"),
    )
    wandb.finish()


if __name__ == "__main__":
    main()
