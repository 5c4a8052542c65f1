"""`promote --if-better` with replicates (Welch's t-test) and the locked test split, end to end:
real Optuna, the session's Ray, real MLflow; two tiny sweeps of 1-epoch digits trials.

The replicate values are built here, not by `evaluate`: every trial of a sweep has the same
params (a one-choice search space) and its own seed, so each group of four trials is four real
seed replicates; the test logs a group's values on its first trial's run under the tag that
`evaluate` writes (`names.REPLICATE_VALUES`)."""

from __future__ import annotations

import json

import pytest
from conftest import make_spec
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from sweeps import api
from sweeps.cli import app
from sweeps.common import names


def _sweep(name: str, lr: float, trials: int, seed: int) -> list[dict]:
    """Every trial with the same params (a one-choice search space), each with its own seed."""
    spec = make_spec(
        name=name,
        search_space={"lr": {"type": "categorical", "choices": [lr]}},
        sampler={"name": "tpe", "seed": seed},
        budget={"trials": trials, "parallel": 1},
        trainer={"model": "mlp", "dataset": "digits", "epochs": 1},
        data={"test_fraction": 0.2},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason
    return sorted(api.show(name)["trials"], key=lambda t: t["number"])


@pytest.mark.usefixtures("ray_cluster")
def test_gate_refuses_noise_accepts_a_real_gain_and_scores_the_locked_test_split(home):
    slow = _sweep("gate-a", 0.0003, 8, 1)  # trials 0-3: the champion; 4-7: its twin
    fast = _sweep("gate-b", 0.003, 4, 2)  # at 1 epoch, lr 0.003 is far better on digits
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    trials = slow + fast
    values = [t["value"] for t in trials]
    for first in (0, 4, 8):  # three groups of four replicates: same params, new seeds
        sample = values[first : first + 4]
        client.set_tag(trials[first]["mlflow_run_id"], names.REPLICATE_VALUES, json.dumps(sample))

    champ = api.promote("gate-a", "gated", trial=0, if_better=True)
    assert champ["moved"] and champ["previous_version"] is None
    # a challenger with the champion's params: its gain (if any) is seed noise
    noise = api.promote("gate-a", "gated", trial=4, if_better=True)
    assert not noise["moved"], (noise, values)
    assert noise["gate"]["method"] == "welch" and noise["gate"]["p_value"] >= 0.05, noise["gate"]
    r = CliRunner().invoke(
        app, ["promote", "gate-b", "--model", "gated", "--trial", "0", "--if-better"]
    )
    assert r.exit_code == 0, r.output
    assert "champion -> v3" in r.stdout and "Welch's t-test, n=4 vs 4" in r.stdout, (
        r.stdout,
        values,
    )
    assert "test split (digits, split seed 0, test_fraction 0.2" in r.stdout, r.stdout
    mv = client.get_model_version("gated", "3")
    assert float(mv.tags[names.GATE_P_VALUE]) < 0.05 and mv.tags[names.GATE_TEST] == "welch"
    assert json.loads(mv.tags[names.SAMPLES]) == values[8:12]
    assert json.loads(mv.tags[names.HOLDER_SAMPLES]) == values[0:4]
    refused = client.get_model_version("gated", "2")
    assert float(refused.tags[names.GATE_P_VALUE]) >= 0.05

    # every version was scored on the locked test split, once, at promote time
    from trainer.data import load_test_split

    x, _, digest = load_test_split("digits", None, 0.2, 0, None, 0.2)
    metrics = json.loads(mv.tags[names.TEST_METRICS])
    assert mv.tags[names.TEST_DIGEST] == digest and metrics["test_rows"] == len(x) == 359
    assert 0.5 < metrics["test_accuracy"] <= 1 and metrics["test_loss"] > 0
    again = api.promote("gate-b", "gated", trial=0, if_better=True)
    assert again["existing"] and again["test"] is None  # not scored a second time
    # the search never read those rows: no trial logged the test split, and each trained and
    # validated on the other 1438
    for i in range(12):
        run = client.get_run(trials[i]["mlflow_run_id"])  # both sweeps' trials
        logged = {d.dataset.digest: d for d in run.inputs.dataset_inputs}
        assert len(logged) == 2 and digest not in logged, logged
        assert run.data.tags[names.DATASET_DIGEST] != digest
        rows = sum(json.loads(d.dataset.profile)["num_rows"] for d in logged.values())
        assert rows == 1797 - 359

    r = CliRunner().invoke(app, ["promote", "gate-a", "--model", "gated", "--alpha", "2"])
    assert r.exit_code == 2 and "--alpha" in r.output
