"""Debian's headless Chromium driven over the DevTools protocol (websocket-client), and the MLflow
UI pages a sweep is compared on. Used by tests/test_mlflow_ui.py and docs/screenshot.py, so the
picture in the docs is taken by the code the test checks.

Each step waits for what it needs by polling the page's DOM (`Runtime.evaluate`), never by fixed
sleeps: on a loaded 2-core machine a page takes from 1 s to 20 s to render.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Flags for a quiet, offline headless browser: nothing is fetched from outside this machine.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
]
WIDTH, HEIGHT = 1500, 900


def css(selector: str) -> str:
    """A page script whose value is the first element matching `selector`."""
    return f"document.querySelector({json.dumps(selector)})"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_json(url: str, timeout: float, proc: subprocess.Popen) -> Any:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited early with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return json.load(r)
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"chromium's DevTools endpoint {url} did not answer in {timeout:.0f} s")


class Page:
    """One browser tab over the DevTools protocol."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.n = 0

    def call(self, method: str, **params: Any) -> dict:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expr: str) -> Any:
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page script failed: {r['exceptionDetails'].get('text')}: {expr}")
        return r.get("result", {}).get("value")

    def wait(self, expr: str, what: str, timeout: float = 45.0) -> Any:
        """Poll `expr` until it returns something truthy; fail naming `what` and the page text."""
        end = time.time() + timeout
        while time.time() < end:
            value = self.js(expr)
            if value:
                return value
            time.sleep(0.25)
        text = self.js("document.body ? document.body.innerText : ''") or ""
        raise AssertionError(f"{what}: not seen in {timeout:.0f} s; page text:\n{text[:3000]}")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete'", f"page {url} loaded")

    def click(self, element: str, what: str, timeout: float = 45.0) -> None:
        """A real mouse click (pressed and released over the element's centre), as a user's: the
        UI's menus listen for mouse events that a scripted `element.click()` never sends.
        `element` is a script whose value is the element (see `css`), waited for."""
        find = f"""(() => {{ const e = {element};
            if (!e) return null; e.scrollIntoView({{block: 'center'}});
            const r = e.getBoundingClientRect();
            return r.width && r.height ? [r.x + r.width / 2, r.y + r.height / 2] : null; }})()"""
        x, y = self.wait(find, what, timeout)
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type(self, text: str) -> None:
        self.call("Input.insertText", text=text)

    def escape(self) -> None:
        for kind in ("rawKeyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent",
                type=kind,
                key="Escape",
                code="Escape",
                windowsVirtualKeyCode=27,
            )

    def text(self) -> str:
        return self.js("document.body.innerText") or ""

    def screenshot(self, path: Path) -> None:
        # No hover or focus marks left by the last click in the picture.
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=WIDTH - 1, y=HEIGHT - 1)
        self.js("document.activeElement?.blur()")
        shot = self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))


@contextmanager
def chromium(binary: str = "chromium") -> Iterator[Page]:
    """A headless Chromium with a throwaway profile; its first tab, sized WIDTH x HEIGHT."""
    exe = shutil.which(binary)
    if exe is None:
        raise RuntimeError(
            f"{binary} not found: install Debian's `chromium` package (.ci/run does)"
        )
    profile = tempfile.mkdtemp(prefix="sweeps-chromium-")
    port = _free_port()
    proc = subprocess.Popen(
        [
            exe,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--remote-debugging-port={port}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_json(f"http://127.0.0.1:{port}/json/version", 60, proc)
        targets = _wait_json(f"http://127.0.0.1:{port}/json", 10, proc)
        page = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=HEIGHT,
            deviceScaleFactor=1,
            mobile=False,
        )
        yield page
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)


# --- The MLflow UI (3.17's hash routes, read from its bundle: mlflow/server/js/build) -----------

# The assistant's side panel opens on every page of a fresh profile and covers a third of it.
_ASSISTANT_CLOSE = css('[data-component-id="mlflow.assistant.chat_panel.close"]')
# A parent run's name cell holds the button that shows or hides its child runs.
_EXPANDER = 'button[data-component-id*="runnamecellrenderer"]'
# Every row of the runs grid (the pinned name column and the scrolled columns are separate rows).
_ROW_TEXTS = "[...document.querySelectorAll('[role=\"row\"]')].map(r => r.innerText)"


def close_assistant(page: Page) -> None:
    page.js(f"{_ASSISTANT_CLOSE}?.click()")


