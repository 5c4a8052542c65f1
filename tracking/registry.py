"""Promote a sweep's best model to the MLflow Model Registry, behind a champion/challenger gate.

Aliases, not the deprecated stages. A promotion registers the trial's model as a new version
with alias `challenger` (a trial already registered keeps its one version: it is reused, not
registered again); the target alias (`champion`) moves only when asked to, or with `if_better`
only when the challenger beats the holder on the same metric, direction and validation dataset
digest. The alias history lives in a registered-model tag so `rollback` can undo a move; a
rollback writes its own `sweeps.rollback` tag and leaves each version's `sweeps.decision`.
Built-in models carry `sweeps.input_scaling`: how their input pixels were scaled in training.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from sweeps.common import names
from sweeps.common.errors import NotFoundError, ServiceError, SpecError, one_line
from tracking.aliases import add_decision, decisions, history, place_aliases
from tracking.model_log import (
    FORMAT_TAG,
    OUTPUTS,
    has_outputs,
    input_scaling_of,
    logged_model_of,
    model_value,
)
from tracking.promote_checks import GateAsk, judge, score_test
from tracking.significance import ALPHA


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
    existing: bool = False  # the trial already had this version: nothing was registered
    gate: dict[str, Any] | None = None  # the significance gate's verdict (tracking/significance)
    test: dict[str, Any] | None = None  # the locked test split's scores, digest, or why none

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

    from sweeps.common.paths import registry_uri
    from tracking.mlflow_compat import check_reachable

    check_reachable(tracking_uri)
    registry = registry_uri(tracking_uri)
    if registry != tracking_uri:
        check_reachable(registry)
    return MlflowClient(tracking_uri, registry_uri=registry)


def _metric_value(run: Any, metric: str) -> float | None:
    m = run.data.metrics
    for key in (metric, f"final_{metric}"):
        if key in m:
            return float(m[key])
    if metric == run.data.tags.get(names.OBJECTIVE_METRIC) and "objective" in m:
        return float(m["objective"])
    return None


def promote(
    study: Any,
    t: Any,
    model: str,
    *,
    tracking_uri: str,
    alias: str = "champion",
    if_better: bool = False,
    metric: str | None = None,
    alpha: float = ALPHA,
    min_effect: float = 0.0,
) -> Promotion:
    """Register trial `t` of `study` (an Optuna study and one of its finished trials, chosen by
    the caller) as a new version of `model`, and move `alias` per the gate: with replicates on
    both sides, Welch's t-test at `alpha` (and `min_effect`); else the single values."""
    sweep = study.study_name
    metric = metric or study.user_attrs.get(names.OBJECTIVE) or "objective"
    direction = study.directions[0].name.lower() if len(study.directions) == 1 else "maximize"
    run_id = t.user_attrs.get("mlflow_run_id") or study.user_attrs.get(names.run_of_trial(t.number))
    if not run_id:
        raise NotFoundError(f"trial {t.number} of '{sweep}' has no MLflow run")
    client = _client(tracking_uri)
    run, value = _run_and_value(client, run_id, metric, t.number)
    digest = run.data.tags.get(names.DATASET_DIGEST)
    logged = logged_model_of(client, run)
    own = model_value(logged, metric)  # a best-epoch model's own value, not the last epoch's
    value = value if own is None else own
    files = logged is None and has_outputs(client, run_id)  # a program-mode trial's files
    remote = None if logged is not None or files else job_dir_model(run)  # AI Platform's
    if logged is None and not files and not remote:
        why = run.data.tags.get(names.MODEL_ERROR) or "its training code returned none"
        raise NotFoundError(f"trial {t.number} of '{sweep}' has no logged model: {why}")

    holder_version, holder_value, holder_digest = _holder(client, model, alias, metric, if_better)
    move, reason = decide(value, holder_value, direction, holder_digest == digest, if_better)
    objective = metric == (study.user_attrs.get(names.OBJECTIVE) or "objective")
    ask = GateAsk(if_better and holder_digest == digest, objective, alpha, min_effect, direction)
    verdict, gate_tags = judge(client, run, model, (holder_version, holder_value), value, ask)
    if verdict is not None:
        move, reason = verdict.better, verdict.reason
    if holder_version is not None and holder_value is None and if_better:
        move, reason = False, f"kept: the holder (v{holder_version}) has no recorded {metric}"
    existing = _version_of_run(client, model, run_id)
    if existing is not None:
        if existing == holder_version:
            move, reason = False, f"v{existing} already holds {alias}"
        reason = f"trial {t.number} already registered as v{existing}; {reason}"

    tags = _version_tags(run, run_id, t, sweep, metric, direction, value, digest, bool(files))
    tags.update(gate_tags)
    version = _register_and_move(
        client, model, alias, logged, run_id, tags, existing, move, holder_version, reason, remote
    )
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
        existing=existing is not None,
        gate=None if verdict is None else verdict.to_dict(),
        test=None
        if existing
        else score_test(client, study, t, model, version, files, tracking_uri),
    )
    parent = study.user_attrs.get(names.MLFLOW_PARENT_RUN_ID)
    if parent:
        client.set_tag(parent, names.promotion(model, version), json.dumps(promo.to_dict()))
    return promo


