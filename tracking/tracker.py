"""MLflow as the learning log: the driver's `Tracker`.

One parent run per sweep, one nested run per trial (tag `mlflow.parentRunId`). Every write goes
through one ordered writer (`tracking.writer`), so the driver's loop never waits on MLflow except
to create a trial's run (its id is linked into Optuna before the trial trains).
"""

from __future__ import annotations

import os
import platform
import queue
import subprocess
import threading
import time
from typing import Any

from sweeps import paths, timeline
from sweeps.callbacks import SweepContext, SweepSummary, TrialEnd, TrialRecord
from sweeps.errors import one_line
from sweeps.redact import mask_url, redact_mapping, redacted_spec_yaml
from tracking import mlflow_compat, model_log
from tracking.mlflow_compat import PARENT_RUN_TAG, system_metrics_monitor
from tracking.writer import NotReady, OrderedWriter

EXPERIMENT_KIND, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
STATUS = {"COMPLETE": "FINISHED", "PRUNED": "FINISHED", "FAIL": "FAILED", "KILLED": "KILLED"}
SWEEP_STATUS = {
    "finished": "FINISHED",
    "stopped": "FINISHED",
    "interrupted": "KILLED",
    "cancelled": "KILLED",
}


class MLflowTracker:
    def __init__(self, tracking_uri: str, artifact_root: str | None = None) -> None:
        from mlflow.tracking import MlflowClient

        self.uri = tracking_uri
        self.artifact_root = artifact_root
        self.client = MlflowClient(tracking_uri)
        if tracking_uri.startswith("sqlite"):
            mlflow_compat.fast_sqlite_store(self.client)
        self.writer = OrderedWriter("mlflow")
        self._runs: dict[int, str] = {}  # trial_id -> run_id, written by the writer thread
        self._models: set[int] = set()  # trials whose model was logged
        self._created: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
        # A trial's params, metrics and tags not written yet: whatever piled up while the writer
        # was busy goes in one log_batch (a tiny trial's record took five commits, now three).
        self._batches: dict[int, _Batch] = {}
        self._batch_lock = threading.Lock()
        self.log_models = True
        self.system_monitor: Any = None

    @property
    def blocking_s(self) -> float:
        return self.writer.blocking_s

    def _submit(self, fn: Any, *args: Any, **kw: Any) -> None:
        self.writer.submit(fn, *args, **kw)

    def flush(self) -> list[str]:
        return self.writer.flush()

    def close(self) -> None:
        self.writer.close()

    # ----- sweep ----------------------------------------------------------------------------
    def start_sweep(self, ctx: SweepContext) -> None:
        spec, client = ctx.spec, self.client
        self.log_models = spec.tracking.log_models
        name = paths.experiment_name(spec.tracking.experiment, spec.name)
        exp = client.get_experiment_by_name(name)
        if exp is None:
            # MLflow 3's UI opens an experiment of this kind on its runs, for model training.
            ctx.experiment_id = client.create_experiment(
                name, artifact_location=self.artifact_root, tags={EXPERIMENT_KIND: MODEL_TRAINING}
            )
        else:
            ctx.experiment_id = exp.experiment_id
            if EXPERIMENT_KIND not in exp.tags:
                client.set_experiment_tag(ctx.experiment_id, EXPERIMENT_KIND, MODEL_TRAINING)
        if ctx.parent_run_id:
            if client.get_run(ctx.parent_run_id).info.status != "RUNNING":
                client.update_run(ctx.parent_run_id, status="RUNNING")
            return
        tags = {
            "sweeps.role": "sweep",
            "sweeps.study": ctx.study_name,
            "sweeps.storage": mask_url(ctx.storage_url),
            **_code_tags(spec.trainer.code_dir),
        }
        ctx.parent_run_id = client.create_run(
            ctx.experiment_id, run_name=spec.name, tags=tags
        ).info.run_id
        self._log_params(ctx.parent_run_id, _sweep_params(spec))
        if ctx.warm_notes:
            src = ",".join(spec.warm_start.from_) if spec.warm_start else ""
            self._set_tags(
                ctx.parent_run_id,
                {
                    "sweeps.warm_start.from": src,
                    "sweeps.warm_start.notes": "; ".join(ctx.warm_notes)[:5000],
                },
            )
        if spec.tracking.system_metrics:
            # Workers do not write to MLflow, so this is the driver's node only.
            self.system_monitor = system_metrics_monitor(ctx.parent_run_id, self.uri)
            self.system_monitor.start()
        self._submit(client.log_text, ctx.parent_run_id, redacted_spec_yaml(spec), "spec.yaml")

    def end_sweep(self, ctx: SweepContext, summary: SweepSummary) -> None:
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
        if self.system_monitor is not None:
            self.system_monitor.finish()
        self._submit(
            self.client.log_batch, pid, metrics=[Metric(k, v, now, 0) for k, v in m.items()]
        )
        tags = {"sweeps.state": summary.state, "sweeps.stop_reason": summary.reason}
        if summary.best_number is not None:
            tags["sweeps.best_trial"] = str(summary.best_number)
        self._set_tags(pid, tags)
        self._submit(
            self.client.set_terminated, pid, status=SWEEP_STATUS.get(summary.state, "FAILED")
        )

    def find_trial_run(self, ctx: SweepContext, number: int) -> str | None:
        name = paths.experiment_name(ctx.spec.tracking.experiment, ctx.spec.name)
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            return None
        found = self.client.search_runs(
            [exp.experiment_id],
            f"tags.`sweeps.study` = '{ctx.study_name}' and tags.`sweeps.trial_number` = '{number}'",
            max_results=1,
        )
        return found[0].info.run_id if found else None

    def close_stale_run(self, run_id: str) -> None:
        self._set_tags(run_id, {"sweeps.state": "KILLED"})
        self._submit(self.client.set_terminated, run_id, status="KILLED")

    def log_artifacts(
        self, run_id: str, paths: list[str], artifact_path: str, then_remove: str | None = None
    ) -> None:
        """Upload files in order; `then_remove`, a folder deleted once they are uploaded."""
        for path in paths:
            self._submit(self.client.log_artifact, run_id, path, artifact_path)
        if then_remove:
            import shutil

            self._submit(shutil.rmtree, then_remove, ignore_errors=True)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self._set_tags(run_id, tags)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self._submit(self.client.log_text, run_id, text, artifact_file)

    # ----- trials ---------------------------------------------------------------------------
    def start_trial(self, ctx: SweepContext, t: TrialRecord) -> None:
        tags = {
            PARENT_RUN_TAG: ctx.parent_run_id,
            "sweeps.role": "trial",
            "sweeps.study": ctx.study_name,
            "sweeps.trial_number": str(t.number),
            "sweeps.lane": t.lane_id,
            "sweeps.state": "RUNNING",
            "sweeps.seed": str(t.seed),
        }
        if t.requeued_from is not None:
            tags["sweeps.requeued_from"] = str(t.requeued_from)
        if t.resumed_from_trial is not None:
            tags["sweeps.resumed_from_trial"] = str(t.resumed_from_trial)
            tags["sweeps.resumed_from_checkpoint"] = str(t.resume_from)
        params: dict[str, Any] = dict(redact_mapping(t.params, "params"))
        for key in ("workers", "cpus_per_worker", "gpus_per_worker", "machine_type", "preemptible"):
            params[f"resources.{key}"] = getattr(t, key)
        fixed = {k: v for k, v in t.config.items() if k not in t.params}
        for k, v in redact_mapping(fixed, "trainer").items():
            params[f"fixed.{k}"] = v
        name = f"{ctx.spec.name}-trial-{t.number:04d}"
        self._add(t.trial_id, params={k: str(v)[:6000] for k, v in params.items() if v is not None})
        self._submit(self._create_run, t.trial_id, ctx.experiment_id, name, tags)

    def _create_run(
        self, trial_id: int, experiment_id: str, name: str, tags: dict[str, str]
    ) -> None:
        """On the writer thread; later writes about the trial find the run id in `_runs`."""
        run_id = self._runs.get(trial_id)
        if run_id is None:  # a retry after a create that went through must not make another
            run_id = self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
            self._runs[trial_id] = run_id
            self._created.put((trial_id, run_id))
        self._write_batch(trial_id)

    def _add(
        self,
        trial_id: int,
        params: dict[str, str] | None = None,
        metrics: list[Any] | None = None,
        tags: dict[str, str] | None = None,
    ) -> bool:
        """Buffer a trial's writes; True if no write of its buffer is queued yet."""
        with self._batch_lock:
            b = self._batches.setdefault(trial_id, _Batch())
            b.merge(params or {}, metrics or [], tags or {})
            fresh, b.queued = not b.queued, True
            return fresh

    def _write_batch(
        self,
        trial_id: int,
        metrics: Any = (),
        tags: dict[str, str] | None = None,
        final: bool = False,
    ) -> None:
        """On the writer thread: the trial's buffered writes (plus `metrics`/`tags`) in one
        log_batch. A failed write puts them back, so the retry (or the replay) sends them."""
        from mlflow.entities import Param, RunTag

        run_id = self._runs.get(trial_id)
        if run_id is None:
            raise NotReady(f"the run of trial id {trial_id} is not created yet")
        with self._batch_lock:
            if not final and self._batches.get(trial_id, _Batch()).ending:
                return  # the trial's end is queued: it writes this buffer with its own
            b = self._batches.pop(trial_id, None) or _Batch()
        out = _Batch()
        out.merge(b.params, [*b.metrics, *metrics], {**b.tags, **(tags or {})})
        if out.empty():
            return
        try:
            self.client.log_batch(
                run_id,
                metrics=out.metrics,
                params=[Param(k, v) for k, v in out.params.items()],
                tags=[RunTag(k, v) for k, v in out.tags.items()],
            )
        except BaseException:
            with self._batch_lock:  # back in front of what came since; the caller's own extras
                later = self._batches.pop(trial_id, None)  # come again with its retry
                if later is not None:
                    b.merge(later.params, later.metrics, later.tags)
                    b.ending = b.ending or later.ending
                b.queued = True
                self._batches[trial_id] = b
            raise

    def created_runs(self) -> list[tuple[int, str]]:
        out = []
        while not self._created.empty():
            out.append(self._created.get_nowait())
        return out

    def log_epoch(
        self, ctx: SweepContext, t: TrialRecord, step: int, metrics: dict[str, float]
    ) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
        if self._add(t.trial_id, metrics=items):
            self._submit(self._write_batch, t.trial_id)

    def log_metrics(
        self, ctx: SweepContext, t: TrialRecord, step: int, metrics: dict[str, float]
    ) -> None:
        self.log_epoch(ctx, t, step, metrics)

    def log_bytes(self, ctx: SweepContext, t: TrialRecord, name: str, data: bytes) -> None:
        self._submit(self._for_trial, t.trial_id, self._write_artifact, name, data)

    def _write_artifact(self, run_id: str, name: str, data: bytes) -> None:
        import tempfile

        folder, _, base = name.rpartition("/")
        with tempfile.TemporaryDirectory(prefix="sweeps-artifact-") as d:
            path = os.path.join(d, base)
            with open(path, "wb") as f:
                f.write(data)
            self.client.log_artifact(run_id, path, folder or None)

    def _for_trial(self, trial_id: int, fn: Any, *args: Any, **kw: Any) -> None:
        """On the writer thread, after the trial's run was created (writes are in order):
        `fn(run_id, ...)`, if its creation went through."""
        run_id = self._runs.get(trial_id)
        if run_id is None:
            raise NotReady(f"the run of trial id {trial_id} is not created yet")
        fn(run_id, *args, **kw)

    def trial_restarted(self, ctx: SweepContext, t: TrialRecord) -> None:
        note = f"worker group restarted ({t.restarts}x); resumed from the last checkpoint"
        tags = {"sweeps.restarts": str(t.restarts), "sweeps.problems": note}
        if self._add(t.trial_id, tags=tags):
            self._submit(self._write_batch, t.trial_id)

    def end_trial(self, ctx: SweepContext, t: TrialRecord, end: TrialEnd) -> None:
        with self._batch_lock:
            self._batches.setdefault(t.trial_id, _Batch()).ending = True
        self._submit(self._finish_trial, t, end, ctx.experiment_id)

    def _finish_trial(self, t: TrialRecord, end: TrialEnd, experiment_id: str) -> None:
        """On the writer thread: final metrics, tags, dataset, log, model, then close the run."""
        from mlflow.entities import Metric

        run_id, result, client = self._runs.get(t.trial_id), end.result, self.client
        if run_id is None:
            raise NotReady(f"the run of trial {t.number} is not created yet")
        now = int(time.time() * 1000)
        final = {
            f"final_{k}": v for k, v in (result.metrics if result else {}).items() if k != "epoch"
        }
        final.update(end.extra)
        if end.values:
            final["objective"] = end.values[0]
        items = [Metric(k, float(v), now, t.last_step) for k, v in final.items()]
        tags = {"sweeps.state": end.state, "sweeps.restarts": str(t.restarts)}
        if t.error:
            tags["sweeps.error"] = t.error[:5000]
        if result is not None and result.dataset:
            tags["sweeps.dataset_digest"] = str(result.dataset.get("digest"))
        for k, v in (result.hardware if result else {}).items():
            tags[f"sweeps.hw.{k}"] = str(v)
        if result is not None and result.model_error:
            tags["sweeps.model_error"] = result.model_error[:5000]
        # One write for the final metrics and tags and whatever else is buffered (a tiny trial's
        # params and its only epoch): a trial's end costs a handful of commits, which is what
        # bounds a sweep of a thousand short trials.
        self._write_batch(t.trial_id, items, tags, final=True)
        if result is not None and result.dataset:
            model_log.log_dataset(client, run_id, result.dataset)
        if t.log:
            client.log_text(run_id, t.log[-2_000_000:], "logs/worker.log")
        if result is not None and result.artifacts:
            model_log.log_outputs(client, run_id, result.artifacts)
        package = result.model_package if result is not None else None
        if (
            end.state == "COMPLETE"
            and self.log_models
            and package
            and t.trial_id not in self._models
        ):
            self._models.add(t.trial_id)  # a retried end must not log a second model
            try:
                final_metrics = {k: v for k, v in final.items() if k.startswith("final_")}
                model_log.log_package(
                    client, run_id, experiment_id, result, final_metrics, t.last_step
                )
                client.set_tag(run_id, model_log.FORMAT_TAG, result.model_format)
                timeline.mark("model.logged", trial=t.number)
            except Exception as e:  # the trial's record stands even if its model cannot be saved
                client.set_tag(run_id, "sweeps.model_error", one_line(e, 500))
        client.set_terminated(run_id, status=STATUS.get(end.state, "FINISHED"))

    # ----- helpers --------------------------------------------------------------------------
    def _log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in params.items() if v is not None]
        self._submit(self.client.log_batch, run_id, params=items)

    def _set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self._submit(self.client.log_batch, run_id, tags=[RunTag(k, v) for k, v in tags.items()])


