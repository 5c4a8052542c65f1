"""A trial's model and datasets into MLflow, from what the worker sent.

The worker (rank 0) builds the MLflow model folder (`trainer/packaging.py`) and ships it as a
tar.gz; here it becomes a LoggedModel of the trial's run without importing torch in the driver:
created, its MLmodel told its id and run, its files uploaded, finalized READY, linked as the
run's output, and given the final metrics with the validation dataset they were measured on.

A best-epoch model (`tracking.model: best`) is linked as mlflow.pytorch.log_model(step=S) links
one: as the run's output at step S, with the run's metrics at step S (their own keys and
timestamps, so the run's curves gain no second point) logged against its model id.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
from typing import Any

import yaml

from sweeps.common import names
from sweeps.contracts.protocol import TrialResult

# How models are saved, as a tag on the LoggedModel and on registered versions.
FORMAT_TAG = names.MODEL_FORMAT


def log_package(
    client: Any,
    run_id: str,
    experiment_id: str,
    result: TrialResult,
    metrics: dict[str, float],
    step: int,
) -> str:
    """The packaged model as a LoggedModel of the run; returns its id. `metrics` at `step`
    describe the last weights; a result whose model is an earlier step's says so."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus, Metric

    tags = {FORMAT_TAG: result.model_format}
    model = client.create_logged_model(experiment_id, name="model", source_run_id=run_id, tags=tags)
    with tempfile.TemporaryDirectory(prefix="sweeps-logmodel-") as work:
        with tarfile.open(fileobj=io.BytesIO(result.model_package or b""), mode="r:gz") as tar:
            tar.extractall(work, filter="data")
        folder = os.path.join(work, "model")
        mlmodel = os.path.join(folder, "MLmodel")
        with open(mlmodel) as f:
            meta = yaml.safe_load(f)
        meta.update(
            model_id=model.model_id,
            run_id=run_id,
            artifact_path=model.artifact_location,
            model_uuid=model.model_id,
        )
        with open(mlmodel, "w") as f:
            yaml.safe_dump(meta, f, sort_keys=False)
        client.log_model_artifacts(model.model_id, folder)
    client.finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    if result.model_step is not None:  # the best epoch's weights (tracking.model: best)
        step = result.model_step
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step)])
    ds = result.dataset or {}
    now = int(time.time() * 1000)
    kw: dict[str, Any] = {"model_id": model.model_id}
    if ds.get("digest_val"):  # metrics were measured on the validation split
        kw.update(dataset_name=f"{ds.get('name')}-validation", dataset_digest=ds["digest_val"])
    if result.model_step is not None:
        items = _metrics_at(client, run_id, step, result.model_metrics, now, kw)
    else:
        items = [Metric(k, float(v), now, step, **kw) for k, v in metrics.items()]
    if items:
        client.log_batch(run_id, metrics=items)
    return model.model_id


def _metrics_at(
    client: Any, run_id: str, step: int, reported: dict[str, float], now: int, kw: dict[str, Any]
) -> list[Any]:
    """The run's points at `step` of each metric the trial reported there, as metrics of the
    model (`kw`: its id, dataset): what mlflow's log_model(step=) links. A point not found in
    the run is the value the worker reported, stamped now."""
    from mlflow.entities import Metric

    items = []
    for key, value in reported.items():
        points = [m for m in client.get_metric_history(run_id, key) if m.step == step]
        ts, v = (points[-1].timestamp, points[-1].value) if points else (now, float(value))
        items.append(Metric(key, v, ts, step, **kw))
    return items


def model_value(logged: Any, metric: str) -> float | None:
    """A LoggedModel's own value of `metric` (a best-epoch model's is that epoch's), or None."""
    found = {m.key: m.value for m in (getattr(logged, "metrics", None) or [])}
    for key in (metric, f"final_{metric}"):
        if key in found:
            return float(found[key])
    return None


def log_dataset(client: Any, run_id: str, ds: dict[str, Any]) -> None:
    """The training and validation splits as MLflow dataset inputs of the run."""
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag

    src = str(ds.get("source", ""))
    kind = "gs" if src.startswith("gs://") else "code" if src.startswith("sklearn:") else "local"
    inputs = []
    splits = (
        ("training", ds.get("rows_train"), ds.get("digest_train")),
        ("validation", ds.get("rows_val"), ds.get("digest_val")),
    )
    for context, rows, digest in splits:
        source = {
            "uri": src,
            "split_seed": ds.get("split_seed"),
            "val_fraction": ds.get("val_fraction"),
        }
        d = Dataset(
            name=f"{ds.get('name')}-{context}",
            digest=str(digest or ds.get("digest"))[:36],
            source_type=kind,
            source=json.dumps(source),
            profile=json.dumps({"num_rows": rows}),
        )
        inputs.append(DatasetInput(d, tags=[InputTag("mlflow.data.context", context)]))
    client.log_inputs(run_id, datasets=inputs)


OUTPUTS = "outputs"  # where a program-mode trial's files go in its run


def log_outputs(client: Any, run_id: str, archive: bytes) -> None:
    """What a program-mode trial wrote to its trial dir (rank 0's), as the run's `outputs/`."""
    with tempfile.TemporaryDirectory(prefix="sweeps-outputs-") as work:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tar.extractall(work, filter="data")
        client.log_artifacts(run_id, work, OUTPUTS)  # paths inside are the trial dir's


def has_outputs(client: Any, run_id: str) -> bool:
    try:
        return bool(client.list_artifacts(run_id, OUTPUTS))
    except Exception:
        return False


def input_scaling_of(run: Any) -> dict[str, Any] | None:
    """Built-in dataset of a trial (its logged validation dataset), and how its pixels were
    scaled; None for user code, whose scaling we cannot know."""
    from trainer.data import DATASETS, input_scaling

    for inp in run.inputs.dataset_inputs if run.inputs else []:
        name = inp.dataset.name.rsplit("-", 1)[0]
        if name in DATASETS:
            return input_scaling(name)
    return None


def logged_model_of(client: Any, run: Any) -> Any:
    """MLflow 3 keeps models as LoggedModels linked to their source run: the newest one."""
    try:
        found = client.search_logged_models(
            experiment_ids=[run.info.experiment_id],
            filter_string=f"source_run_id = '{run.info.run_id}'",
        )
    except Exception:
        return None
    found = sorted(found, key=lambda m: m.creation_timestamp or 0)
    return found[-1] if found else None
