"""The sweep's MLflow parent run, for `MLflowTracker`: created (or reopened) where the writes
happen, and its ids handed back to the driver when they are known.

In a sweep the writes happen in the writer process (`tracking.writer_proc`), so the driver
never imports MLflow before its first trial: on a warm service the import (~1-2 s of CPU) and
the store's opening were most of the time between submit and the first trial. The writer
process makes the parent run first, in order before any trial's run, and each trial's run finds
the parent's ids there; the driver learns them (`sweep_run`) for the study and the sweep's end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from sweeps.common import names, paths
from sweeps.common.redact import mask_url, redacted_spec_yaml
from sweeps.contracts.records import SweepContext, SweepSummary
from tracking.mlflow_compat import system_metrics_monitor
from tracking.runinfo import code_tags, sweep_params

EXPERIMENT_KIND, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
SWEEP_STATUS = {
    "finished": "FINISHED",
    "stopped": "FINISHED",
    "paused": "KILLED",  # MLflow has no paused status; the state tag says paused
    "interrupted": "KILLED",
    "cancelled": "KILLED",
}


def sweep_info(ctx: SweepContext) -> dict[str, Any]:
    """What the parent run is made of, as plain data (it crosses to the writer process)."""
    spec = ctx.spec
    warm: dict[str, str] = {}
    if ctx.warm_notes:
        warm = {
            names.WARM_START_FROM: ",".join(spec.warm_start.from_) if spec.warm_start else "",
            names.WARM_START_NOTES: "; ".join(ctx.warm_notes)[:5000],
        }
    return {
        "experiment": paths.experiment_name(spec.tracking.experiment, spec.name),
        "experiment_id": ctx.experiment_id,
        "parent_run_id": ctx.parent_run_id,
        "run_name": spec.name,
        "tags": {
            names.ROLE: "sweep",
            names.STUDY: ctx.study_name,
            names.STORAGE: mask_url(ctx.storage_url),
            **({names.OWNER: ctx.owner, names.TEAM: ctx.team} if ctx.owner else {}),
            **code_tags(spec.trainer.code_dir),
        },
        "params": sweep_params(spec),
        "warm_tags": warm,
        "spec_yaml": redacted_spec_yaml(spec),
        "system_metrics": spec.tracking.system_metrics,
        "log_models": spec.tracking.log_models,
    }


class SweepRun:
    """The parent-run half of `MLflowTracker` (which provides client, remote and _submit)."""

    client: Any
    remote: Any
    uri: str
    artifact_root: str | None
    log_models: bool
    system_monitor: Any
    _sweep: tuple[str, str] | None
    _pending: tuple[Any, dict[str, Any]] | None
    _submit: Callable[..., None]

    def start_sweep(self, ctx: SweepContext) -> None:
        """Create or reopen the parent run: at once in this process, or, with a writer process,
        there, with the ids coming back for `sweep_run`."""
        info = sweep_info(ctx)
        self.log_models = info["log_models"]
        if self.remote is not None and self.remote.alive():
            self._pending = (self.remote.call("_w_start_sweep", info), info)
        else:
            ctx.experiment_id, ctx.parent_run_id = self._w_start_sweep(info)

    def sweep_run(self, ctx: SweepContext, timeout: float | None) -> bool:
        """Put the parent run's ids on `ctx` once they are known (waiting up to `timeout`);
        False while the writer process is still making it. Raises if MLflow refused it."""
        if self._pending is None:
            return ctx.parent_run_id is not None
        fut, info = self._pending
        try:
            ids = fut.result(timeout)
        except FutureTimeout:
            return False
        except RuntimeError:
            if self.remote.alive():
                raise  # MLflow's own answer: the same here
            ids = self._w_start_sweep(info)  # the writer process is gone: this one makes it
        self._pending = None
        self._sweep = ids
        ctx.experiment_id, ctx.parent_run_id = ids
        return True

    def _w_start_sweep(self, info: dict[str, Any]) -> tuple[str, str]:
        """Where the writes happen: the experiment and the parent run, made or reopened."""
        client = self.client
        self.log_models = info["log_models"]
        exp = client.get_experiment_by_name(info["experiment"])
        if exp is None:
            # MLflow 3's UI opens an experiment of this kind on its runs, for model training.
            experiment_id = client.create_experiment(
                info["experiment"],
                artifact_location=self.artifact_root,
                tags={EXPERIMENT_KIND: MODEL_TRAINING},
            )
        else:
            experiment_id = exp.experiment_id
            if EXPERIMENT_KIND not in exp.tags:
                client.set_experiment_tag(experiment_id, EXPERIMENT_KIND, MODEL_TRAINING)
        run_id = info["parent_run_id"]
        if run_id:
            if client.get_run(run_id).info.status != "RUNNING":
                client.update_run(run_id, status="RUNNING")
            self._sweep = (info["experiment_id"] or experiment_id, run_id)
            return self._sweep
        run_id = client.create_run(
            experiment_id, run_name=info["run_name"], tags=info["tags"]
        ).info.run_id
        self._sweep = (experiment_id, run_id)
        self._submit(self._plain_batch, run_id, params=info["params"])
        if info["warm_tags"]:
            self._submit(self._plain_batch, run_id, tags=info["warm_tags"])
        if info["system_metrics"]:
            # Workers do not write to MLflow, so this is the driver's node only.
            self.system_monitor = system_metrics_monitor(run_id, self.uri)
            self.system_monitor.start()
        self._submit("log_text", run_id, info["spec_yaml"], "spec.yaml")
        return self._sweep

    def end_sweep(self, ctx: SweepContext, summary: SweepSummary) -> None:
        if not ctx.parent_run_id:
            return
        now = int(time.time() * 1000)
        m = {f"trials_{k.lower()}": float(v) for k, v in summary.counts.items()}
        m.update(
            wall_seconds=summary.wall_s, cost_usd=summary.cost_usd, gpu_hours=summary.gpu_hours
        )
        if summary.best_value is not None:
            m["best_value"] = summary.best_value
        pid = ctx.parent_run_id
        self._submit(self._w_stop_monitor)
        self._submit(self._plain_batch, pid, metrics=[(k, v, now, 0) for k, v in m.items()])
        tags = {names.STATE: summary.state, names.STOP_REASON: summary.reason}
        if summary.best_number is not None:
            tags[names.BEST_TRIAL] = str(summary.best_number)
        self._submit(self._plain_batch, pid, tags=tags)
        self._submit("set_terminated", pid, status=SWEEP_STATUS.get(summary.state, "FAILED"))

    def _w_stop_monitor(self) -> None:
        if self.system_monitor is not None:
            self.system_monitor.finish()
            self.system_monitor = None

    def _plain_batch(
        self,
        run_id: str,
        metrics: Any = (),
        params: dict[str, Any] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """One log_batch from plain data, on the writer: MLflow's entity classes are imported
        where the writes happen, not in the driver."""
        client = self.client  # first: it imports MLflow under its lock
        from mlflow.entities import Metric, Param, RunTag

        client.log_batch(
            run_id,
            metrics=[Metric(*m) for m in metrics],
            params=[Param(k, str(v)[:6000]) for k, v in (params or {}).items() if v is not None],
            tags=[RunTag(k, v) for k, v in (tags or {}).items()],
        )