def _sweep_params(spec: Any) -> dict[str, Any]:
    """The sweep's settings as the parent run's params."""
    builtin = not spec.trainer.entrypoint
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
        "trainer.model": spec.trainer.model if builtin else "-",
        "trainer.dataset": spec.trainer.dataset if builtin else "-",
        "trainer.entrypoint": spec.trainer.entrypoint or "builtin",
        "resources.workers": spec.resources.workers,
        "resources.machine_type": spec.resources.machine_type,
        "resources.preemptible": spec.resources.preemptible,
    }
    for k, v in redact_mapping(spec.sampler.options, "sampler.options").items():
        params[f"sampler.options.{k}"] = v
    for k, v in redact_mapping(spec.pruner.options, "pruner.options").items():
        params[f"pruner.options.{k}"] = v
    return params


def _code_tags(code_dir: str | None) -> dict[str, str]:
    """Code and library versions: the git commit of the user's code when there is one."""
    tags = {"sweeps.python": platform.python_version()}
    try:
        from importlib.metadata import version

        for pkg in ("torch", "ray", "optuna", "mlflow", "sweeps"):
            tags[f"sweeps.version.{pkg}"] = version(pkg)
    except Exception:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", code_dir or os.getcwd(), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if commit.returncode == 0:
            tags["mlflow.source.git.commit"] = commit.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


class _Batch:
    """A trial's writes waiting for the writer: params and tags by key (the last value wins,
    as MLflow allows one per key in a batch), metrics in order."""

    def __init__(self) -> None:
        self.params: dict[str, str] = {}
        self.tags: dict[str, str] = {}
        self.metrics: list[Any] = []
        self.queued = False  # a write of this buffer is in the writer's queue
        self.ending = False  # the trial's end is queued, and writes what is left

    def merge(self, params: dict[str, str], metrics: list[Any], tags: dict[str, str]) -> None:
        self.params.update(params)
        self.metrics.extend(metrics)
        self.tags.update(tags)

    def empty(self) -> bool:
        return not (self.params or self.metrics or self.tags)
