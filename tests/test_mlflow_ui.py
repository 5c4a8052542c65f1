"""The MLflow UI is where a sweep's trials are compared: a real `mlflow server` holding a real
3-trial sweep and its promoted champion, opened in Debian's headless Chromium (tests/browser.py,
the code that also takes docs/mlflow-ui.png)."""

from __future__ import annotations

import struct

import browser
import pytest
from conftest import make_spec
from mlflow.tracking import MlflowClient
from services import start_mlflow_server
from typer.testing import CliRunner

from sweeps import api
from sweeps.cli import app

SWEEP, MODEL, METRIC = "ui-tour", "ui-tour-mlp", "val_accuracy"


@pytest.mark.usefixtures("ray_cluster")
def test_the_ui_shows_the_sweep_its_trials_their_comparison_and_the_champion(
    home, tmp_path, monkeypatch
):
    server = start_mlflow_server(f"sqlite:///{tmp_path}/server.db", str(tmp_path / "art"))
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
        spec = make_spec(
            name=SWEEP,
            objective={"metric": METRIC, "direction": "maximize"},
            search_space={
                "lr": {"type": "float", "low": 0.001, "high": 0.02, "log": True},
                "hidden": {"type": "int", "low": 32, "high": 128, "step": 32},
            },
            budget={"trials": 3, "parallel": 1},
            trainer={"epochs": 1},
        )
        out = api.run(spec, install_signals=False)
        assert out.state == "finished", out.reason
        r = CliRunner().invoke(app, ["promote", SWEEP, "--model", MODEL])
        assert r.exit_code == 0, r.output
        client = MlflowClient(server.url)
        exp = out.experiment_id
        trials = client.search_runs([exp], f"tags.mlflow.parentRunId = '{out.parent_run_id}'")
        names = {t.info.run_id: t.info.run_name for t in trials}
        assert len(names) == 3
        champion = client.get_model_version_by_alias(MODEL, "champion")

        with browser.chromium() as page:
            browser.open_experiment(page, server.url, exp, SWEEP)
            # The trials are nested: hidden under their sweep's run until it is expanded.
            shown = {line for row in browser.run_rows(page) for line in row}
            assert SWEEP in shown and not shown & set(names.values()), shown
            browser.expand_run(page, SWEEP)
            browser.wait_runs(page, sorted(names.values()), "the 3 nested trial runs")
            shown = {line for row in browser.run_rows(page) for line in row}
            assert set(names.values()) <= shown, shown
            shot = tmp_path / "ui.png"
            page.screenshot(shot)
            assert struct.unpack(">II", shot.read_bytes()[16:24]) == (browser.WIDTH, browser.HEIGHT)

            axes = browser.compare_runs(page, server.url, exp, list(names), METRIC)
            assert axes == ["hidden", "lr", METRIC], axes  # the differing params, the objective
            for name in names.values():  # the compare view's run details name each trial
                assert name in page.text()

            text = browser.open_alias(page, server.url, MODEL, "champion")
            assert f"Version {champion.version}" in text
            source = text.split("Source Run", 1)[1].split("Aliases", 1)[0]
            assert names[champion.run_id] in source, source
            assert "champion" in text.split("Aliases", 1)[1].split("Stage", 1)[0]
    finally:
        server.stop()
