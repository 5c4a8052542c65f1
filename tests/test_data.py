"""Datasets in their real on-disk formats, from a folder and from a GCS emulator bucket."""

from __future__ import annotations

import gzip
import os
import pickle
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT

from trainer.data import DatasetNotFound, augment_cifar, load_dataset


def write_idx(root: Path, folder: str, n: int = 60, gz: bool = False, seed: int = 0) -> None:
    """MNIST IDX files: magic 2051 (images) / 2049 (labels), big-endian sizes, then bytes."""
    rng = np.random.default_rng(seed)
    raw = root / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    imgs = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = np.arange(n, dtype=np.uint8) % 10
    files = {
        "train-images-idx3-ubyte": struct.pack(">IIII", 2051, n, 28, 28) + imgs.tobytes(),
        "train-labels-idx1-ubyte": struct.pack(">II", 2049, n) + labels.tobytes(),
    }
    for name, data in files.items():
        if gz:
            (raw / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (raw / name).write_bytes(data)


def write_cifar(root: Path, per_batch: int = 12) -> None:
    """CIFAR-10 python batches: pickled dicts with b'data' (N, 3072) uint8 and b'labels'."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(1, 6):
        batch = {
            b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            b"labels": [int(x) for x in rng.integers(0, 10, per_batch)],
            b"batch_label": f"training batch {i} of 5".encode(),
        }
        with open(base / f"data_batch_{i}", "wb") as f:
            pickle.dump(batch, f)
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, f)


def _one_epoch(ds) -> float:
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(int(np.prod(ds.input_shape)), 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = torch.nn.functional.cross_entropy(model(ds.x_train), ds.y_train)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def test_digits_is_bundled_and_split_by_seed():
    a = load_dataset("digits", seed=0)
    b = load_dataset("digits", seed=0)
    c = load_dataset("digits", seed=1)
    assert a.x_train.shape[1:] == (1, 8, 8) and len(a.x_train) + len(a.x_val) == 1797
    assert a.digest == b.digest and a.digest != c.digest
    assert torch.equal(a.x_val, b.x_val)


def test_digits_read_without_sklearn_are_sklearns_digits(monkeypatch):
    from sklearn.datasets import load_digits

    from trainer import data

    fast = data._digits()
    monkeypatch.setattr(data, "_bundled_digits", lambda: None)  # the fallback: sklearn's loader
    slow = data._digits()
    assert fast[0].dtype == slow[0].dtype and np.array_equal(fast[0], slow[0])
    assert np.array_equal(fast[1], slow[1]) and np.array_equal(fast[1], load_digits().target)
    # ...and a worker that loads them never imports scikit-learn (~0.8 s of its start)
    code = (
        "import sys; from trainer.data import load_dataset; load_dataset('digits'); "
        "print('sklearn' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "False"


def test_mnist_and_fashion_in_idx_format(tmp_path):
    write_idx(tmp_path, "MNIST", n=60)
    write_idx(tmp_path, "FashionMNIST", n=40, gz=True, seed=3)
    m = load_dataset("mnist", data_dir=str(tmp_path), val_fraction=0.25, seed=0)
    assert m.x_train.shape == (45, 1, 28, 28) and m.x_val.shape == (15, 1, 28, 28)
    assert m.y_train.dtype == torch.int64
    f = load_dataset("fashion_mnist", data_dir=str(tmp_path), val_fraction=0.25)
    assert len(f.x_train) + len(f.x_val) == 40
    # disjoint split that covers every row: train/val rows never coincide
    rows = {tuple(x.flatten()[:50].tolist()) for x in m.x_train}
    assert not any(tuple(x.flatten()[:50].tolist()) in rows for x in m.x_val)
    assert np.isfinite(_one_epoch(m))


def test_cifar10_in_python_pickle_format(tmp_path):
    write_cifar(tmp_path)
    c = load_dataset("cifar10", data_dir=str(tmp_path), val_fraction=0.2)
    assert c.x_train.shape == (48, 3, 32, 32) and c.input_shape == (3, 32, 32)
    assert abs(c.x_train.mean().item()) < 1.0  # normalized
    assert np.isfinite(_one_epoch(c))


def test_missing_dataset_says_where_and_what(tmp_path):
    with pytest.raises(DatasetNotFound) as e:
        load_dataset("mnist", data_dir=str(tmp_path))
    msg = str(e.value)
    assert str(tmp_path / "MNIST" / "raw") in msg and "train-images-idx3-ubyte" in msg
    assert "never downloads" in msg
    with pytest.raises(DatasetNotFound, match="data_batch_1"):
        load_dataset("cifar10", data_dir=str(tmp_path))
    with pytest.raises(DatasetNotFound, match="needs trainer.data_dir"):
        load_dataset("mnist")


def test_augment_cifar_crops_and_flips_vectorized():
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).reshape(2, 3, 32, 32).repeat(8, 1, 1, 1)
    g1 = torch.Generator().manual_seed(5)
    g2 = torch.Generator().manual_seed(5)
    a, b = augment_cifar(x, g1), augment_cifar(x, g2)
    assert a.shape == x.shape and torch.equal(a, b)
    assert not torch.equal(a, x)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs():
    port = _free_port()
    exe = Path(sys.executable).parent / "gcp-storage-emulator"
    proc = subprocess.Popen(
        [str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.time() + 30
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


def test_mnist_and_cifar_from_a_gcs_bucket(gcs, tmp_path, monkeypatch):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs)
    monkeypatch.setenv("SWEEPS_DATA_CACHE", str(tmp_path / "cache"))
    client = storage.Client(project="test", credentials=AnonymousCredentials())
    bucket = client.create_bucket("sweeps-data")
    src = tmp_path / "src"
    write_idx(src, "MNIST", n=50, gz=True)
    write_cifar(src, per_batch=4)
    for f in src.rglob("*"):
        if f.is_file():
            bucket.blob(f"datasets/{f.relative_to(src)}").upload_from_filename(str(f))
    m = load_dataset("mnist", data_dir="gs://sweeps-data/datasets", val_fraction=0.2)
    assert len(m.x_train) == 40 and m.source == "gs://sweeps-data/datasets"
    local = tmp_path / "cache" / "sweeps-data" / "datasets" / "MNIST" / "raw"
    stamp = {p.name: p.stat().st_mtime_ns for p in local.iterdir()}
    again = load_dataset("mnist", data_dir="gs://sweeps-data/datasets", val_fraction=0.2)
    assert again.digest == m.digest
    assert {p.name: p.stat().st_mtime_ns for p in local.iterdir()} == stamp, "not re-downloaded"
    c = load_dataset("cifar10", data_dir="gs://sweeps-data/datasets")
    assert c.x_train.shape[1:] == (3, 32, 32)
    assert np.isfinite(_one_epoch(c))
    assert os.path.exists(tmp_path / "cache" / "sweeps-data" / "datasets" / ".sweeps-manifest.json")