def open_experiment(page: Page, ui: str, experiment_id: str, parent: str) -> None:
    """The experiment's runs table, its sweep's parent run `parent` shown (collapsed)."""
    page.goto(f"{ui}/#/experiments/{experiment_id}/runs")
    page.wait(
        f"{_ROW_TEXTS}.some(t => t.split('\\n').includes({json.dumps(parent)}))",
        f"the parent run {parent!r} in the runs table",
    )
    close_assistant(page)


def run_rows(page: Page) -> list[list[str]]:
    """The runs table's rows as shown now, each as its lines of text."""
    return [t.split("\n") for t in page.js(_ROW_TEXTS)]


def wait_runs(page: Page, names: list[str], what: str) -> None:
    """Wait until the runs table shows a row for each of `names`."""
    page.wait(
        f"(() => {{ const lines = new Set({_ROW_TEXTS}.flatMap(t => t.split('\\n')));"
        f" return {json.dumps(names)}.every(n => lines.has(n)); }})()",
        what,
    )


def expand_run(page: Page, parent: str) -> None:
    """Click the expand button on `parent`'s row: the runs nested under it appear below it."""
    row = f"""[...document.querySelectorAll('[role="row"]')].find(r =>
        r.querySelector({json.dumps(_EXPANDER)}) &&
        r.innerText.split('\\n').includes({json.dumps(parent)}))"""
    page.click(f"({row})?.querySelector({json.dumps(_EXPANDER)})", f"{parent!r}'s expand button")


def compare_runs(
    page: Page, ui: str, experiment_id: str, run_ids: list[str], metric: str
) -> list[str]:
    """The compare view of `run_ids`; its parallel coordinates plot set to the runs' differing
    params (the UI's default) and `metric` alone. Returns the plot's axis titles, left to right."""
    runs, exps = json.dumps(run_ids), json.dumps([experiment_id])
    page.goto(
        f"{ui}/#/compare-runs?runs={urllib.parse.quote(runs)}&experiments={urllib.parse.quote(exps)}"
    )
    axes = "[...document.querySelectorAll('svg text.axis-title')].map(t => t.textContent)"
    page.wait(f"{axes}.length", "the parallel coordinates plot")
    close_assistant(page)
    # The plot's controls: "Parameters:" then its select, "Metrics:" then its select.
    select = """[...document.querySelectorAll('div')].find(d => d.innerText === 'Metrics:')
        ?.nextElementSibling"""
    tags = f"({select}).querySelectorAll('[class$=\"-select-selection-item\"]')"
    # The UI preselects the runs' first shared metric: take it off, so that the plot's only
    # metric axis is the objective.
    for _ in range(5):
        n = page.js(f"{tags}.length")
        if not n:
            break
        page.click(f"{tags}[0].querySelector('[class$=\"-selection-item-remove\"]')", "a tag's x")
        page.wait(f"{tags}.length < {n}", "the preselected metric taken off")
    page.click(f"({select}).querySelector('[class$=\"-select-selector\"]')", "the metrics select")
    page.type(metric)
    option = css(f'[class*="-select-item-option"][title={json.dumps(metric)}]')
    page.click(option, f"the metric {metric!r} in the metrics select's options")
    page.escape()
    return page.wait(
        f"(() => {{ const a = {axes}; return {tags}.length === 1 &&"
        f" a[a.length - 1] === {json.dumps(metric)} && a; }})()",
        f"the plot redrawn with the metric {metric!r}",
    )


def open_alias(page: Page, ui: str, model: str, alias: str) -> str:
    """The registered model's page, then the version that holds `alias` (clicked in its row).
    Returns the version page's text."""
    page.goto(f"{ui}/#/models/{urllib.parse.quote(model)}")
    # The alias tag's row: the nearest ancestor of the tag that also holds a version link.
    a = json.dumps(alias)
    # The tag reads "@ <alias>" (its space may be a no-break space).
    link = f"""(() => {{
        const tag = [...document.querySelectorAll('*')].find(e =>
            e.children.length === 0 && e.textContent.trim().replace(/^@\\W*/, '') === {a});
        for (let e = tag; e; e = e.parentElement) {{
            const a = e.querySelector('a[href*="/versions/"]');
            if (a) return a;
        }}
        return null; }})()"""
    page.click(link, f"the version of {model!r} with the alias {alias!r}")
    page.wait("document.body.innerText.includes('Source Run')", f"{model!r}'s version page")
    close_assistant(page)
    return page.text()
