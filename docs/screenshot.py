"""Screenshot of the MLflow UI for a real sweep: the sweep's run expanded to show its nested
trial runs, taken with Debian's headless Chromium driven over the DevTools protocol.

    apt-get install -y chromium && .venv/bin/pip install websocket-client
    .venv/bin/python docs/screenshot.py            # writes docs/mlflow-ui.png
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 60) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(url)


class Page:
    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=60)
        self.n = 0

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                return msg.get("result", {})

    def js(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        return r.get("result", {}).get("value")


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="sweeps-shot-"))
    env = {**os.environ, "SWEEPS_HOME": str(home)}
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
    port, dbg = free_port(), free_port()
    ui = subprocess.Popen(
        [
            str(BIN / "mlflow"),
            "ui",
            "--backend-store-uri",
            f"sqlite:///{home}/mlflow.db",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    chrome = subprocess.Popen(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={home}/chrome",
            "--window-size=1500,900",
            f"--remote-debugging-port={dbg}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/health")
        wait_http(f"http://127.0.0.1:{dbg}/json/version")
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{dbg}/json"))
        page = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        from mlflow.tracking import MlflowClient

        exp = MlflowClient(f"sqlite:///{home}/mlflow.db").get_experiment_by_name("quickstart")
        page.call("Page.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            width=1500,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        page.call(
            "Page.navigate", url=f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs"
        )
        time.sleep(8)
        # Close the assistant side panel, then expand the sweep's run to show its trials.
        page.js("""(() => { for (const b of document.querySelectorAll('button')) {
            const l = (b.getAttribute('aria-label') || '').toLowerCase();
            if (l.includes('close')) b.click(); } })()""")
        time.sleep(1)
        # The sweep's run is a parent row: its name cell has the expand button.
        clicked = page.js("""(() => { const b = document.querySelector(
            'button[data-component-id*="runnamecellrenderer"]');
            if (b) { b.click(); return true; } return false; })()""")
        print("expanded the sweep's run" if clicked else "no expand button found")
        time.sleep(3)
        shot = page.call("Page.captureScreenshot", format="png")
        out = ROOT / "docs" / "mlflow-ui.png"
        out.write_bytes(base64.b64decode(shot["data"]))
        print(f"wrote {out}")
    finally:
        chrome.terminate()
        ui.terminate()


if __name__ == "__main__":
    main()
