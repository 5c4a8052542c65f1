"""budget.stop_when end to end (real Optuna, the session's real local Ray, MLflow on SQLite): a
sweep whose trials cannot improve (one configuration, a deterministic curve) ends well before
its budget of 30, `finished (converged: …)`, with the evidence on the study, the MLflow parent
run, the report and `show`."""

from __future__ import annotations

import json

from conftest import byo
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from sweeps import api
from sweeps.cli import app
from sweeps.common import names
from sweeps.search.study import load_study
from tracking.report import collect, render_markdown


def test_a_sweep_that_stops_improving_ends_converged_before_its_budget(ray_cluster, home):
    spec = byo(
        "curve",
        name="flat",
        search_space={"lr": {"type": "categorical", "choices": [0.05]}},
        budget={"trials": 30, "parallel": 1, "stop_when": {"no_improvement_trials": 5}},
        trainer={"epochs": 1},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason
    assert out.reason.startswith(
        "converged: no improvement over the best in the last 5 trials; best "
    ), out.reason
    assert out.reason.endswith(" at trial 0")
    doc = api.show("flat")
    complete = doc["counts"].get("COMPLETE", 0)
    # The first trial sets the best, five more do not beat it; a sixth may have been asked for
    # before the fifth's end was told (at most one with parallel 1). Nothing else runs.
    assert 6 <= complete <= 7 and sum(doc["counts"].values()) == complete, doc["counts"]
    assert doc["state"] == "finished" and doc["stop_reason"] == out.reason
    assert doc["converged"]["rule"] == "no_improvement_trials"
    assert doc["converged"]["trials_without_improvement"] == 5
    assert doc["converged"]["best_trial"] == 0
    # The MLflow parent run: the reason and the evidence.
    parent = MlflowClient(out.tracking_uri).get_run(out.parent_run_id)
    assert parent.data.tags[names.STOP_REASON] == out.reason
    assert json.loads(parent.data.tags[names.CONVERGED]) == doc["converged"]
    # The report and `show`.
    md = render_markdown(collect(load_study("flat", out.storage_url), out.tracking_uri))
    assert f"- Stopped because: {out.reason}" in md
    assert '- Convergence evidence: `{"best_trial": 0' in md
    shown = CliRunner().invoke(app, ["show", "flat"])
    assert shown.exit_code == 0 and f"ended: {out.reason}" in shown.output, shown.output
