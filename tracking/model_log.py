"""A trial's model and datasets into MLflow, from what the worker sent.

The worker (rank 0) builds the MLflow model folder (`trainer/packaging.py`) and ships it as a
tar.gz; here it becomes a LoggedModel of the trial's run without importing torch in the driver:
created, its MLmodel told its id and run, its files uploaded, finalized READY, linked as the
run's output, and given the final metrics with the validation dataset they were measured on.
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
    """The packaged model as a LoggedModel of the run; returns its id."""
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
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step)])
    ds = result.dataset or {}
    now = int(time.time() * 1000)
    kw: dict[str, Any] = {"model_id": model.model_id}
    if ds.get("digest_val"):  # metrics were measured on the validation split
        kw.update(dataset_name=f"{ds.get('name')}-validation", dataset_digest=ds["digest_val"])
    items = [Metric(k, float(v), now, step, **kw) for k, v in metrics.items()]
    if items:
        client.log_batch(run_id, metrics=items)
    return model.model_id


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
