"""The driver: the one process that writes to Optuna and MLflow.

It asks Optuna for trials when a lane wants one, turns the lanes' epoch reports into
`trial.report` + `should_prune` answers, tells the final state, and hands every step to its
callbacks (MLflow tracking, progress display). Budget and failure rules are small policy
objects (`sweeps.policies`), consulted before each launch.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sweeps import paths, space
from sweeps.callbacks import DriverCallback, SweepContext, SweepSummary, TrialRecord
from sweeps.errors import ServiceError, SpecError
from sweeps.execution.lane import Lane, LaneShape, make_lane_id, start_lane
from sweeps.policies import BudgetPolicy, FailurePolicy
from sweeps.spec import Spec

log = logging.getLogger("sweeps.driver")

# A lane whose worker group Ray Train cannot keep alive is replaced this many times in a row
# before the sweep gives up (a node that cannot start workers at all must not spin forever).
MAX_LANE_DEATHS = 5
PROPAGATE = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "SWEEPS_DATA_CACHE")


@dataclass
class SweepOutcome:
    name: str
    state: str
    reason: str
    summary: SweepSummary
    parent_run_id: str | None
    experiment_id: str | None
    storage_url: str
    tracking_uri: str
    errors: list[str] = field(default_factory=list)
    tracking_blocking_s: float = 0.0


def ensure_ray(address: str | None = None, runtime_env: dict[str, Any] | None = None) -> None:
    """Start a local Ray (or connect to RAY_ADDRESS) once per process."""
    import ray

    if ray.is_initialized():
        return
    # Faster worker-group polling: Ray Train's default 2 s adds seconds to every lane's end.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    address = address or os.environ.get("RAY_ADDRESS") or None
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            runtime_env=runtime_env,
        )
    except (ConnectionError, RuntimeError) as e:
        raise ServiceError(
            f"Ray cluster {address or '(local)'}: {' '.join(str(e).split())[:300]}"
        ) from None


class Driver:
    def __init__(
        self,
        spec: Spec,
        *,
        callbacks: list[DriverCallback] | None = None,
        tracker: Any = None,
        storage_url: str | None = None,
        local_mode: bool = False,
        enqueue: list[dict[str, Any]] | None = None,
        install_signals: bool = True,
    ) -> None:
        self.spec = spec
        self.storage_url = storage_url or paths.storage_url(spec.storage)
        self.tracker = tracker
        self.callbacks: list[DriverCallback] = ([tracker] if tracker else []) + list(
            callbacks or []
        )
        self.local_mode = local_mode
        self.enqueue = enqueue or []
        self.install_signals = install_signals
        self.driver_id = uuid.uuid4().hex[:12]
        self.running: dict[tuple[str, int], TrialRecord] = {}
        self.lanes: dict[str, Lane] = {}
        self.lane_deaths = 0
        self.launching = True
        self.stop_reason = "budget reached"
        self.state = "finished"
        self.cancel = False
        self.interrupts = 0
        self.started = time.time()
        self.failures = FailurePolicy(spec.budget.max_failed_trials)
        self.budget = BudgetPolicy(spec)
        self.cost_usd = 0.0
        self.gpu_hours = 0.0
        self.lane_index = 0
        # Trials sampled for a worker-group shape no running lane has (resources searched).
        self.pending: dict[LaneShape, list[TrialRecord]] = {}

    # ----- set-up ---------------------------------------------------------------------------
    def _recover(self, study: Any, ctx: SweepContext) -> None:
        """Trials a dead driver left RUNNING: FAIL them, re-queue their params, close their runs."""
        import optuna

        from sweeps.study import stale_running

        stale = stale_running(study, self.driver_id)
        for t in list(stale):
            try:
                study._storage.set_trial_user_attr(
                    t._trial_id, "sweeps.error", "driver lost; re-queued"
                )
                study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                stale.remove(t)  # its driver finished it after all: it was not stale
                continue
            study.enqueue_trial(t.params, user_attrs={"sweeps.requeued_from": t.number})
            run_id = t.user_attrs.get("mlflow_run_id")
            if run_id and self.tracker is not None:
                self.tracker.close_stale_run(run_id)
            ctx.requeued.append(t.number)
        if stale:
            n = int(study.user_attrs.get("sweeps.requeued", 0)) + len(stale)
            study.set_user_attr("sweeps.requeued", n)

    def _signals(self) -> None:
        if not self.install_signals or threading.current_thread() is not threading.main_thread():
            return

        def handler(signum: int, frame: Any) -> None:
            self.interrupts += 1
            self.state = "interrupted"
            if self.interrupts == 1:
                self._stop_launching("interrupted: finishing running trials (Ctrl-C again cancels)")
            elif self.interrupts == 2:
                self.cancel = True
                self.stop_reason = "interrupted: running trials cancelled"
            else:
                raise KeyboardInterrupt

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def _stop_launching(self, reason: str) -> None:
        if self.launching:
            self.launching = False
            self.stop_reason = reason

    # ----- main -----------------------------------------------------------------------------
    def run(self) -> SweepOutcome:
        import optuna
        import ray

        from sweeps.execution.broker import Broker
        from sweeps.study import heartbeat, open_study, stop_requested

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        spec = self.spec
        code_dir = spec.trainer.code_dir
        if code_dir and os.path.abspath(code_dir) not in sys.path:
            sys.path.insert(0, os.path.abspath(code_dir))  # the driver unpickles user models
        study = open_study(spec, self.storage_url)
        self.study = study
        heartbeat(study, self.driver_id)
        ctx = SweepContext(
            spec=spec,
            study_name=spec.name,
            storage_url=self.storage_url,
            started_at=self.started,
            parent_run_id=study.user_attrs.get("sweeps.mlflow_parent_run_id"),
            experiment_id=study.user_attrs.get("sweeps.mlflow_experiment_id"),
        )
        self.ctx = ctx
        from tracking.mlflow_tracker import _redacted_spec_yaml

        study.set_user_attr("sweeps.spec", _redacted_spec_yaml(spec))
        self._recover(study, ctx)
        if spec.warm_start and not study.get_trials(deepcopy=False):
            from sweeps.warmstart import warm_start

            ctx.warm_notes = warm_start(study, spec, self.storage_url)
        self.budget.load(study)
        for params in self.enqueue:
            study.enqueue_trial(params, skip_if_exists=True)
        for cb in self.callbacks:
            cb.on_sweep_start(ctx)
        if ctx.parent_run_id:
            study.set_user_attr("sweeps.mlflow_parent_run_id", ctx.parent_run_id)
            study.set_user_attr("sweeps.mlflow_experiment_id", ctx.experiment_id)

        runtime_env = _runtime_env(spec)
        # Uploaded packages (a remote cluster) must be given at job level, i.e. to ray.init.
        job_env = {k: v for k, v in (runtime_env or {}).items() if k != "env_vars"} or None
        ensure_ray(runtime_env=job_env)
        if job_env:
            runtime_env = {k: v for k, v in (runtime_env or {}).items() if k == "env_vars"} or None
        self.broker = (
            ray.remote(Broker)
            .options(num_cpus=0, max_concurrency=1000)
            .remote(max_failures=spec.resources.max_failures)
        )
        self.train_config = {
            "entrypoint": spec.trainer.entrypoint,
            "code_dir": os.path.abspath(code_dir) if code_dir else None,
            "data_dir": spec.trainer.data_dir,
            "checkpoint_every": spec.execution.checkpoint_every,
            "checkpoint_min_interval_s": spec.execution.checkpoint_min_interval_s,
        }
        self.runtime_env = runtime_env
        self._signals()
        decision = self.budget.check(study, self)
        if not decision.launch:
            self._stop_launching(decision.reason)
        else:
            for _ in range(min(spec.budget.parallel, max(1, decision.remaining))):
                self._start_lane()
        last_beat = last_stop_check = time.time()
        try:
            while self.lanes:
                events = ray.get(self.broker.poll.remote(0.25))
                for ev in events:
                    self._handle(ev)
                now = time.time()
                if now - last_beat > 10:
                    heartbeat(study, self.driver_id)
                    last_beat = now
                if now - last_stop_check > 2:
                    last_stop_check = now
                    if stop_requested(study, self.started):
                        self.state = "stopped"
                        self._stop_launching("stop requested (sweeps stop)")
                if spec.budget.timeout_s and now - self.started > spec.budget.timeout_s:
                    self._stop_launching(f"timeout after {spec.budget.timeout_s:g} s")
                if spec.budget.hard and not self.cancel:
                    self._hard_limits()
                self._reap_lanes()
        except KeyboardInterrupt:
            self.state = "interrupted"
            self.stop_reason = "interrupted: driver stopped"
        finally:
            self._abandon_running()
            summary = self._summary(study)
            for cb in self.callbacks:
                try:
                    cb.on_sweep_end(ctx, summary)
                except Exception as e:  # never lose the summary to a display error
                    log.warning("callback failed at sweep end: %s", e)
            heartbeat(study, self.driver_id, alive=False)
            errors: list[str] = []
            if self.tracker is not None:
                self.tracker.flush()
                errors = list(self.tracker.errors)
            if self.state == "interrupted":
                signal.signal(signal.SIGINT, signal.default_int_handler)
        return SweepOutcome(
            name=spec.name,
            state=self.state,
            reason=self.stop_reason,
            summary=summary,
            parent_run_id=ctx.parent_run_id,
            experiment_id=ctx.experiment_id,
            storage_url=self.storage_url,
            tracking_uri=getattr(self.tracker, "uri", ""),
            errors=errors,
            tracking_blocking_s=getattr(self.tracker, "blocking_s", 0.0),
        )

    def _hard_limits(self) -> None:
        """budget.hard: once spend including running trials crosses a limit, cancel them."""
        b = self.spec.budget
        live_cost = sum(self.budget.costs)
        live_gpu = sum(self.budget.gpu_hours)
        for rec in self.running.values():
            _, cost, gpuh = self._costs(rec)
            live_cost += cost
            live_gpu += gpuh
        over = (b.max_cost_usd is not None and live_cost > b.max_cost_usd) or (
            b.max_gpu_hours is not None and live_gpu > b.max_gpu_hours
        )
        if over:
            self.cancel = True
            self.state = "stopped"
            self._stop_launching(
                f"hard budget crossed (${live_cost:.4f}, {live_gpu:.4f} GPU-h): running trials "
                "cancelled"
            )

    # ----- lanes ----------------------------------------------------------------------------
    def _start_lane(self, shape: LaneShape | None = None) -> None:
        r = self.spec.resources
        shape = shape or LaneShape(r.workers, r.cpus_per_worker, r.gpus_per_worker)
        lane = Lane(make_lane_id(self.spec.name, self.lane_index), shape)
        self.lane_index += 1
        self.lanes[lane.lane_id] = lane
        start_lane(
            lane,
            broker=self.broker,
            train_config=self.train_config,
            storage_path=paths.checkpoint_root(),
            max_restarts=max(self.spec.resources.max_failures, 0) + 1,
            keep_checkpoints=self.spec.execution.keep_checkpoints,
            runtime_env=self.runtime_env,
            local_mode=self.local_mode,
        )

    def _reap_lanes(self) -> None:
        for lane_id, lane in list(self.lanes.items()):
            if not lane.done.is_set():
                continue
            del self.lanes[lane_id]
            err = lane.error
            for key, rec in list(self.running.items()):
                if key[0] == lane_id:
                    msg = _one_line(err) if err else "lane ended while the trial ran"
                    self._end_failed(rec, f"worker group failed: {msg}")
            if err is not None:
                self.lane_deaths += 1
                log.warning("lane %s failed: %s", lane_id, _one_line(err))
                if self.lane_deaths >= MAX_LANE_DEATHS:
                    self.state = "failed"
                    self._stop_launching(f"{self.lane_deaths} lanes failed: {_one_line(err)}")
            waiting = [shape for shape, recs in self.pending.items() if recs]
            if waiting and (self.launching or not self.cancel):
                self._start_lane(waiting[0])
            elif self.launching and self.budget.check(self.study, self).launch:
                self._start_lane()

    # ----- events ---------------------------------------------------------------------------
    def _handle(self, ev: dict[str, Any]) -> None:
        kind = ev["kind"]
        key = (ev["lane"], ev["seq"])
        if kind == "next":
            self._answer(("next", *key), self._next_trial(ev["lane"], ev["seq"]))
        elif kind == "report":
            decision = self._on_report(key, ev["step"], ev["metrics"])
            self._answer(("step", *key, ev["step"]), decision)
        elif kind == "finish":
            rec = self.running.pop(key, None)
            if rec is not None:
                self._on_finish(rec, ev["result"])
        elif kind == "failed":
            rec = self.running.get(key)
            if rec is not None:
                self._end_failed(rec, ev["error"])
        elif kind == "restart":
            rec = self.running.get(key)
            if rec is not None:
                rec.restarts = ev["restarts"]
                self.study._storage.set_trial_user_attr(
                    rec.trial_id, "sweeps.restarts", rec.restarts
                )
                for cb in self.callbacks:
                    cb.on_trial_restart(self.ctx, rec)
        elif kind == "log":
            rec = self.running.get(key)
            if rec is not None:
                rec.log += ev["text"]
                self._live_log(rec, ev["text"])

    def _live_log(self, rec: TrialRecord, text: str) -> None:
        from sweeps.api import live_log_path

        path = live_log_path(self.spec.name, rec.number)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.write(text)
        except OSError as e:  # a full disk must not stop the sweep; MLflow gets the log too
            log.warning("cannot write %s: %s", path, e)

    def _answer(self, key: tuple[Any, ...], value: Any) -> None:
        self.broker.answer.remote(key, value)

    def _next_trial(self, lane_id: str, seq: int) -> dict[str, Any]:
        lane = self.lanes.get(lane_id)
        if lane is None or self.cancel:
            return {"stop": True}
        recycle = (
            1
            if self.spec.execution.mode == "isolated"
            else (self.spec.execution.recycle_after_trials)
        )
        if recycle and lane.trials_run >= recycle:
            return {"stop": True}  # the driver starts a fresh lane when this one ends
        growth = self.spec.execution.recycle_rss_growth
        if growth and lane.first_rss_mb and lane.last_rss_mb > lane.first_rss_mb * (1 + growth):
            log.warning(
                "recycling lane %s: worker memory %.0f MB (first trial %.0f MB)",
                lane_id,
                lane.last_rss_mb,
                lane.first_rss_mb,
            )
            return {"stop": True}
        waiting = self.pending.get(lane.shape)
        if waiting:  # a trial sampled earlier for this lane's shape
            return self._assign(waiting.pop(0), lane, seq)
        if not self.launching:
            return {"stop": True}
        from sweeps.study import launch_lock

        with launch_lock(self.study):
            decision = self.budget.check(self.study, self)
            if not decision.launch:
                self._stop_launching(decision.reason)
                return {"stop": True}
            trial = self.study.ask()
            # Claimed at once: a driver joining now must not take it for a crashed one's.
            trial.set_user_attr("sweeps.driver", self.driver_id)
        now = time.time()
        try:
            params = space.suggest(trial, self.spec)
        except Exception as e:
            self._tell(trial, state=_states().FAIL)
            self.state = "failed"
            self._stop_launching(f"sampler failed: {_one_line(e)}")
            return {"stop": True}
        seed = (self.spec.sampler.seed or 0) * 1_000_003 + trial.number
        t = self.spec.trainer
        config: dict[str, Any] = {
            "model": t.model,
            "dataset": t.dataset,
            "data_dir": t.data_dir,
            "epochs": t.epochs,
            "batch_size": t.batch_size,
            "val_fraction": t.val_fraction,
            "limit": t.limit,
            "compile": t.compile,
        }
        if t.entrypoint:
            config = {"epochs": t.epochs, "batch_size": t.batch_size, "data_dir": t.data_dir}
        config.update(t.params)
        config.update({k: v for k, v in params.items() if not k.startswith("resources.")})
        rec = TrialRecord(
            number=trial.number,
            trial_id=trial._trial_id,
            lane_id="",
            seq=0,
            params=params,
            config=config,
            seed=seed,
            asked_at=now,
            assigned_at=now,
        )
        rec.trial = trial
        rec.shape = self._shape(params)
        if rec.shape != lane.shape:
            # Resources are searched and this trial needs another worker-group shape: it waits
            # for a lane of its own, which replaces this one (the lane count stays `parallel`).
            self.pending.setdefault(rec.shape, []).append(rec)
            return {"stop": True}
        return self._assign(rec, lane, seq)

    def _tell(self, trial: Any, *args: Any, **kw: Any) -> None:
        from optuna.exceptions import UpdateFinishedTrialError

        """study.tell as inside optimize(): samplers that end the search themselves (the grid
        sampler once every point was tried) call study.stop(), which only works there."""
        local = self.study._thread_local
        before = getattr(local, "in_optimize_loop", False)
        local.in_optimize_loop = True
        try:
            self.study.tell(trial, *args, **kw)
        except UpdateFinishedTrialError:
            # The state is already written: a commit that went through just before the
            # database connection dropped, then retried.
            log.warning("trial %s was already finished in the storage", trial.number)
        finally:
            local.in_optimize_loop = before
        if getattr(self.study, "_stop_flag", False):
            self._stop_launching("search space exhausted (the sampler stopped the study)")

    def _shape(self, params: dict[str, Any]) -> LaneShape:
        r = self.spec.resources
        return LaneShape(
            int(params.get("resources.workers", r.workers)),
            r.cpus_per_worker,
            float(params.get("resources.gpus_per_worker", r.gpus_per_worker)),
        )

    def _assign(self, rec: TrialRecord, lane: Lane, seq: int) -> dict[str, Any]:
        """Bind a sampled trial to a lane: MLflow run, Optuna links, the worker's assignment."""
        now = time.time()
        rec.lane_id, rec.seq, rec.assigned_at = lane.lane_id, seq, now
        rec.startup_s = (now - lane.started_at) if lane.trials_run == 0 else 0.0
        trial = rec.trial
        r = self.spec.resources
        rec.config["_workers"] = rec.shape.workers
        rec.config["_gpus_per_worker"] = rec.shape.gpus_per_worker
        rec.config["_machine_type"] = rec.params.get("resources.machine_type", r.machine_type)
        requeued = trial.user_attrs.get("sweeps.requeued_from")
        if requeued is not None:
            rec.config["_requeued_from"] = requeued
        trial.set_user_attr("sweeps.lane", lane.lane_id)
        trial.set_user_attr("sweeps.seed", rec.seed)
        for cb in self.callbacks:
            run_id = cb.on_trial_start(self.ctx, rec)
            if run_id:
                rec.run_id = run_id
                trial.set_user_attr("mlflow_run_id", run_id)
        self.running[(lane.lane_id, seq)] = rec
        lane.trials_run += 1
        return {
            "trial_number": trial.number,
            "seed": rec.seed,
            "params": rec.params,
            "config": {k: v for k, v in rec.config.items() if not k.startswith("_")},
            "seq": seq,
        }

    def _on_report(self, key: tuple[str, int], step: int, metrics: dict[str, float]) -> str:
        rec = self.running.get(key)
        if rec is None:
            return "cancel"
        rec.last_step, rec.last_metrics = step, metrics
        for cb in self.callbacks:
            cb.on_epoch(self.ctx, rec, step, metrics)
        if self.cancel:
            rec.cancel_sent = True
            rec.error = rec.error or "cancelled: sweep interrupted"
            return "cancel"
        from sweeps.spec import COMPUTED_METRICS

        reported = [
            o.metric for o in self.spec.objective_list() if o.metric not in COMPUTED_METRICS
        ]
        missing = [m for m in reported if m not in metrics]
        if missing:
            rec.cancel_sent = True
            rec.error = (
                f"objective metric '{missing[0]}' is not among the reported metrics "
                f"({', '.join(sorted(metrics)) or 'none'})"
            )
            return "cancel"
        if self.spec.multi_objective or not reported:
            return "continue"  # Optuna prunes single-objective studies only
        metric = reported[0]
        trial = rec.trial
        trial.report(metrics[metric], step)
        if trial.should_prune():
            rec.prune_sent = True
            return "prune"
        return "continue"

    def _costs(self, rec: TrialRecord) -> tuple[float, float, float]:
        from tracking.costs import machine, trial_cost

        r = self.spec.resources
        seconds = time.time() - rec.assigned_at
        try:
            m = machine(rec.config.get("_machine_type", r.machine_type))
        except KeyError:
            return seconds, 0.0, 0.0
        cost, gpuh = trial_cost(
            m,
            workers=rec.config.get("_workers", r.workers),
            gpus_per_worker=rec.config.get("_gpus_per_worker", r.gpus_per_worker),
            seconds=seconds,
        )
        return seconds, cost, gpuh

    def _on_finish(self, rec: TrialRecord, result: dict[str, Any]) -> None:
        S = _states()  # noqa: N806
        lane = self.lanes.get(rec.lane_id)
        rss = float(result.get("worker_rss_mb") or 0.0)
        if lane is not None and rss:
            lane.first_rss_mb = lane.first_rss_mb or rss
            lane.last_rss_mb = rss
        tail = (result.get("log") or "")[len(rec.log) :]
        if tail:
            self._live_log(rec, tail)
        trial = rec.trial
        values: list[float] | None = None
        seconds, cost, gpuh = self._costs(rec)
        extra = self._extra(rec, result, seconds, cost, gpuh)
        if result.get("state") == "complete" and not rec.error:
            metrics = {**rec.last_metrics, **(result.get("metrics") or {})}
            computed = {
                "cost_usd": cost,
                "gpu_hours": gpuh,
                "train_seconds": extra["train_seconds"],
                "param_count": metrics.get("param_count"),
            }
            values = []
            for o in self.spec.objective_list():
                v = metrics.get(o.metric, computed.get(o.metric))
                if v is None or not math.isfinite(v):
                    rec.error = (
                        f"objective metric '{o.metric}' is not among the reported metrics "
                        f"({', '.join(sorted(metrics)) or 'none'})"
                    )
                    break
                values.append(float(v))
        if rec.error:
            self._end_failed(rec, rec.error, result, extra)
            return
        self._record_attrs(rec, extra)  # before tell: finished trials are read-only
        if values is not None:
            self._tell(trial, values if len(values) > 1 else values[0])
            state = "COMPLETE"
            if len(values) == 1:
                self.budget.record_value(values[0])
        else:
            self._tell(trial, state=S.PRUNED)
            state = "PRUNED"
        for cb in self.callbacks:
            cb.on_trial_end(self.ctx, rec, state, values, result, extra)

    def _extra(
        self, rec: TrialRecord, result: dict[str, Any], seconds: float, cost: float, gpuh: float
    ) -> dict[str, float]:
        self.cost_usd += cost
        self.gpu_hours += gpuh
        self.budget.record(cost, gpuh)
        return {
            "duration_s": seconds,
            "train_seconds": float(result.get("train_seconds", seconds)),
            "startup_seconds": rec.startup_s,
            "queued_seconds": rec.assigned_at - rec.asked_at,
            "cost_usd": cost,
            "gpu_hours": gpuh,
            "restarts": float(rec.restarts),
            **(
                {"worker_rss_mb": float(result["worker_rss_mb"])}
                if result.get("worker_rss_mb")
                else {}
            ),
        }

    def _record_attrs(self, rec: TrialRecord, extra: dict[str, float]) -> None:
        st = self.study._storage
        for k in ("duration_s", "cost_usd", "gpu_hours", "train_seconds"):
            st.set_trial_user_attr(rec.trial_id, k, round(extra[k], 6))

    def _end_failed(
        self,
        rec: TrialRecord,
        error: str,
        result: dict[str, Any] | None = None,
        extra: dict[str, float] | None = None,
    ) -> None:
        self.running.pop((rec.lane_id, rec.seq), None)
        rec.error = error
        if extra is None:
            seconds, cost, gpuh = self._costs(rec)
            extra = self._extra(rec, result or {}, seconds, cost, gpuh)
        st = self.study._storage
        st.set_trial_user_attr(rec.trial_id, "sweeps.error", error[:2000])
        self._record_attrs(rec, extra)
        try:
            self._tell(rec.trial, state=_states().FAIL)
        except Exception as e:  # already finished elsewhere: keep going
            log.warning("tell FAIL for trial %s: %s", rec.number, e)
        self.failures.record(error)
        if self.failures.exhausted():
            self.state = "failed"
            self._stop_launching(self.failures.reason())
        for cb in self.callbacks:
            cb.on_trial_end(self.ctx, rec, "FAIL", None, result or {}, extra)

    def _abandon_running(self) -> None:
        """On an abrupt stop, nothing is left RUNNING: trials in flight are FAIL, runs KILLED."""
        for rec in list(self.running.values()):
            self._end_failed(rec, f"cancelled: {self.stop_reason}")
        for recs in self.pending.values():
            for rec in recs:
                self._tell(rec.trial, state=_states().FAIL)
        self.pending.clear()

    def _summary(self, study: Any) -> SweepSummary:
        counts: dict[str, int] = {}
        best_n, best_v = None, None
        for t in study.get_trials(deepcopy=False):
            counts[t.state.name] = counts.get(t.state.name, 0) + 1
        if len(study.directions) == 1:
            try:
                b = study.best_trial
                best_n, best_v = b.number, b.value
            except ValueError:
                pass
        return SweepSummary(
            name=self.spec.name,
            state=self.state,
            reason=self.stop_reason,
            counts=counts,
            best_number=best_n,
            best_value=best_v,
            wall_s=time.time() - self.started,
            cost_usd=self.cost_usd,
            gpu_hours=self.gpu_hours,
        )


def _states() -> Any:
    import optuna

    return optuna.trial.TrialState


def _one_line(e: BaseException | str | None) -> str:
    return " ".join(str(e).split())[:300]


def _runtime_env(spec: Spec) -> dict[str, Any] | None:
    """Ship the user's code (and, on a remote cluster, our packages) to the workers."""
    env: dict[str, Any] = {}
    remote = bool(os.environ.get("RAY_ADDRESS"))
    # Workers read data and checkpoints themselves: pass on where storage is (not secrets of
    # ours: the Optuna and MLflow credentials stay with the driver).
    passed = {k: os.environ[k] for k in PROPAGATE if os.environ.get(k)}
    if spec.trainer.code_dir:
        d = os.path.abspath(spec.trainer.code_dir)
        if not os.path.isdir(d):
            raise SpecError(f"trainer.code_dir: folder not found: {spec.trainer.code_dir}")
        if remote:
            env["working_dir"] = d
        else:
            # A local cluster shares this disk: a path is enough, and unlike working_dir it
            # works when Ray was started before this spec was read (tests, notebooks).
            pp = os.pathsep.join(x for x in (d, os.environ.get("PYTHONPATH", "")) if x)
            passed["PYTHONPATH"] = pp
    if remote:
        import sweeps
        import tracking
        import trainer

        env["py_modules"] = [os.path.dirname(m.__file__) for m in (sweeps, trainer, tracking)]
    if passed:
        env["env_vars"] = passed
    return env or None