def _run_and_value(client: Any, run_id: str, metric: str, trial: int) -> tuple[Any, float]:
    """The trial's MLflow run and its value of `metric`; an error says which metrics it has."""
    try:
        run = client.get_run(run_id)
    except Exception as e:
        raise ServiceError(f"cannot read run {run_id}: {one_line(e, 200)}") from None
    value = _metric_value(run, metric)
    if value is None:
        have = ", ".join(sorted(k for k in run.data.metrics if not k.startswith("final_")))
        raise SpecError(f"--metric: '{metric}' was not recorded for trial {trial} ({have})")
    return run, value


def _holder(
    client: Any, model: str, alias: str, metric: str, if_better: bool
) -> tuple[str | None, float | None, str | None]:
    """The version holding `alias` now: (version, its value of `metric`, its dataset digest).

    A value recorded for another metric is dropped unless `if_better` (the gate then compares
    on it); all None when there is no registered model or no holder yet."""
    holder_version, holder_value, holder_digest = None, None, None
    try:
        mv = client.get_model_version_by_alias(model, alias)
        holder_version = str(mv.version)
        holder_value = float(mv.tags[names.METRIC_VALUE]) if names.METRIC_VALUE in mv.tags else None
        holder_digest = mv.tags.get(names.DATASET_DIGEST)
        if mv.tags.get(names.METRIC) not in (None, metric):
            holder_value = None if not if_better else holder_value
    except Exception:
        pass  # no registered model or no holder yet
    return holder_version, holder_value, holder_digest


def _version_tags(
    run: Any,
    run_id: str,
    t: Any,
    sweep: str,
    metric: str,
    direction: str,
    value: float,
    digest: str | None,
    files: bool,
) -> dict[str, str]:
    """The tags a new version carries: where it came from, its gate value, how it was saved."""
    tags = {
        names.SWEEP: sweep,
        names.TRIAL: str(t.number),
        names.METRIC: metric,
        names.DIRECTION: direction,
        names.METRIC_VALUE: repr(value),
        names.DATASET_DIGEST: digest or "",
        names.PARAMS: json.dumps(t.params)[:4000],
        names.COST_USD: str(t.user_attrs.get("cost_usd", "")),
        names.RUN_ID: run_id,
    }
    scaling = input_scaling_of(run)
    if scaling is not None:
        tags[names.INPUT_SCALING] = json.dumps(scaling)
    if names.PBT_SCHEDULE in t.user_attrs:  # `search: pbt`: the member's params over time
        tags[names.PBT_SCHEDULE] = str(t.user_attrs[names.PBT_SCHEDULE])[:5000]
    # How the model was saved: pickle means loading it runs its code; files are not loadable.
    tags[FORMAT_TAG] = "files" if files else run.data.tags.get(FORMAT_TAG, "")
    return tags


