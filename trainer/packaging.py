"""Trained models as MLflow model folders, built on the worker (rank 0) and shipped as a tar.gz,
so the driver logs them without importing torch.

- Built-in models: a pyfunc model from code (`trainer/mlflow_model.py`) that rebuilds the network
  from its build config and loads `weights.pt` with `weights_only=True`: loading it never
  unpickles code. The folder's fixed part (MLmodel, code, environment, signature) is written
  once per lane and input shape; a trial adds only its weights and build config.
- A user's `nn.Module`: `torch.export` (MLflow's `pt2`) when the trial returns an input example;
  otherwise pickle, only if the sweep allows it (`tracking.pickle_models`), and the format is
  recorded with the model so a registry user can see what loading it will run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import tarfile
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import numpy as np

from sweeps.common.errors import one_line
from trainer.errors import ModelNotPackaged

_TEMPLATES: dict[tuple[Any, ...], str] = {}
HERE = os.path.dirname(os.path.abspath(__file__))


def requirements() -> list[str]:
    return [f"{p}=={version(p)}" for p in ("torch", "mlflow", "numpy")]


def _signature(example: np.ndarray, num_classes: int) -> Any:
    from mlflow.models import infer_signature

    return infer_signature(example, np.zeros((len(example), num_classes), dtype=np.float32))


def _key(input_shape: tuple[int, ...], num_classes: int, meta: dict) -> tuple[Any, ...]:
    return (tuple(input_shape), num_classes, json.dumps(meta, sort_keys=True))


def _template(
    input_shape: tuple[int, ...], num_classes: int, example: np.ndarray, meta: dict
) -> str:
    """The pyfunc folder without a trial's weights, written once per process and shape."""
    key = _key(input_shape, num_classes, meta)
    if key in _TEMPLATES and os.path.isdir(_TEMPLATES[key]):
        return _TEMPLATES[key]
    path = _write_template(
        tempfile.mkdtemp(prefix="sweeps-model-template-"), num_classes, example, meta
    )
    _TEMPLATES[key] = path
    return path


def template_in_child(
    input_shape: tuple[int, ...], num_classes: int, example: np.ndarray, meta: dict
) -> Callable[[], None]:
    """Start writing the template in a forked child; returns `join`, which waits for it and
    makes it this process's template (if the child failed, `_template` writes it here later).

    Writing it is ~1.2 s of a lane worker's start (MLflow's import and save_model), all of it
    on the way to the lane's first trial, while the worker's other warm-up (model, optimizer:
    ~1.2 s) leaves a second core idle. A fork keeps torch and numpy already imported, as a
    DataLoader worker does; the child touches no device and no Ray, and ends with os._exit.
    """
    key = _key(input_shape, num_classes, meta)
    if key in _TEMPLATES or not hasattr(os, "fork"):
        return lambda: None
    work = tempfile.mkdtemp(prefix="sweeps-model-template-")
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            _write_template(work, num_classes, example, meta)
            code = 0
        finally:
            os._exit(code)

    def join(timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) == 0:
                    _TEMPLATES[key] = _folder(work)
                return
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)  # stuck: this process writes it instead
        os.waitpid(pid, 0)

    return join


def _folder(work: str) -> str:
    return os.path.join(work, "model")


def _write_template(work: str, num_classes: int, example: np.ndarray, meta: dict) -> str:
    import mlflow

    weights, arch = os.path.join(work, "weights.pt"), os.path.join(work, "arch.json")
    open(weights, "wb").close()
    with open(arch, "w") as f:
        json.dump({}, f)
    path = _folder(work)
    mlflow.pyfunc.save_model(
        path,
        python_model=os.path.join(HERE, "mlflow_model.py"),
        artifacts={"weights": weights, "arch": arch},
        code_paths=[HERE],
        pip_requirements=requirements(),
        signature=_signature(example, num_classes),
        input_example=example,
        metadata=meta,
    )
    return path


def _tar(folder: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        tar.add(folder, arcname="model")
    return buf.getvalue()


def package_builtin(model: Any, info: dict[str, Any], example: np.ndarray, meta: dict) -> bytes:
    """A built-in network (weights + build config) as a pyfunc model folder, tar.gz'd."""
    import torch

    template = _template(tuple(info["input_shape"]), info["num_classes"], example, meta)
    work = tempfile.mkdtemp(prefix="sweeps-model-")
    try:
        folder = os.path.join(work, "model")
        shutil.copytree(template, folder, ignore=shutil.ignore_patterns("__pycache__"))
        state = {
            k: v.detach().cpu() for k, v in getattr(model, "module", model).state_dict().items()
        }
        torch.save(state, os.path.join(folder, "artifacts", "weights.pt"))
        with open(os.path.join(folder, "artifacts", "arch.json"), "w") as f:
            json.dump(info, f)
        return _tar(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def package_module(model: Any, example: Any, allow_pickle: bool) -> tuple[bytes, str]:
    """A user's nn.Module: (tar.gz of the model folder, "pt2" or "pickle")."""
    import mlflow
    import torch

    model = getattr(model, "module", model).to("cpu").eval()  # unwrap DDP
    work = tempfile.mkdtemp(prefix="sweeps-model-")
    try:
        folder = os.path.join(work, "model")
        errors = []
        if example is not None:
            x = np.asarray(example)
            try:
                with torch.no_grad():
                    out = model(torch.as_tensor(x)).numpy()
                from mlflow.models import infer_signature

                mlflow.pytorch.save_model(
                    model,
                    folder,
                    serialization_format="pt2",
                    input_example=x,
                    signature=infer_signature(x, out),
                    pip_requirements=requirements(),
                )
                return _tar(folder), "pt2"
            except Exception as e:  # not exportable: say why if pickle is not allowed either
                errors.append(f"torch.export failed: {one_line(e, 300)}")
                shutil.rmtree(folder, ignore_errors=True)
        else:
            errors.append("no input_example returned, so torch.export cannot trace it")
        if not allow_pickle:
            raise ModelNotPackaged(
                "model not logged: "
                + "; ".join(errors)
                + "; set tracking.pickle_models: true to keep it by pickle (loading it then runs"
                " pickled code)"
            )
        mlflow.pytorch.save_model(
            model, folder, serialization_format="pickle", pip_requirements=requirements()
        )
        return _tar(folder), "pickle"
    finally:
        shutil.rmtree(work, ignore_errors=True)
