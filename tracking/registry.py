"""Promote a sweep's best model to the MLflow Model Registry, behind a champion/challenger gate.

Aliases, not the deprecated stages. Every promotion registers a new version with alias
`challenger`; the target alias (`champion`) moves only when asked to, or with `if_better` only
when the challenger beats the holder on the same metric, direction and validation dataset
digest. The alias history lives in a registered-model tag so `rollback` can undo a move.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from sweeps.errors import NotFoundError, ServiceError, SpecError

HISTORY_TAG = "sweeps.alias_history.{alias}"


@dataclass
class Promotion:
    model: str
    version: str
    alias: str
    moved: bool
    reason: str
    sweep: str
    trial: int
    metric: str
    direction: str
    value: float
    previous_version: str | None
    previous_value: float | None
    dataset_digest: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(
    challenger: float, holder: float | None, direction: str, same_data: bool, if_better: bool
) -> tuple[bool, str]:
    """Pure: should the alias move? Returns (move, reason)."""
    if holder is None:
        return True, "no current holder"
    if not if_better:
        return True, "moved without comparison (no --if-better)"
    if not same_data:
        return False, "kept: the holder was validated on a different dataset (digest differs)"
    better = challenger > holder if direction == "maximize" else challenger < holder
    if better:
        return True, f"challenger {challenger:.6g} beats holder {holder:.6g} ({direction})"
    return (
        False,
        f"kept: challenger {challenger:.6g} does not beat holder {holder:.6g} ({direction})",
    )


def _client(tracking_uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    from tracking.mlflow_tracker import check_reachable

    check_reachable(tracking_uri)
    return MlflowClient(tracking_uri, registry_uri=tracking_uri)


def _pick_trial(study: Any, trial: int | None, select: str | None) -> Any:
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if not done:
        raise NotFoundError(f"sweep '{study.study_name}' has no completed trial to promote")
    if trial is not None:
        match = [t for t in done if t.number == trial]
        if not match:
            raise NotFoundError(f"sweep '{study.study_name}' has no completed trial {trial}")
        return match[0]
    if select:
        from sweeps.select import select_trial

        return select_trial(study, done, select)
    if len(study.directions) > 1:
        raise SpecError(
            "multi-objective sweep: choose with --select (e.g. 'val_accuracy max; "
            "cost_usd <= 0.05') or --trial N"
        )
    return study.best_trial


def _metric_value(run: Any, metric: str) -> float | None:
    m = run.data.metrics
    for key in (metric, f"final_{metric}"):
        if key in m:
            return float(m[key])
    if metric == run.data.tags.get("sweeps.objective_metric") and "objective" in m:
        return float(m["objective"])
    return None


def promote(
    sweep: str,
    model: str,
    *,
    storage_url: str,
    tracking_uri: str,
    alias: str = "champion",
    if_better: bool = False,
    metric: str | None = None,
    trial: int | None = None,
    select: str | None = None,
) -> Promotion:
    from sweeps.study import load_study

    study = load_study(sweep, storage_url)
    t = _pick_trial(study, trial, select)
    metric = metric or study.user_attrs.get("sweeps.objective") or "objective"
    direction = study.directions[0].name.lower() if len(study.directions) == 1 else "maximize"
    run_id = t.user_attrs.get("mlflow_run_id")
    if not run_id:
        raise NotFoundError(f"trial {t.number} of '{sweep}' has no MLflow run")
    client = _client(tracking_uri)
    try:
        run = client.get_run(run_id)
    except Exception as e:
        raise ServiceError(f"cannot read run {run_id}: {' '.join(str(e).split())[:200]}") from None
    value = _metric_value(run, metric)
    if value is None:
        have = ", ".join(sorted(k for k in run.data.metrics if not k.startswith("final_")))
        raise SpecError(f"--metric: '{metric}' was not recorded for trial {t.number} ({have})")
    digest = run.data.tags.get("sweeps.dataset_digest")
    logged = _logged_model(client, run)
    if run.data.tags.get("sweeps.model_error") or logged is None:
        raise NotFoundError(f"trial {t.number} of '{sweep}' has no logged model")

    holder_version, holder_value, holder_digest = None, None, None
    try:
        mv = client.get_model_version_by_alias(model, alias)
        holder_version = str(mv.version)
        holder_value = (
            float(mv.tags["sweeps.metric_value"]) if "sweeps.metric_value" in mv.tags else None
        )
        holder_digest = mv.tags.get("sweeps.dataset_digest")
        if mv.tags.get("sweeps.metric") not in (None, metric):
            holder_value = None if not if_better else holder_value
    except Exception:
        pass  # no registered model or no holder yet
    move, reason = decide(value, holder_value, direction, holder_digest == digest, if_better)
    if holder_version is not None and holder_value is None and if_better:
        move, reason = False, f"kept: the holder (v{holder_version}) has no recorded {metric}"

    tags = {
        "sweeps.sweep": sweep,
        "sweeps.trial": str(t.number),
        "sweeps.metric": metric,
        "sweeps.direction": direction,
        "sweeps.metric_value": repr(value),
        "sweeps.dataset_digest": digest or "",
        "sweeps.params": json.dumps(t.params)[:4000],
        "sweeps.cost_usd": str(t.user_attrs.get("cost_usd", "")),
        "sweeps.run_id": run_id,
    }
    version = None
    try:
        try:
            client.get_registered_model(model)
        except Exception:
            client.create_registered_model(model, tags={"sweeps.managed": "true"})
        mv = client.create_model_version(
            model, logged.artifact_location, run_id=run_id, tags=tags, model_id=logged.model_id
        )
        version = mv.version
        _wait_ready(client, model, version)
        client.set_registered_model_alias(model, "challenger", version)
        if move:
            client.set_registered_model_alias(model, alias, version)
            _push_history(client, model, alias, holder_version)
        client.set_model_version_tag(model, version, "sweeps.decision", reason)
    except Exception as e:
        if version is not None:  # nothing half-registered
            try:
                client.delete_model_version(model, version)
            except Exception:
                pass
        raise ServiceError(f"registry: {' '.join(str(e).split())[:300]}") from None
    promo = Promotion(
        model=model,
        version=str(version),
        alias=alias,
        moved=move,
        reason=reason,
        sweep=sweep,
        trial=t.number,
        metric=metric,
        direction=direction,
        value=value,
        previous_version=None if holder_version is None else str(holder_version),
        previous_value=holder_value,
        dataset_digest=digest,
    )
    parent = study.user_attrs.get("sweeps.mlflow_parent_run_id")
    if parent:
        client.set_tag(parent, f"sweeps.promotion.{model}.v{version}", json.dumps(promo.to_dict()))
    return promo


def _logged_model(client: Any, run: Any) -> Any:
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


def _wait_ready(client: Any, model: str, version: str, timeout: float = 60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if client.get_model_version(model, version).status == "READY":
            return
        time.sleep(0.2)
    raise ServiceError(f"model {model} v{version} did not become READY in {timeout:g} s")


def _history(client: Any, model: str, alias: str) -> list[str]:
    tags = client.get_registered_model(model).tags
    return json.loads(tags.get(HISTORY_TAG.format(alias=alias), "[]"))


def _push_history(client: Any, model: str, alias: str, previous: str | None) -> None:
    if previous is None:
        return
    hist = _history(client, model, alias)
    hist.append(str(previous))
    client.set_registered_model_tag(model, HISTORY_TAG.format(alias=alias), json.dumps(hist[-50:]))


def rollback(model: str, *, tracking_uri: str, alias: str = "champion") -> tuple[str, str]:
    """Move the alias back to the version that held it before; returns (from, to)."""
    client = _client(tracking_uri)
    try:
        current = client.get_model_version_by_alias(model, alias).version
    except Exception:
        raise NotFoundError(f"model '{model}' has no alias '{alias}'") from None
    hist = _history(client, model, alias)
    if not hist:
        raise NotFoundError(f"model '{model}': alias '{alias}' has no earlier holder")
    previous = hist.pop()
    client.set_registered_model_alias(model, alias, previous)
    client.set_registered_model_tag(model, HISTORY_TAG.format(alias=alias), json.dumps(hist))
    client.set_model_version_tag(
        model, previous, "sweeps.decision", f"rolled back to v{previous} from v{current}"
    )
    return str(current), str(previous)


def versions(model: str, *, tracking_uri: str) -> list[dict[str, Any]]:
    client = _client(tracking_uri)
    try:
        rm = client.get_registered_model(model)
    except Exception:
        raise NotFoundError(f"no registered model named '{model}'") from None
    aliases: dict[str, list[str]] = {}
    for a, v in (rm.aliases or {}).items():
        aliases.setdefault(str(v), []).append(a)
    out = []
    for mv in client.search_model_versions(f"name = '{model}'"):
        out.append(
            {
                "version": str(mv.version),
                "aliases": sorted(aliases.get(str(mv.version), [])),
                "metric": mv.tags.get("sweeps.metric"),
                "value": mv.tags.get("sweeps.metric_value"),
                "sweep": mv.tags.get("sweeps.sweep"),
                "trial": mv.tags.get("sweeps.trial"),
                "decision": mv.tags.get("sweeps.decision"),
            }
        )
    return sorted(out, key=lambda r: int(r["version"]))


def predict(ref: str, input_path: str, out_path: str | None, *, tracking_uri: str) -> Any:
    """Load `MODEL@alias`, `MODEL/version` or `models:/…` through pyfunc and predict a .npy/.csv."""
    import mlflow
    import numpy as np

    uri = ref if ref.startswith(("models:/", "runs:/")) else f"models:/{ref}"
    if input_path.endswith(".npy"):
        x = np.load(input_path)
    elif input_path.endswith(".csv"):
        x = np.loadtxt(input_path, delimiter=",", ndmin=2, dtype=np.float32)
    else:
        raise SpecError(f"INPUT: expected a .npy or .csv file, got {input_path}")
    from tracking.mlflow_tracker import scoped_tracking_uri

    try:
        with scoped_tracking_uri(tracking_uri):
            model = mlflow.pyfunc.load_model(uri)
    except Exception as e:
        raise NotFoundError(f"cannot load {uri}: {' '.join(str(e).split())[:200]}") from None
    schema = model.metadata.get_input_schema()
    if schema is not None and schema.is_tensor_spec():
        shape = schema.inputs[0].shape
        if len(shape) > 2 and x.ndim == 2:  # a CSV row per image: restore the image shape
            x = x.reshape((-1, *shape[1:]))
        x = x.astype(schema.inputs[0].type)
    y = np.asarray(model.predict(x))
    if out_path:
        if out_path.endswith(".npy"):
            np.save(out_path, y)
        else:
            np.savetxt(out_path, y.reshape(len(y), -1), delimiter=",")
    return y