def _register_and_move(
    client: Any,
    model: str,
    alias: str,
    logged: Any,
    run_id: str,
    tags: dict[str, str],
    existing: str | None,
    move: bool,
    holder_version: str | None,
    reason: str,
    remote: str | None = None,
) -> str | None:
    """Registers the trial (unless `existing`), moves `alias` if `move` (else the version is
    the `challenger`), and adds the decision to its history; the version. A new version is
    deleted again if a step fails."""
    version = existing
    try:
        if existing is None:
            version = _register(client, model, logged, run_id, tags, remote)
        assert version is not None
        place_aliases(client, model, alias, version, move, holder_version)
        if existing is None or move:  # a repeated promotion that changes nothing adds nothing
            add_decision(client, model, version, alias, reason)
    except Exception as e:
        if version is not None and existing is None:  # nothing half-registered
            try:
                client.delete_model_version(model, version)
            except Exception:
                pass
        raise ServiceError(f"registry: {one_line(e, 300)}") from None
    return version


def job_dir_model(run: Any) -> str | None:
    """An AI Platform trial's model under its job dir: OUTPUT_URI/model/ (Vertex's
    AIP_MODEL_DIR) when it wrote there, else OUTPUT_URI, if the trial's end found files."""
    uri = run.data.tags.get(names.OUTPUT_URI)
    try:
        listing = json.loads(run.data.tags.get(names.OUTPUT_FILES) or "{}")
    except ValueError:
        return None
    if not uri or not listing.get("count"):
        return None
    return f"{uri}model/" if any(f.startswith("model/") for f in listing["files"]) else uri


def _register(
    client: Any, model: str, logged: Any, run_id: str, tags: dict[str, str], remote: str | None
) -> str:
    """A new version: the trial's LoggedModel, the files it wrote (program mode), or the
    folder it wrote under its AI Platform job dir (`remote`, referenced where it is)."""
    try:
        client.get_registered_model(model)
    except Exception:
        client.create_registered_model(model, tags={names.MANAGED: "true"})
    if logged is None:
        source = remote or f"{client.get_run(run_id).info.artifact_uri}/{OUTPUTS}"
        mv = client.create_model_version(model, source, run_id=run_id, tags=tags)
    else:
        mv = client.create_model_version(
            model, logged.artifact_location, run_id=run_id, tags=tags, model_id=logged.model_id
        )
    _wait_ready(client, model, mv.version)
    return str(mv.version)


def _version_of_run(client: Any, model: str, run_id: str) -> str | None:
    """The version already registered from this trial's run, if any (the oldest)."""
    try:
        found = client.search_model_versions(f"name = '{model}' and run_id = '{run_id}'")
    except Exception:
        return None  # no such registered model yet
    versions = sorted(int(mv.version) for mv in found)
    return str(versions[0]) if versions else None


def _wait_ready(client: Any, model: str, version: str, timeout: float = 60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if client.get_model_version(model, version).status == "READY":
            return
        time.sleep(0.2)
    raise ServiceError(f"model {model} v{version} did not become READY in {timeout:g} s")


def rollback(model: str, *, tracking_uri: str, alias: str = "champion") -> tuple[str, str]:
    """Move the alias back to the version that held it before; returns (from, to)."""
    client = _client(tracking_uri)
    try:
        current = client.get_model_version_by_alias(model, alias).version
    except Exception:
        raise NotFoundError(f"model '{model}' has no alias '{alias}'") from None
    hist = history(client, model, alias)
    if not hist:
        raise NotFoundError(f"model '{model}': alias '{alias}' has no earlier holder")
    previous = hist.pop()
    client.set_registered_model_alias(model, alias, previous)
    client.set_registered_model_tag(model, names.alias_history(alias), json.dumps(hist))
    # Its own tag: each version's sweeps.decision (why it was promoted) stays as it was.
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    note = f"{alias} rolled back to v{previous} from v{current} at {when}"
    client.set_model_version_tag(model, previous, names.ROLLBACK, note)
    client.set_model_version_tag(model, current, names.ROLLBACK, note)
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
                "metric": mv.tags.get(names.METRIC),
                "value": mv.tags.get(names.METRIC_VALUE),
                "sweep": mv.tags.get(names.SWEEP),
                "trial": mv.tags.get(names.TRIAL),
                "decision": (decisions(mv.tags.get(names.DECISION)) or [None])[-1],
                "decisions": decisions(mv.tags.get(names.DECISION)),
                "rollback": mv.tags.get(names.ROLLBACK),
                "input_scaling": mv.tags.get(names.INPUT_SCALING),
            }
        )
    return sorted(out, key=lambda r: int(r["version"]))
