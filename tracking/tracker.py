"""MLflow as the learning log: the driver's `Tracker`.

One parent run per sweep, one nested run per trial (tag `mlflow.parentRunId`). Every write goes
through one ordered writer (`tracking.writer`), in a sweep in a child process of the driver's
(`tracking.writer_proc`), so the driver's loop never waits on MLflow; a trial's run id comes back
through `created_runs` and is linked into Optuna.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
from typing import Any

from sweeps.common import names, paths, timeline
from sweeps.common.errors import keep_end, one_line
from sweeps.common.redact import redact_mapping
from sweeps.contracts.records import SweepContext, TrialEnd, TrialRecord
from tracking import mlflow_compat, model_log
from tracking.batches import Batch, TrialBatches
from tracking.mlflow_compat import PARENT_RUN_TAG
from tracking.replicates import replicate_run
from tracking.sweep_run import SweepRun
from tracking.writer import NotReady, OrderedWriter

STATUS = {"COMPLETE": "FINISHED", "PRUNED": "FINISHED", "FAIL": "FAILED", "KILLED": "KILLED"}


class MLflowTracker(SweepRun):
    def __init__(
        self, tracking_uri: str, artifact_root: str | None = None, process: Any = False
    ) -> None:
        """`process`: the trials' writes run in a child process of their own (see
        `tracking.writer_proc`; a callable: how it is forked) instead of this process's thread."""
        self.uri = tracking_uri
        self.artifact_root = artifact_root
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._sweep: tuple[str, str] | None = None  # (experiment, parent run) where writes happen
        self._pending: Any = None  # the parent run, being made by the writer process
        self.writer = OrderedWriter("mlflow")
        self._runs: dict[int, str] = {}  # trial_id -> run_id, written by the writer thread
        self._models: set[int] = set()  # trials whose model was logged
        self._created: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
        self._batches = TrialBatches()  # a trial's writes not written yet (tracking.batches)
        # The params each trial's run started with; a define-by-run trial's come later.
        self._started_params: dict[int, set[str]] = {}
        self.log_models = True
        self.system_monitor: Any = None
        self.remote: Any = None
        if process:
            from tracking.writer_proc import RemoteWriter

            fork = process if callable(process) else None
            self.remote = RemoteWriter(tracking_uri, artifact_root, self._linked, fork)

    @property
    def client(self) -> Any:
        """MLflow's client, made on first use: a driver whose writes go to the writer process
        does not import MLflow before its first trial (see tracking.sweep_run)."""
        with self._client_lock:
            if self._client is None:
                from mlflow.tracking import MlflowClient

                client = MlflowClient(self.uri)
                if self.uri.startswith("sqlite"):
                    mlflow_compat.fast_sqlite_store(client)
                self._client = client
            return self._client

    def _linked(self, trial_id: int, run_id: str) -> None:
        """The child made a trial's run (kept here too, for this process's writer if it dies)."""
        self._runs[trial_id] = run_id
        self._created.put((trial_id, run_id))

    def _submit(self, fn: Any, *args: Any, **kw: Any) -> None:
        """Queue a write: `fn` is a method of this tracker, a plain function, or the name of
        an MlflowClient method (resolved where the write happens)."""
        if self.remote is not None and self.remote.alive():
            if isinstance(fn, str):
                ref: tuple[str, Any] = ("client", fn)
            elif getattr(fn, "__self__", None) is self:
                ref = ("tracker", fn.__name__)
            else:
                ref = ("fn", fn)  # a plain function (shutil.rmtree): pickled by reference
            if self.remote.send(("submit", ref, args, kw)):
                return
        if isinstance(fn, str):
            self.writer.submit(self._client_call, fn, *args, **kw)
        else:
            self.writer.submit(fn, *args, **kw)

    def _client_call(self, name: str, *args: Any, **kw: Any) -> Any:
        return getattr(self.client, name)(*args, **kw)

    def _op(self, name: str, *args: Any) -> None:
        """A buffer operation (`_w_*`): where the writes happen, in the child or here."""
        remote = self.remote is not None and self.remote.alive()
        if not (remote and self.remote.send(("op", name, args, {}))):
            getattr(self, name)(*args)

    @property
    def blocking_s(self) -> float:
        extra = self.remote.blocking_s if self.remote is not None else 0.0
        return self.writer.blocking_s + extra

    def flush(self) -> list[str]:
        errors = self.remote.flush() if self.remote is not None else []
        return errors + self.writer.flush()

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
        self.writer.close()

    # ----- sweep (the parent run: tracking.sweep_run) -------------------------------------
    def find_trial_run(self, ctx: SweepContext, number: int) -> str | None:
        name = paths.experiment_name(ctx.spec.tracking.experiment, ctx.spec.name)
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            return None
        found = self.client.search_runs(
            [exp.experiment_id],
            f"tags.`{names.STUDY}` = '{ctx.study_name}'"
            f" and tags.`{names.TRIAL_NUMBER}` = '{number}'",
            max_results=1,
        )
        return found[0].info.run_id if found else None

    def close_stale_run(self, run_id: str) -> None:
        self._set_tags(run_id, {names.STATE: "KILLED"})
        self._submit("set_terminated", run_id, status="KILLED")

    def log_artifacts(
        self, run_id: str, paths: list[str], artifact_path: str, then_remove: str | None = None
    ) -> None:
        """Upload files in order; `then_remove`, a folder deleted once they are uploaded."""
        for path in paths:
            self._submit("log_artifact", run_id, path, artifact_path)
        if then_remove:
            import shutil

            self._submit(shutil.rmtree, then_remove, ignore_errors=True)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self._set_tags(run_id, tags)

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        self._submit("log_text", run_id, text, artifact_file)

    def log_run_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        items = [(k, v, now, 0) for k, v in metrics.items()]
        self._submit(self._plain_batch, run_id, metrics=items)

    # ----- trials ---------------------------------------------------------------------------
    def start_trial(self, ctx: SweepContext, t: TrialRecord) -> None:
        tags = {
            PARENT_RUN_TAG: ctx.parent_run_id,
            names.ROLE: "trial",
            names.STUDY: ctx.study_name,
            names.TRIAL_NUMBER: str(t.number),
            names.LANE: t.lane_id,
            names.STATE: "RUNNING",
            names.SEED: str(t.seed),
        }
        if t.requeued_from is not None:
            tags[names.REQUEUED_FROM] = str(t.requeued_from)
        if t.retry_of is not None:  # attempt 2, ...: its params failed before
            tags[names.ATTEMPT], tags[names.RETRY_OF] = str(t.attempt), str(t.retry_of)
        if t.resumed_from_trial is not None:
            tags[names.RESUMED_FROM_TRIAL] = str(t.resumed_from_trial)
            tags[names.RESUMED_FROM_CHECKPOINT] = str(t.resume_from)
        if t.extends is not None:  # `extend`: the run whose curve this one continues
            tags[names.EXTENDS], tags[names.EXTENDS_RUN] = str(t.extends), str(t.extends_run)
        params: dict[str, Any] = dict(redact_mapping(t.params, "params"))
        for key in ("workers", "cpus_per_worker", "gpus_per_worker", "machine_type", "preemptible"):
            params[f"resources.{key}"] = getattr(t, key)
        fixed = {
            k: v for k, v in t.config.items() if k not in t.params and k not in names.NOT_LOGGED
        }
        for k, v in redact_mapping(fixed, "trainer").items():
            params[f"fixed.{k}"] = v
        name = f"{ctx.spec.name}-trial-{t.number:04d}"
        if t.replicate is not None:  # a rerun of a trial's params, nested under its run
            tags, name = replicate_run(tags, ctx.spec.name, t.replicate)
        params = {k: str(v)[:6000] for k, v in params.items() if v is not None}
        # The run starts when the trial did (its assignment), not when the writer process,
        # importing MLflow at a sweep's start, gets to it (~10 s later on a busy 2-CPU host).
        start_ms = int(t.assigned_at * 1000) if t.assigned_at > 1e9 else None
        self._op("_w_start", t.trial_id, ctx.experiment_id, name, tags, params, start_ms)

    def _w_start(
        self,
        trial_id: int,
        experiment_id: str,
        name: str,
        tags: dict[str, str],
        params: Any,
        start_ms: int | None = None,
    ) -> None:
        # The driver may not know the parent run's ids yet: this side made the parent run.
        experiment_id = experiment_id or self._experiment()
        if not tags.get(PARENT_RUN_TAG) and self._sweep is not None:
            tags = {**tags, PARENT_RUN_TAG: self._sweep[1]}
        tags = {k: v for k, v in tags.items() if v is not None}
        self._batches.add(trial_id, params=params)
        self._started_params[trial_id] = set(params)
        self.writer.submit(self._create_run, trial_id, experiment_id, name, tags, start_ms)

    def _experiment(self) -> str:
        return self._sweep[0] if self._sweep is not None else ""

    def _w_log(self, trial_id: int, metrics: Any = None, tags: Any = None) -> None:
        if self._batches.add(trial_id, metrics=metrics, tags=tags):
            self.writer.submit(self._write_batch, trial_id)

    def _w_end(self, t: TrialRecord, end: TrialEnd, experiment_id: str) -> None:
        experiment_id = experiment_id or self._experiment()
        started = self._started_params.pop(t.trial_id, set())
        late = {k: v for k, v in t.params.items() if k not in started and v is not None}
        if late:  # suggested while it ran (sweeps.optimize): written with its end
            params = redact_mapping(late, "params")
            self._batches.add(t.trial_id, params={k: str(v)[:6000] for k, v in params.items()})
        self._batches.ending(t.trial_id)
        self.writer.submit(self._finish_trial, t, end, experiment_id)

    def _create_run(
        self,
        trial_id: int,
        experiment_id: str,
        name: str,
        tags: dict[str, str],
        start_ms: int | None = None,
    ) -> None:
        """On the writer thread; later writes about the trial find the run id in `_runs`."""
        run_id = self._runs.get(trial_id)
        if run_id is None:  # a retry after a create that went through must not make another
            run = self.client.create_run(
                experiment_id, start_time=start_ms, run_name=name, tags=tags
            )
            run_id = run.info.run_id
            self._runs[trial_id] = run_id
            self._created.put((trial_id, run_id))
        self._write_batch(trial_id)

    def _write_batch(
        self,
        trial_id: int,
        metrics: Any = (),
        tags: dict[str, str] | None = None,
        final: bool = False,
    ) -> None:
        """On the writer thread: the trial's buffered writes (plus `metrics`/`tags`) in one
        log_batch. A failed write puts them back, so the retry (or the replay) sends them."""
        client = self.client  # first: it imports MLflow under its lock
        from mlflow.entities import Metric, Param, RunTag

        run_id = self._runs.get(trial_id)
        if run_id is None:
            raise NotReady(f"the run of trial id {trial_id} is not created yet")
        b = self._batches.take(trial_id, final)
        if b is None:
            return  # the trial's end is queued: it writes this buffer with its own
        out = Batch()
        out.merge(b.params, [*b.metrics, *metrics], {**b.tags, **(tags or {})})
        if out.empty():
            return
        try:
            client.log_batch(
                run_id,
                metrics=[Metric(*m) if isinstance(m, tuple) else m for m in out.metrics],
                params=[Param(k, v) for k, v in out.params.items()],
                tags=[RunTag(k, v) for k, v in out.tags.items()],
            )
        except BaseException:
            self._batches.restore(trial_id, b)  # the caller's own extras come with its retry
            raise

    def created_runs(self) -> list[tuple[int, str]]:
        out = []
        while not self._created.empty():
            out.append(self._created.get_nowait())
        return out

    def log_epoch(
        self, ctx: SweepContext, t: TrialRecord, step: int, metrics: dict[str, float]
    ) -> None:
        now = int(time.time() * 1000)  # (key, value, timestamp, step): a Metric on the writer
        items = [(k, float(v), now, step) for k, v in metrics.items()]
        self._op("_w_log", t.trial_id, items)

    def log_metrics(
        self, ctx: SweepContext, t: TrialRecord, step: int, metrics: dict[str, float]
    ) -> None:
        self.log_epoch(ctx, t, step, metrics)

    def log_bytes(self, ctx: SweepContext, t: TrialRecord, name: str, data: bytes) -> None:
        self._submit(self._for_trial, t.trial_id, "_write_artifact", name, data)

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
        if isinstance(fn, str):  # one of ours, by name (what can cross to a child process)
            fn = getattr(self, fn)
        fn(run_id, *args, **kw)

    def trial_restarted(self, ctx: SweepContext, t: TrialRecord) -> None:
        note = f"worker group restarted ({t.restarts}x); resumed from the last checkpoint"
        tags = {names.RESTARTS: str(t.restarts), names.PROBLEMS: note}
        self._op("_w_log", t.trial_id, None, tags)

    def end_trial(self, ctx: SweepContext, t: TrialRecord, end: TrialEnd) -> None:
        # The Optuna trial stays here: what crosses to the writer is plain data.
        self._op("_w_end", dataclasses.replace(t, trial=None), end, ctx.experiment_id)

    def _finish_trial(self, t: TrialRecord, end: TrialEnd, experiment_id: str) -> None:
        """On the writer thread: final metrics, tags, dataset, log, model, then close the run."""
        run_id, result, client = self._runs.get(t.trial_id), end.result, self.client
        from mlflow.entities import Metric  # after self.client: it imports MLflow under a lock

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
        state = "KILLED" if end.killed else end.state  # as MLflow's run status says
        tags = {names.STATE: state, names.RESTARTS: str(t.restarts)}
        if t.error:
            tags[names.ERROR] = keep_end(t.error, 5000)
        if t.failure_cause and not end.killed:
            tags[names.FAILURE_CAUSE] = t.failure_cause
        if result is not None and result.dataset:
            tags[names.DATASET_DIGEST] = str(result.dataset.get("digest"))
        for k, v in (result.hardware if result else {}).items():
            tags[names.hw(k)] = str(v)
        tags.update(result.links if result else {})
        if result is not None and result.model_error:
            tags[names.MODEL_ERROR] = keep_end(result.model_error, 5000)
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
                client.set_tag(run_id, names.MODEL_ERROR, one_line(e, 500))
        client.set_terminated(run_id, status=STATUS.get(state, "FINISHED"))

    # ----- helpers --------------------------------------------------------------------------
    def _set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self._submit(self._plain_batch, run_id, tags=tags)
