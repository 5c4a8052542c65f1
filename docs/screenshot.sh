#!/usr/bin/env bash
# Screenshot of the MLflow UI's experiment page for a real quickstart-style sweep (nested trial
# runs under the sweep's run), with Debian's headless Chromium: docs/mlflow-ui.png for the README.
#   apt-get install -y chromium && bash docs/screenshot.sh
set -euo pipefail
cd "$(dirname "$0")/.."
home=$(mktemp -d)
export SWEEPS_HOME=$home
.venv/bin/sweeps run conf/quickstart.yaml --set budget.trials=8 --set trainer.epochs=8 >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
.venv/bin/mlflow ui --backend-store-uri "sqlite:///$home/mlflow.db" --host 127.0.0.1 --port "$port" \
  >"$home/ui.log" 2>&1 &
ui=$!
trap 'kill $ui 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
exp=$(.venv/bin/python -c "
from mlflow.tracking import MlflowClient
print(MlflowClient('sqlite:///$home/mlflow.db').get_experiment_by_name('quickstart').experiment_id)")
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$home/chrome" --window-size=1600,1000 --virtual-time-budget=20000 \
  --screenshot=docs/mlflow-ui.png "http://127.0.0.1:$port/#/experiments/$exp/runs"
echo "wrote docs/mlflow-ui.png"
