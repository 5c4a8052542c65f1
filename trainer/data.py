"""Built-in datasets as tensors: digits (bundled with sklearn), MNIST, Fashion-MNIST, CIFAR-10.

Nothing is ever downloaded: MNIST-style and CIFAR-10 files are read in their standard on-disk
formats from a local folder, or from `gs://bucket/prefix` copied once per node into a local
cache (`trainer.gcs`). The train/validation split is a seeded permutation, recorded in the bundle.
With a `test_fraction`, the permutation's last rows are a locked test split: never in the
bundle a trial trains and validates on, read only by `load_test_split` (at promote time).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass

import numpy as np
import torch

from trainer.errors import DatasetNotFound

DATASETS = ("digits", "mnist", "fashion_mnist", "cifar10")

_STATS = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
_MNIST_DIRS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
_CIFAR_DIR = "cifar-10-batches-py"


@dataclass(frozen=True)
class DatasetBundle:
    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    num_classes: int
    input_shape: tuple[int, ...]
    source: str
    digest: str  # of the whole split (both parts)
    split_seed: int
    val_fraction: float
    digest_train: str = ""
    digest_val: str = ""


def _digits() -> tuple[np.ndarray, np.ndarray, str]:
    flat = _bundled_digits()
    if flat is None:  # not where scikit-learn 1.x keeps it: its loader finds it
        from sklearn.datasets import load_digits

        d = load_digits()
        images, target = d.images, d.target
    else:
        images, target = flat[:, :-1].reshape(-1, 8, 8), flat[:, -1]
    x = (images / 16.0).astype(np.float32)[:, None, :, :]
    return x, target.astype(np.int64), "sklearn:load_digits"


def _bundled_digits() -> np.ndarray | None:
    """scikit-learn's bundled digits file (64 pixels and the label per row), read the way
    `load_digits` reads it but without importing scikit-learn: that import was ~0.8 s of every
    lane worker's start. tests/test_data.py checks both give the same arrays."""
    import importlib.util

    found = importlib.util.find_spec("sklearn")  # finds the package without running it
    if found is None or not found.submodule_search_locations:
        return None
    path = os.path.join(found.submodule_search_locations[0], "datasets", "data", "digits.csv.gz")
    if not os.path.exists(path):
        return None
    flat = np.loadtxt(path, delimiter=",")
    return flat if flat.shape == (1797, 65) else None


def _mnist(name: str, root: str) -> tuple[np.ndarray, np.ndarray, str]:
    # torchvision's own IDX readers parse the files; its MNIST class is not used because it
    # insists on the test split too and never reads the .gz files it downloads itself.
    from torchvision.datasets.mnist import read_image_file, read_label_file

    raw = os.path.join(root, _MNIST_DIRS[name], "raw")
    paths = []
    for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        plain, packed = os.path.join(raw, stem), os.path.join(raw, stem + ".gz")
        if not os.path.exists(plain) and os.path.exists(packed):
            plain = _gunzip(packed)
        if not os.path.exists(plain):
            raise DatasetNotFound(
                f"dataset '{name}' not found under {raw} (expected train-images-idx3-ubyte[.gz] "
                f"and train-labels-idx1-ubyte[.gz]); sweeps never downloads data: put the files "
                f"there or point trainer.data_dir at them"
            )
        paths.append(plain)
    images, labels = read_image_file(paths[0]), read_label_file(paths[1])
    x = images.numpy().astype(np.float32)[:, None, :, :] / 255.0
    mean, std = _STATS[name]
    x = (x - mean[0]) / std[0]
    return x.astype(np.float32), labels.numpy().astype(np.int64), os.path.abspath(root)


def _gunzip(packed: str) -> str:
    """Unpack next to the archive (or into a temp cache if that folder is read-only)."""
    import gzip
    import tempfile

    target = packed[:-3]
    try:
        tmp = target + f".{os.getpid()}.part"
        with gzip.open(packed, "rb") as src, open(tmp, "wb") as dst:
            dst.write(src.read())
        os.replace(tmp, target)  # atomic: workers sharing a node may race here
        return target
    except OSError:
        cache = os.path.join(tempfile.gettempdir(), "sweeps-gunzip")
        os.makedirs(cache, exist_ok=True)
        out = os.path.join(cache, hashlib.sha256(packed.encode()).hexdigest()[:16])
        with gzip.open(packed, "rb") as src, open(out, "wb") as dst:
            dst.write(src.read())
        return out


def _cifar10(root: str) -> tuple[np.ndarray, np.ndarray, str]:
    # Read the python pickle batches ourselves: torchvision's CIFAR10 verifies the official
    # md5 sums, which small (or re-packed) batches in the same format cannot pass.
    base = os.path.join(root, _CIFAR_DIR)
    files = [os.path.join(base, f"data_batch_{i}") for i in range(1, 6)]
    present = [f for f in files if os.path.exists(f)]
    if not present:
        raise DatasetNotFound(
            f"dataset 'cifar10' not found under {base} (expected data_batch_1..data_batch_5 "
            f"python pickle batches); sweeps never downloads data: put the files there or point "
            f"trainer.data_dir at them"
        )
    xs, ys = [], []
    for f in present:
        with open(f, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
        xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch[b"labels"], dtype=np.int64))
    x = np.concatenate(xs).astype(np.float32) / 255.0
    mean, std = (np.asarray(v, dtype=np.float32)[None, :, None, None] for v in _STATS["cifar10"])
    return ((x - mean) / std).astype(np.float32), np.concatenate(ys), os.path.abspath(root)


