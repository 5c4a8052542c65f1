"""What `promote` checks beyond the registry itself: the significance gate's samples, and the
locked test split, scored once when a trial is registered.

The gate's statistics are pure (`tracking/significance.py`); here they get their samples: the
challenger's replicate values from its trial's run, the holder's from its version (or its run).
The test split is the spec's `data:` (`sweeps/spec/data.py`): the built-in data's locked rows,
or the .npz file a BYO / program-mode sweep names. A test split that cannot be scored leaves a
one-line note on the version and in promote's output, never a silent gap.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from sweeps.common import names
from sweeps.common.errors import one_line
from tracking import significance
from tracking.significance import Verdict


def _holder_samples(client: Any, model: str, holder_version: str) -> list[float] | None:
    """The holder's replicate values: as its version recorded them, else from its trial's run."""
    try:
        mv = client.get_model_version(model, holder_version)
    except Exception:
        return None
    found = significance.parse_samples(mv.tags.get(names.SAMPLES))
    if found is None and mv.run_id:
        try:
            found = significance.replicate_values(client.get_run(mv.run_id))
        except Exception:
            return None
    return found


@dataclass(frozen=True)
class GateAsk:
    """What `promote --if-better` asks of the gate."""

    compare: bool  # there is a holder validated on the same data, and --if-better
    replicated_metric: bool  # the metric compared is the objective, which replicates measure
    alpha: float
    min_effect: float
    direction: str


def judge(
    client: Any,
    run: Any,
    model: str,
    holder: tuple[str | None, float | None],
    value: float,
    ask: GateAsk,
) -> tuple[Verdict | None, dict[str, str]]:
    """The gate's verdict (None when there is nothing to compare) and the version's gate tags:
    its own samples always, the test, p-value and holder's samples when it was compared."""
    mine = significance.replicate_values(run) if ask.replicated_metric else None
    tags = {names.SAMPLES: json.dumps(mine)} if mine is not None else {}
    holder_version, holder_value = holder
    if not ask.compare or holder_version is None or holder_value is None:
        return None, tags
    theirs = _holder_samples(client, model, holder_version) if ask.replicated_metric else None
    verdict = significance.gate(
        value,
        holder_value,
        ask.direction,
        (mine, theirs),
        alpha=ask.alpha,
        min_effect=ask.min_effect,
    )
    return verdict, {**tags, **significance.version_tags(verdict, mine, theirs)}


def _spec_of(study: Any) -> dict[str, Any]:
    """The sweep's spec as the study stored it (YAML, secrets redacted)."""
    import yaml

    try:
        found = yaml.safe_load(study.user_attrs.get(names.SPEC) or "{}")
    except yaml.YAMLError:
        return {}
    return found if isinstance(found, dict) else {}


def _builtin_test(spec: dict[str, Any], params: dict[str, Any]) -> tuple[Any, Any, str, str]:
    """The built-in data's locked test rows for this trial's data settings: x, y, digest, where."""
    from trainer.data import data_key, load_test_split

    tr = spec.get("trainer") or {}
    config = {**tr, **(tr.get("params") or {}), **params}
    config["test_fraction"] = spec["data"]["test_fraction"]
    key = data_key(config)
    x, y, digest = load_test_split(*key)  # type: ignore[arg-type]
    where = f"{key[0]}, split seed {key[3]}, test_fraction {key[5]:g}"
    return x.numpy(), y.numpy(), digest, where


def _file_test(path: str) -> tuple[Any, Any, str, str]:
    """A BYO / program-mode test set: a .npz with arrays x and y; its digest is of both."""
    import numpy as np

    if not os.path.exists(path):
        raise ValueError(f"data.test_path: file not found: {path}")
    with np.load(path) as npz:
        if "x" not in npz or "y" not in npz:
            raise ValueError(f"data.test_path: {path} must hold arrays 'x' and 'y'")
        x, y = npz["x"], npz["y"]
    h = hashlib.sha256(np.ascontiguousarray(x).tobytes())
    h.update(np.ascontiguousarray(y).tobytes())
    return x, y, h.hexdigest()[:16], os.path.abspath(path)


def scores(pred: Any, y: Any) -> dict[str, float]:
    """Pure: scores of predictions against the test labels. Class scores (N, C) against integer
    labels: accuracy and cross-entropy (of the softmax); one value per row: accuracy when both
    are whole numbers, else mean squared and absolute error."""
    import numpy as np

    pred, y = np.asarray(pred, dtype=np.float64), np.asarray(y)
    if pred.ndim == 2 and pred.shape[1] > 1 and np.issubdtype(y.dtype, np.integer):
        z = pred - pred.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return {
            "test_accuracy": float((pred.argmax(axis=1) == y).mean()),
            "test_loss": float(-logp[np.arange(len(y)), y].mean()),
        }
    pred = pred.reshape(len(y))
    if np.issubdtype(y.dtype, np.integer) and np.allclose(pred, np.round(pred)):
        return {"test_accuracy": float((np.round(pred) == y).mean())}
    err = pred - y.astype(np.float64)
    return {"test_mse": float((err**2).mean()), "test_mae": float(np.abs(err).mean())}


def score_test(
    client: Any, study: Any, t: Any, model: str, version: Any, files: Any, tracking_uri: str
) -> dict[str, Any] | None:
    """Score the newly registered version on the spec's locked test split, once; its metrics
    and the split's digest go on the version. None when the spec has no test split."""
    data = _spec_of(study).get("data") or {}
    if not data.get("test_fraction") and not data.get("test_path"):
        return None
    try:
        if files:
            raise ValueError(
                "the version holds a program's files, not an MLflow model sweeps can load"
            )
        spec = _spec_of(study)
        x, y, digest, where = (
            _builtin_test(spec, t.params)
            if data.get("test_fraction")
            else _file_test(data["test_path"])
        )
        pred = _predict(f"models:/{model}/{version}", x, tracking_uri)
        metrics = {**scores(pred, y), "test_rows": float(len(y))}
    except Exception as e:
        note = f"test split not scored: {one_line(e, 240)}"
        client.set_model_version_tag(model, version, names.TEST_NOTE, note)
        return {"note": note}
    client.set_model_version_tag(model, version, names.TEST_METRICS, json.dumps(metrics))
    client.set_model_version_tag(model, version, names.TEST_DIGEST, digest)
    return {"metrics": metrics, "digest": digest, "source": where}


def _predict(uri: str, x: Any, tracking_uri: str) -> Any:
    """The model's predictions through mlflow.pyfunc, the input shaped as its signature says."""
    import mlflow
    import numpy as np

    from tracking.mlflow_compat import scoped_tracking_uri

    with scoped_tracking_uri(tracking_uri):
        loaded = mlflow.pyfunc.load_model(uri)
    schema = loaded.metadata.get_input_schema()
    if schema is not None and schema.is_tensor_spec():
        spec = schema.inputs[0]
        shape = tuple(len(x) if d == -1 else d for d in spec.shape)
        x = np.asarray(x).reshape(shape).astype(spec.type)
    return np.asarray(loaded.predict(x))
