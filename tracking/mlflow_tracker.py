"""MLflow as the learning log: a driver callback.

One parent run per sweep, one nested run per trial (tag `mlflow.parentRunId`). All writes go
through one background thread, in order, so the driver's loop never waits on MLflow except to
create a trial's run (its id is linked into Optuna before the trial trains). Failed writes are
retried with backoff; what cannot be written is kept and reported, never silently dropped.
"""

from __future__ import annotations

import io
import json
import logging
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from sweeps.callbacks import DriverCallback, SweepContext, SweepSummary, TrialRecord
from sweeps.errors import ServiceError
from sweeps.redact import redact_mapping

log = logging.getLogger("sweeps.tracking")

STATUS = {"COMPLETE": "FINISHED", "PRUNED": "FINISHED", "FAIL": "FAILED", "KILLED": "KILLED"}


def _retry(fn: Any, *args: Any, attempts: int = 6, **kw: Any) -> Any:
    """Bounded retry: a tracking server that blinks must not lose a trial's record."""
    delay = 0.5
    for i in range(attempts):
        try:
            return fn(*args, **kw)
        except Exception:
            if i == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 10)
    return None


@contextmanager
def scoped_tracking_uri(uri: str) -> Iterator[None]:
    """Use `uri` for MLflow's fluent API for a moment. mlflow.set_tracking_uri also writes
    MLFLOW_TRACKING_URI into the environment, which would leak one sweep's store into the next
    (and into every child process); this puts both back."""
    import mlflow
    from mlflow.tracking._tracking_service import utils

    old, old_env = utils._tracking_uri, os.environ.get("MLFLOW_TRACKING_URI")
    old_reg = os.environ.get("MLFLOW_REGISTRY_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(old)
        for key, value in (("MLFLOW_TRACKING_URI", old_env), ("MLFLOW_REGISTRY_URI", old_reg)):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_reachable(uri: str) -> None:
    """Fail before any trial starts when the tracking store cannot be used."""
    from mlflow.tracking import MlflowClient

    if uri.startswith(("http://", "https://")):
        import requests

        try:
            requests.get(uri.rstrip("/") + "/health", timeout=5)
        except requests.RequestException as e:
            msg = " ".join(str(e).split())[:200]
            raise ServiceError(f"MLflow tracking server {uri} is unreachable: {msg}") from None
    # Fail fast here; the tracker's own writes retry with backoff later.
    saved = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    try:
        MlflowClient(uri).search_experiments(max_results=1)
    except Exception as e:
        msg = " ".join(str(e).split())[:300]
        if "401" in msg or "Unauthorized" in msg or "403" in msg:
            raise ServiceError(f"MLflow at {uri} refused the credentials: {msg}") from None
        raise ServiceError(f"MLflow tracking store {uri} is unreachable: {msg}") from None
    finally:
        if saved is None:
            os.environ.pop("MLFLOW_HTTP_REQUEST_MAX_RETRIES", None)
        else:
            os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = saved


class MLflowTracker(DriverCallback):
    def __init__(self, tracking_uri: str, artifact_root: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.uri = tracking_uri
        self.artifact_root = artifact_root
        self.client = MlflowClient(tracking_uri)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow")
        self.pending: list[Future[Any]] = []
        self.errors: list[str] = []
        self.unsent: list[tuple[Any, tuple[Any, ...], dict[str, Any], str]] = []
        # Time the driver's loop spent waiting on MLflow (only run creation waits): the
        # tracking overhead that lands on the trials' critical path.
        self.blocking_s = 0.0
        self.log_models = True
        self.cost_total = 0.0

    # ----- plumbing -------------------------------------------------------------------------
    def _submit(self, fn: Any, *args: Any, **kw: Any) -> Future[Any]:
        fut = self.pool.submit(self._guarded, fn, *args, **kw)
        self.pending.append(fut)
        if len(self.pending) > 256:
            self._reap()
        return fut

    def _guarded(self, fn: Any, *args: Any, **kw: Any) -> Any:
        """Retry with backoff; a write that still fails is kept and replayed at flush, so a
        tracking server that is down for a while loses nothing."""
        try:
            return _retry(fn, *args, **kw)
        except Exception as e:
            self.unsent.append((fn, args, kw, " ".join(str(e).split())[:200]))
            return None

    def _replay(self) -> None:
        pending, self.unsent = self.unsent, []
        for fn, args, kw, _ in pending:
            try:
                _retry(fn, *args, attempts=3, **kw)
            except Exception as e:
                self.unsent.append((fn, args, kw, " ".join(str(e).split())[:200]))

    def _reap(self) -> None:
        keep = []
        for f in self.pending:
            if f.done():
                if f.exception() is not None:
                    self.errors.append(" ".join(str(f.exception()).split())[:300])
            else:
                keep.append(f)
        self.pending = keep

    def flush(self, timeout: float | None = 600) -> None:
        for f in list(self.pending):
            try:
                f.result(timeout=timeout)
            except Exception as e:
                self.errors.append(" ".join(str(e).split())[:300])
        self.pending = []
        if self.unsent:
            self.pool.submit(self._replay).result()
        for fn, _, _, err in self.unsent:
            self.errors.append(f"{getattr(fn, '__name__', fn)} not written: {err}")
        self.unsent = []

    def close(self) -> None:
        self.flush()
        self.pool.shutdown(wait=True)

    # ----- sweep ----------------------------------------------------------------------------
    def on_sweep_start(self, ctx: SweepContext) -> None:
        spec = ctx.spec
        self.log_models = spec.tracking.log_models
        name = spec.tracking.experiment or spec.name
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            ctx.experiment_id = self.client.create_experiment(
                name, artifact_location=self.artifact_root
            )
        else:
            ctx.experiment_id = exp.experiment_id
        if ctx.parent_run_id:
            run = self.client.get_run(ctx.parent_run_id)
            if run.info.status != "RUNNING":
                self.client.update_run(ctx.parent_run_id, status="RUNNING")
            return
        run = self.client.create_run(
            ctx.experiment_id,
            run_name=spec.name,
            tags={
                "sweeps.role": "sweep",
                "sweeps.study": ctx.study_name,
                "sweeps.storage": _safe_url(ctx.storage_url),
                **_code_tags(spec.trainer.code_dir),
            },
        )
        ctx.parent_run_id = run.info.run_id
        params = {
            "sampler": spec.sampler.name,
            "sampler.seed": spec.sampler.seed,
            "pruner": spec.pruner.name,
            "objective": ",".join(f"{o.metric}:{o.direction}" for o in spec.objective_list()),
            "budget.trials": spec.budget.trials,
            "budget.parallel": spec.budget.parallel,
            "budget.timeout_s": spec.budget.timeout_s,
            "budget.max_failed_trials": spec.budget.max_failed_trials,
            "execution.mode": spec.execution.mode,
            "trainer.model": spec.trainer.model if not spec.trainer.entrypoint else "-",
            "trainer.dataset": spec.trainer.dataset if not spec.trainer.entrypoint else "-",
            "trainer.entrypoint": spec.trainer.entrypoint or "builtin",
            "resources.workers": spec.resources.workers,
            "resources.machine_type": spec.resources.machine_type,
        }
        if ctx.warm_notes:
            src = ",".join(spec.warm_start.from_) if spec.warm_start else ""
            self._submit(self.client.set_tag, ctx.parent_run_id, "sweeps.warm_start.from", src)
            self._submit(
                self.client.set_tag,
                ctx.parent_run_id,
                "sweeps.warm_start.notes",
                "; ".join(ctx.warm_notes)[:5000],
            )
        for k, v in redact_mapping(spec.sampler.options, "sampler.options").items():
            params[f"sampler.options.{k}"] = v
        for k, v in redact_mapping(spec.pruner.options, "pruner.options").items():
            params[f"pruner.options.{k}"] = v
        self._log_params(ctx.parent_run_id, params)
        if spec.tracking.system_metrics:
            self._start_system_metrics(ctx.parent_run_id)
        yaml_text = _redacted_spec_yaml(spec)
        self._submit(self.client.log_text, ctx.parent_run_id, yaml_text, "spec.yaml")

    def _start_system_metrics(self, run_id: str) -> None:
        """CPU, memory, disk, network (and GPU with nvidia-ml-py) of the driver's node on the
        sweep's run. Workers do not write to MLflow, so per-worker numbers are not collected."""
        import platform

        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self.system_monitor = SystemMetricsMonitor(
            run_id, sampling_interval=5, tracking_uri=self.uri, node_id=platform.node()
        )
        self.system_monitor.start()

    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items() if v is not None]
        self._submit(self.client.log_batch, run_id, params=items)

    # ----- trials ---------------------------------------------------------------------------
    def on_trial_start(self, ctx: SweepContext, t: TrialRecord) -> str | None:
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        spec = ctx.spec

        def _create() -> str:
            run = self.client.create_run(
                ctx.experiment_id,
                run_name=f"{spec.name}-trial-{t.number:04d}",
                tags={
                    MLFLOW_PARENT_RUN_ID: ctx.parent_run_id,
                    "sweeps.role": "trial",
                    "sweeps.study": ctx.study_name,
                    "sweeps.trial_number": str(t.number),
                    "sweeps.lane": t.lane_id,
                    "sweeps.state": "RUNNING",
                    "sweeps.seed": str(t.seed),
                    **(
                        {"sweeps.requeued_from": str(t.config["_requeued_from"])}
                        if "_requeued_from" in t.config
                        else {}
                    ),
                },
            )
            return run.info.run_id

        t0 = time.perf_counter()
        run_id = self.pool.submit(_retry, _create).result()
        self.blocking_s += time.perf_counter() - t0
        params: dict[str, Any] = dict(redact_mapping(t.params, "params"))
        r = spec.resources
        params.update(
            {
                "resources.workers": t.config.get("_workers", r.workers),
                "resources.cpus_per_worker": r.cpus_per_worker,
                "resources.gpus_per_worker": t.config.get("_gpus_per_worker", r.gpus_per_worker),
                "resources.machine_type": t.config.get("_machine_type", r.machine_type),
            }
        )
        fixed = {k: v for k, v in t.config.items() if k not in t.params and not k.startswith("_")}
        for k, v in redact_mapping(fixed, "trainer").items():
            params[f"fixed.{k}"] = v
        self._log_params(run_id, params)
        return run_id

    def on_epoch(
        self, ctx: SweepContext, t: TrialRecord, step: int, metrics: dict[str, float]
    ) -> None:
        if not t.run_id:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        self._submit(self.client.log_batch, t.run_id, metrics=items)

    def on_trial_restart(self, ctx: SweepContext, t: TrialRecord) -> None:
        if t.run_id:
            self._submit(self.client.set_tag, t.run_id, "sweeps.restarts", str(t.restarts))
            note = f"worker group restarted ({t.restarts}x); resumed from the last checkpoint"
            self._submit(self.client.set_tag, t.run_id, "sweeps.problems", note)

    def on_trial_end(
        self,
        ctx: SweepContext,
        t: TrialRecord,
        state: str,
        values: list[float] | None,
        result: dict[str, Any],
        extra: dict[str, float],
    ) -> None:
        if not t.run_id:
            return
        self._submit(self._finish_trial, ctx, t, state, values, result, extra)

    def _finish_trial(
        self,
        ctx: SweepContext,
        t: TrialRecord,
        state: str,
        values: list[float] | None,
        result: dict[str, Any],
        extra: dict[str, float],
    ) -> None:
        from mlflow.entities import Metric

        run_id = t.run_id
        assert run_id is not None
        now = int(time.time() * 1000)
        final = {
            f"final_{k}": v for k, v in (result.get("metrics") or {}).items() if k not in ("epoch",)
        }
        final.update(extra)
        if values:
            final["objective"] = values[0]
        items = [Metric(k, float(v), now, t.last_step) for k, v in final.items()]
        if items:
            self.client.log_batch(run_id, metrics=items)
        tags = {"sweeps.state": state, "sweeps.restarts": str(t.restarts)}
        if t.error:
            tags["sweeps.error"] = t.error[:5000]
        if "dataset" in result:
            tags["sweeps.dataset_digest"] = str(result["dataset"].get("digest"))
        for k, v in (result.get("hardware") or {}).items():
            tags[f"sweeps.hw.{k}"] = str(v)
        for k, v in tags.items():
            self.client.set_tag(run_id, k, v)
        if "dataset" in result:
            self._log_dataset(run_id, result["dataset"])
        text = result.get("log") or t.log
        if text:
            self.client.log_text(run_id, text, "logs/worker.log")
        if state == "COMPLETE" and self.log_models and result.get("model_blob"):
            try:
                self._log_model(run_id, result)
            except Exception as e:  # the trial's record stands even if its model cannot be saved
                self.client.set_tag(run_id, "sweeps.model_error", " ".join(str(e).split())[:500])
        self.client.set_terminated(run_id, status=STATUS.get(state, "FINISHED"))

    def _log_dataset(self, run_id: str, ds: dict[str, Any]) -> None:
        from mlflow.entities import Dataset, DatasetInput, InputTag

        src = str(ds.get("source", ""))
        kind = (
            "gs" if src.startswith("gs://") else "code" if src.startswith("sklearn:") else "local"
        )
        inputs = []
        for context, rows in (
            ("training", ds.get("rows_train")),
            ("validation", ds.get("rows_val")),
        ):
            d = Dataset(
                name=f"{ds.get('name')}-{context}",
                digest=str(ds.get("digest"))[:36],
                source_type=kind,
                source=json.dumps(
                    {
                        "uri": src,
                        "split_seed": ds.get("split_seed"),
                        "val_fraction": ds.get("val_fraction"),
                    }
                ),
                profile=json.dumps({"num_rows": rows}),
            )
            inputs.append(DatasetInput(d, tags=[InputTag("mlflow.data.context", context)]))
        self.client.log_inputs(run_id, datasets=inputs)

    def _log_model(self, run_id: str, result: dict[str, Any]) -> None:
        import mlflow
        import numpy as np
        import torch
        from mlflow.models import infer_signature

        info = result.get("model_info")
        blob = io.BytesIO(result["model_blob"])
        if info:
            from trainer.models import build_model

            model = build_model(
                info["model"], tuple(info["input_shape"]), info["num_classes"], **info["arch"]
            )
            model.load_state_dict(torch.load(blob, map_location="cpu"))
        else:  # user code returned a whole nn.Module
            model = torch.load(blob, map_location="cpu", weights_only=False)
        model.eval()
        example = result.get("input_example")
        signature = None
        if example is not None:
            with torch.no_grad():
                out = model(torch.as_tensor(np.array(example))).numpy()
            signature = infer_signature(example, out)
        with scoped_tracking_uri(self.uri), mlflow.start_run(run_id=run_id):
            # Explicit requirements: inferring them costs ~5 s per model (it imports the model
            # in a subprocess), which alone would make logging the slowest part of a trial.
            mlflow.pytorch.log_model(
                model,
                name="model",
                pip_requirements=_requirements(),
                signature=signature,
                input_example=example,
                serialization_format="pickle",
            )

    def on_sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None:
        if not ctx.parent_run_id:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        m = {f"trials_{k.lower()}": float(v) for k, v in summary.counts.items()}
        m.update(
            wall_seconds=summary.wall_s, cost_usd=summary.cost_usd, gpu_hours=summary.gpu_hours
        )
        if summary.best_value is not None:
            m["best_value"] = summary.best_value
        pid = ctx.parent_run_id
        monitor = getattr(self, "system_monitor", None)
        if monitor is not None:
            monitor.finish()
        self._submit(
            self.client.log_batch, pid, metrics=[Metric(k, v, now, 0) for k, v in m.items()]
        )
        tags = {"sweeps.state": summary.state, "sweeps.stop_reason": summary.reason}
        if summary.best_number is not None:
            tags["sweeps.best_trial"] = str(summary.best_number)
        for k, v in tags.items():
            self._submit(self.client.set_tag, pid, k, v)
        status = {"finished": "FINISHED", "stopped": "FINISHED", "interrupted": "KILLED"}.get(
            summary.state, "FAILED"
        )
        self._submit(self.client.set_terminated, pid, status=status)

    def close_stale_run(self, run_id: str) -> None:
        """A run left RUNNING by a killed driver: close it as KILLED (resume does this)."""
        self._submit(self.client.set_tag, run_id, "sweeps.state", "KILLED")
        self._submit(self.client.set_terminated, run_id, status="KILLED")

    def log_plots(self, run_id: str, files: dict[str, str]) -> None:
        for path in files.values():
            self._submit(self.client.log_artifact, run_id, path, "plots")


def _requirements() -> list[str]:
    from importlib.metadata import version

    return [f"{p}=={version(p)}" for p in ("torch", "mlflow", "numpy", "cloudpickle")]


def _safe_url(url: str) -> str:
    """Strip the password from a database URL before it is written anywhere."""
    import re

    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def _redacted_spec_yaml(spec: Any) -> str:
    import yaml

    data = spec.model_dump(mode="json", by_alias=True)
    data = redact_mapping(data, "")
    if data.get("storage"):
        data["storage"] = _safe_url(data["storage"])
    return yaml.safe_dump(data, sort_keys=False)


def _code_tags(code_dir: str | None) -> dict[str, str]:
    """Code and library versions: the git commit of the user's code when there is one."""
    tags = {"sweeps.python": platform.python_version()}
    try:
        from importlib.metadata import version

        for pkg in ("torch", "ray", "optuna", "mlflow", "sweeps"):
            tags[f"sweeps.version.{pkg}"] = version(pkg)
    except Exception:
        pass
    cwd = code_dir or os.getcwd()
    try:
        commit = subprocess.run(
            ["git", "-C", cwd, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if commit.returncode == 0:
            tags["mlflow.source.git.commit"] = commit.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags
