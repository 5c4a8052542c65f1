"""Replicated winners end to end (real Optuna, the session's real local Ray, MLflow on SQLite):
a 3-trial digits sweep with `evaluate: {top_k: 1, replicates: 2}` reruns its best trial twice
with new seeds on its lanes, outside the study, and records the values, mean and 95% interval
on the trial's MLflow run (replicates nested under it) and on the study; the report and the
sweep's best rank by the mean."""

from __future__ import annotations

import json

from conftest import make_spec
from mlflow.tracking import MlflowClient
from scipy import stats as sps

from sweeps import api
from sweeps.common import names
from sweeps.search.study import load_study
from tracking.mlflow_compat import PARENT_RUN_TAG
from tracking.report import collect, render_markdown


def test_replicates_of_the_best_trial_are_recorded_with_their_interval(ray_cluster, home):
    spec = make_spec(
        name="replicated",
        budget={"trials": 3, "parallel": 1},
        trainer={"epochs": 1},
        evaluate={"top_k": 1, "replicates": 2},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason
    assert not out.errors, out.errors
    study = load_study("replicated", out.storage_url)
    assert len(study.trials) == 3  # replicates are not trials: the sampler never saw them
    best = max(study.trials, key=lambda t: t.value)
    rec = study.user_attrs[names.replicates_of_trial(best.number)]
    values = rec["values"]
    assert rec["n"] == 2 and len(values) == 2 and rec["failed"] == 0
    assert all(0.0 < v <= 1.0 for v in values)
    mean = sum(values) / 2
    half = sps.t.ppf(0.975, 1) * sps.tstd(values) / 2**0.5
    assert abs(rec["mean"] - mean) < 1e-12
    assert abs(rec["ci95_low"] - (mean - half)) < 1e-9
    assert abs(rec["ci95_high"] - (mean + half)) < 1e-9
    trial_seed = int(best.user_attrs[names.SEED])
    assert len({trial_seed, *rec["seeds"]}) == 3  # new seeds, none the trial's own

    client = MlflowClient(out.tracking_uri)
    trial_run = client.get_run(best.user_attrs["mlflow_run_id"])
    m = trial_run.data.metrics
    assert m["val_accuracy_n"] == 2
    assert abs(m["val_accuracy_mean"] - mean) < 1e-9
    assert abs(m["val_accuracy_ci95_low"] - rec["ci95_low"]) < 1e-9
    assert abs(m["val_accuracy_ci95_high"] - rec["ci95_high"]) < 1e-9
    assert json.loads(trial_run.data.tags[names.REPLICATE_VALUES]) == values
    nested = client.search_runs(
        [out.experiment_id], f"tags.`{PARENT_RUN_TAG}` = '{trial_run.info.run_id}'"
    )
    assert len(nested) == 2
    tags = [r.data.tags for r in nested]
    assert sorted(t[names.REPLICATE] for t in tags) == ["1/2", "2/2"]
    assert {t[names.REPLICATE_OF] for t in tags} == {str(best.number)}
    assert {t[names.ROLE] for t in tags} == {"replicate"}
    lanes = {t.user_attrs[names.LANE] for t in study.trials}
    assert {t[names.LANE] for t in tags} <= lanes  # on the search's own lanes
    assert not any(names.TRIAL_NUMBER in t for t in tags)  # find_trial_run never finds one
    assert sorted(int(t[names.SEED]) for t in tags) == sorted(rec["seeds"])
    assert {r.info.status for r in nested} == {"FINISHED"}
    assert sorted(r.data.metrics["objective"] for r in nested) == sorted(values)

    # The sweep's best is ranked by the replicate mean, on the summary and the parent run.
    assert out.summary.best_number == best.number
    assert abs(out.summary.best_value - mean) < 1e-12
    parent = client.get_run(out.parent_run_id)
    assert abs(parent.data.metrics["best_value"] - mean) < 1e-9
    md = render_markdown(collect(study, out.tracking_uri))
    assert "## Replicated configurations" in md
    assert f"| {best.number} | {mean:.4f} ± {half:.4f} [" in md
    assert f"Trial {best.number}, val_accuracy mean of replicates = {mean:.4f}" in md