def _local_root(name: str, data_dir: str | None) -> tuple[str, str]:
    if not data_dir:
        raise DatasetNotFound(
            f"dataset '{name}' needs trainer.data_dir (a folder or gs://bucket/prefix); "
            f"sweeps never downloads data"
        )
    if data_dir.startswith("gs://"):
        from trainer.gcs import sync_prefix

        return sync_prefix(data_dir), data_dir
    path = data_dir.removeprefix("file://")
    if not os.path.isdir(path):
        raise DatasetNotFound(f"dataset '{name}': data_dir {path} does not exist")
    return path, os.path.abspath(path)


def input_scaling(name: str) -> dict[str, object]:
    """Pure: how a built-in dataset's pixels are scaled before the model sees them, and the
    value range that gives, per channel: what `sweeps predict` expects its input to be."""
    if name == "digits":
        return {
            "dataset": name,
            "transform": "raw digits pixels (0..16) / 16",
            "range": [0.0, 1.0],
            "shape": [1, 8, 8],
        }
    if name not in _STATS:
        raise ValueError(f"unknown dataset '{name}' (known: {', '.join(DATASETS)})")
    means, stds = _STATS[name]
    ranges = [
        [round((0 - m) / s, 4), round((1 - m) / s, 4)] for m, s in zip(means, stds, strict=True)
    ]
    per_channel = ", ".join(f"({m}, {s})" for m, s in zip(means, stds, strict=True))
    return {
        "dataset": name,
        "transform": f"pixels (0..255) / 255, then (x - mean) / std per channel: {per_channel}",
        "range": ranges[0] if len(ranges) == 1 else ranges,
        "shape": [len(means), 32, 32] if name == "cifar10" else [1, 28, 28],
    }


def _arrays(name: str, data_dir: str | None) -> tuple[np.ndarray, np.ndarray, str]:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset '{name}' (known: {', '.join(DATASETS)})")
    if name == "digits":
        return _digits()
    root, source = _local_root(name, data_dir)
    x, y, _ = _cifar10(root) if name == "cifar10" else _mnist(name, root)
    return x, y, source


def split_indices(
    n: int, seed: int, val_fraction: float, test_fraction: float = 0.0, limit: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pure: (train, validation, test) row indices from one seeded permutation. The test rows
    are its last and depend only on the seed, `limit` and `test_fraction`; validation takes
    `val_fraction` of the rest, first. Without a test fraction the split is what it always was."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g).numpy()
    if limit is not None:
        perm = perm[:limit]
    n_test = int(round(len(perm) * test_fraction)) if test_fraction else 0
    test_idx, rest = perm[len(perm) - n_test :], perm[: len(perm) - n_test]
    n_val = max(1, int(round(len(rest) * val_fraction)))
    return rest[n_val:], rest[:n_val], test_idx


def _digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def data_key(config: dict[str, object]) -> tuple[object, ...]:
    """Pure: what a trial config's data is: load_dataset's arguments, in order."""
    return (
        config.get("dataset", "digits"),
        config.get("data_dir"),
        config.get("val_fraction", 0.2),
        config.get("split_seed", 0),
        config.get("limit"),
        config.get("test_fraction") or 0.0,
    )


def load_dataset(
    name: str,
    data_dir: str | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
    limit: int | None = None,
    test_fraction: float = 0.0,
) -> DatasetBundle:
    """Load a dataset as float32 tensors with a seeded train/validation split (the locked test
    rows, if any, left out)."""
    x, y, source = _arrays(name, data_dir)
    train_idx, val_idx, _ = split_indices(len(x), seed, val_fraction, test_fraction, limit)
    xt, yt = torch.from_numpy(x[train_idx]), torch.from_numpy(y[train_idx])
    xv, yv = torch.from_numpy(x[val_idx]), torch.from_numpy(y[val_idx])
    return DatasetBundle(
        name=name,
        x_train=xt,
        y_train=yt,
        x_val=xv,
        y_val=yv,
        num_classes=10,
        input_shape=tuple(x.shape[1:]),
        source=source,
        digest=_digest(xt, yt, xv, yv),
        split_seed=seed,
        val_fraction=val_fraction,
        digest_train=_digest(xt, yt),
        digest_val=_digest(xv, yv),
    )


def load_test_split(
    name: str,
    data_dir: str | None = None,
    val_fraction: float = 0.2,
    seed: int = 0,
    limit: int | None = None,
    test_fraction: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The locked test split of `load_dataset` with the same arguments: (x, y, its digest)."""
    if not test_fraction:
        raise ValueError("no test split: test_fraction is 0")
    x, y, _ = _arrays(name, data_dir)
    _, _, test_idx = split_indices(len(x), seed, val_fraction, test_fraction, limit)
    xs, ys = torch.from_numpy(x[test_idx]), torch.from_numpy(y[test_idx])
    return xs, ys, _digest(xs, ys)


def augment_cifar(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random crop (32, padding 4) + horizontal flip on a batch, vectorized: one gather, no loop
    over samples."""
    n, c, h, w = x.shape
    pad = 4
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad))
    dev = x.device
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(dev)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(dev)
    flip = (torch.rand(n, generator=generator) < 0.5).to(dev)
    cols = torch.arange(w, device=dev)[None, :] + dx[:, None]  # (n, w)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    rows = torch.arange(h, device=dev)[None, :] + dy[:, None]  # (n, h)
    idx_r = rows[:, None, :, None].expand(n, c, h, w + 2 * pad)
    out = padded.gather(2, idx_r)
    idx_c = cols[:, None, None, :].expand(n, c, h, w)
    return out.gather(3, idx_c)
