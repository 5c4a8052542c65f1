"""Predictions from a registered model through mlflow.pyfunc, with the input scaling it expects.

A model trained on a built-in dataset saw pixels scaled one way (digits: raw / 16; MNIST and
CIFAR-10: / 255 then standardized). Its model version says so in `sweeps.input_scaling`;
`predict` repeats it and warns when the input holds values outside the range that scaling gives,
the usual sign of raw pixels fed to a model that expects scaled ones.
"""

from __future__ import annotations

from typing import Any

from sweeps.common import names
from sweeps.common.errors import NotFoundError, SpecError, one_line


def model_version_ref(ref: str) -> tuple[str, str | None, str | None] | None:
    """Pure: (name, alias, version) of a registry reference (`NAME@alias`, `NAME/3`, with or
    without `models:/`); None for run or logged-model URIs."""
    if ref.startswith("runs:/"):
        return None
    body = ref.removeprefix("models:/")
    if body.startswith("m-") and "@" not in body and "/" not in body:
        return None  # a LoggedModel id
    if "@" in body:
        name, _, alias = body.rpartition("@")
        return name, alias, None
    name, _, version = body.rpartition("/")
    return (name, None, version) if name and version.isdigit() else None


def _bounds(scaling: dict[str, Any]) -> list[tuple[float, float]]:
    ranges = scaling["range"]
    if ranges and isinstance(ranges[0], list):
        return [(float(lo), float(hi)) for lo, hi in ranges]
    return [(float(ranges[0]), float(ranges[1]))]


def describe_scaling(scaling: dict[str, Any]) -> str:
    """Pure: one line saying how inputs must be scaled."""
    bounds = _bounds(scaling)
    lo, hi = min(b[0] for b in bounds), max(b[1] for b in bounds)
    return (
        f"input scaling ({scaling['dataset']}): {scaling['transform']}; values in [{lo:g}, {hi:g}]"
    )


def check_input_range(x: Any, scaling: dict[str, Any]) -> str | None:
    """Pure: a warning when input values fall outside the range the model's training inputs had
    (per channel when the input has the model's channels), else None."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    bounds = _bounds(scaling)
    if len(bounds) > 1 and x.ndim == 4 and x.shape[1] == len(bounds):
        parts = [(x[:, c], lo, hi) for c, (lo, hi) in enumerate(bounds)]
    else:
        parts = [(x, min(b[0] for b in bounds), max(b[1] for b in bounds))]
    outside = 0
    for values, lo, hi in parts:
        tol = 1e-3 * (hi - lo)  # the recorded bounds are rounded
        outside += int(np.count_nonzero((values < lo - tol) | (values > hi + tol)))
    if not outside:
        return None
    lo = min(b[0] for b in bounds)
    hi = max(b[1] for b in bounds)
    return (
        f"{outside} of {x.size} input values are outside [{lo:g}, {hi:g}], the range of the "
        f"{scaling['dataset']} inputs this model was trained on ({scaling['transform']}); "
        "scale the input the same way"
    )


def shape_text(shape: tuple[int, ...]) -> str:
    """Pure: a signature's shape as a person reads it: (-1, 1, 8, 8) -> (N, 1, 8, 8)."""
    return "(" + ", ".join("N" if d == -1 else str(d) for d in shape) + ")"


def fit_shape(shape: tuple[int, ...], expected: tuple[int, ...]) -> tuple[int, ...] | str:
    """Pure: the shape an input of `shape` takes for a model whose signature expects `expected`
    (-1: any): a CSV row per image becomes the image; else why it does not fit, naming the
    expected shape (never the values)."""
    per_row = 1
    for d in expected[1:]:
        per_row *= d if d > 0 else 0
    if len(shape) == 2 and len(expected) > 2 and per_row and shape[1] == per_row:
        shape = (shape[0], *expected[1:])
    fits = len(shape) == len(expected) and all(
        e in (-1, s) for s, e in zip(shape, expected, strict=True)
    )
    if fits:
        return shape
    rows = f"; or one row of {per_row} values per sample" if len(expected) > 2 and per_row else ""
    return (
        f"INPUT: an array of shape {tuple(shape)}; the model's signature expects "
        f"{shape_text(expected)}, N samples{rows}"
    )


def _version_of(ref: str, tracking_uri: str) -> Any:
    """The registered model version a reference names, or None (not a registry reference)."""
    from tracking.registry import _client

    parsed = model_version_ref(ref)
    if parsed is None:
        return None
    name, alias, version = parsed
    client = _client(tracking_uri)
    try:
        if alias:
            return client.get_model_version_by_alias(name, alias)
        return client.get_model_version(name, version)
    except Exception:
        return None  # pyfunc's load below says what is wrong with the reference


def _scaling_of(mv: Any) -> dict[str, Any] | None:
    import json

    text = mv.tags.get(names.INPUT_SCALING) if mv is not None else None
    return json.loads(text) if text else None


def predict(
    ref: str,
    input_path: str,
    out_path: str | None,
    *,
    tracking_uri: str,
    notes: list[str] | None = None,
) -> Any:
    """Load `MODEL@alias`, `MODEL/version` or `models:/…` through pyfunc and predict a .npy/.csv.

    `notes` (if given) receives the model's input scaling ("input scaling: ...", or that it was
    not recorded) and, prefixed "warning: ", a note on input values outside its range."""
    import mlflow
    import numpy as np

    uri = ref if ref.startswith(("models:/", "runs:/")) else f"models:/{ref}"
    if input_path.endswith(".npy"):
        x = np.load(input_path)
    elif input_path.endswith(".csv"):
        x = np.loadtxt(input_path, delimiter=",", ndmin=2, dtype=np.float32)
    else:
        raise SpecError(f"INPUT: expected a .npy or .csv file, got {input_path}")
    from tracking.mlflow_compat import scoped_tracking_uri
    from tracking.model_log import FORMAT_TAG

    mv = _version_of(ref, tracking_uri)
    if mv is not None and mv.tags.get(FORMAT_TAG) == "files":
        raise NotFoundError(
            f"{ref} holds the files a program-mode trial wrote, not an MLflow model: nothing "
            f"loadable to predict with (download them: mlflow artifacts download -u {uri})"
        )
    try:
        with scoped_tracking_uri(tracking_uri):
            model = mlflow.pyfunc.load_model(uri)
    except Exception as e:
        raise NotFoundError(f"cannot load {uri}: {one_line(e, 200)}") from None
    schema = model.metadata.get_input_schema()
    if schema is not None and schema.is_tensor_spec():
        fit = fit_shape(tuple(x.shape), tuple(schema.inputs[0].shape))
        if isinstance(fit, str):
            raise SpecError(fit)
        x = x.reshape(fit).astype(schema.inputs[0].type)
    scaling = _scaling_of(mv)
    if notes is not None:
        if scaling is None:
            notes.append("input scaling: not recorded for this model (user code or older version)")
        else:
            notes.append(describe_scaling(scaling))
            warning = check_input_range(x, scaling)
            if warning:
                notes.append(f"warning: {warning}")
    try:
        y = np.asarray(model.predict(x))
    except Exception as e:  # MLflow's schema errors quote the whole input: say its shape
        why = one_line(e, 300) if len(str(e)) <= 300 else type(e).__name__
        raise SpecError(f"INPUT: the model rejected an array of shape {x.shape}: {why}") from None
    if out_path:
        if out_path.endswith(".npy"):
            np.save(out_path, y)
        else:
            np.savetxt(out_path, y.reshape(len(y), -1), delimiter=",")
    return y
