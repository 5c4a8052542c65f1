"""Built-in models. Architecture knobs come from the trial's params, so they are searchable."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

MODELS = ("mlp", "cnn", "resnet")


class MLP(nn.Module):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        hidden: int = 128,
        layers: int = 2,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        width = math.prod(input_shape)
        blocks: list[nn.Module] = [nn.Flatten()]
        for _ in range(layers):
            blocks += [nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(dropout)]
            width = hidden
        blocks.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN(nn.Module):
    """LeNet-like: two conv/pool stages, then two linear layers."""

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        channels: int = 32,
        hidden: int = 128,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        c, h, w = input_shape
        pool = 2 if min(h, w) >= 16 else 1  # 8x8 digits keep their resolution
        self.features = nn.Sequential(
            nn.Conv2d(c, channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(pool),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        with torch.no_grad():
            n = self.features(torch.zeros(1, *input_shape)).numel()
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(n, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNet(nn.Module):
    """A small CIFAR ResNet: 3 stages of `depth` basic blocks, `width` doubling per stage."""

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        width: int = 16,
        depth: int = 2,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        c = input_shape[0]
        self.stem = nn.Sequential(
            nn.Conv2d(c, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        blocks: list[nn.Module] = []
        cin = width
        for stage in range(3):
            cout = width * 2**stage
            for i in range(depth):
                blocks.append(BasicBlock(cin, cout, 2 if (i == 0 and stage > 0) else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(cin, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


_ARCH_KEYS = {
    "mlp": ("hidden", "layers", "dropout"),
    "cnn": ("channels", "hidden", "dropout"),
    "resnet": ("width", "depth", "dropout"),
}


def arch_params(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The part of a trial's config that shapes the model (the driver rebuilds it from this)."""
    if name not in _ARCH_KEYS:
        raise ValueError(f"unknown model '{name}' (known: {', '.join(MODELS)})")
    return {k: config[k] for k in _ARCH_KEYS[name] if k in config}


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, **arch: Any
) -> nn.Module:
    cls = {"mlp": MLP, "cnn": CNN, "resnet": ResNet}.get(name)
    if cls is None:
        raise ValueError(f"unknown model '{name}' (known: {', '.join(MODELS)})")
    return cls(tuple(input_shape), num_classes, **arch)


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
