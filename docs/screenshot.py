"""Screenshot of the MLflow UI for a real sweep: the sweep's run expanded to show its nested
trial runs, taken with Debian's headless Chromium by tests/browser.py, the same code that
tests/test_mlflow_ui.py checks the UI with.

    apt-get install -y chromium             # .ci/run does; websocket-client is in the dev extra
    .venv/bin/python docs/screenshot.py     # writes docs/mlflow-ui.png
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tests"))

import browser  # noqa: E402  (tests/browser.py: the test's own browser code)
from services import start_mlflow_server  # noqa: E402


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="sweeps-shot-"))
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    env.pop("MLFLOW_TRACKING_URI", None)
    subprocess.run(
        [
            str(BIN / "sweeps"),
            "run",
            str(ROOT / "conf/quickstart.yaml"),
            "--set",
            "budget.trials=8",
            "--set",
            "trainer.epochs=8",
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    from mlflow.tracking import MlflowClient

    db = f"sqlite:///{home}/mlflow.db"
    exp = MlflowClient(db).get_experiment_by_name("quickstart")
    trials = [r.info.run_name for r in MlflowClient(db).search_runs([exp.experiment_id])]
    server = start_mlflow_server(db, str(home / "artifacts"))
    try:
        with browser.chromium() as page:
            browser.open_experiment(page, server.url, exp.experiment_id, "quickstart")
            browser.expand_run(page, "quickstart")
            browser.wait_runs(page, sorted(trials), "the sweep's trial runs")
            out = ROOT / "docs" / "mlflow-ui.png"
            page.screenshot(out)
            print(f"wrote {out}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
