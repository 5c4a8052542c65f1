"""The README's and docs' code blocks as a reader copies them: tests/test_readme.py checks every
command line in them, tests/test_registry.py runs docs/REGISTRY.md's serve recipe for real."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
# `. .venv/bin/activate` in a block, or named in the text as the step to take first
ACTIVATE = re.compile(r"(?:^|[\s`(])(?:\.|source) \.venv/bin/activate\b", re.M)
SEPARATORS = {"&&", "||", ";", "|", "&"}
REDIRECTS = {">", ">>", "<", "2>", "&>"}


def blocks(doc: Path, lang: str | None = None) -> list[str]:
    return [body for kind, body in BLOCK.findall(doc.read_text()) if lang in (None, kind)]


def block_with(doc: Path, needle: str) -> str:
    """The one bash block of `doc` that holds `needle`."""
    found = [b for b in blocks(doc, "bash") if needle in b]
    assert len(found) == 1, f"{doc.name}: {len(found)} bash blocks hold {needle!r}"
    return found[0]


def command_lines(doc: Path) -> list[tuple[int, str]]:
    """(offset in the doc, line) of each command a reader types: every line of a bash/sh block,
    and `$ `-prefixed lines of other blocks (the rest there is output)."""
    found = []
    for m in BLOCK.finditer(doc.read_text()):
        kind, body = m.group(1), m.group(2)
        for line in body.replace("\\\n", " ").splitlines():
            if kind not in ("bash", "sh") and not line.startswith("$ "):
                continue
            line = line.removeprefix("$ ").strip()
            if line and not line.startswith("#"):
                found.append((m.start(), line))
    return found


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at && || ; | &), without leading VAR=value
    assignments, redirections or comments."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out: list[list[str]] = [[]]
    skip = False
    for tok in lex:
        if tok in SEPARATORS:
            out.append([])
        elif tok in REDIRECTS:
            skip = True
        elif skip:
            skip = False
        elif out[-1] or not re.match(r"^[A-Za-z_]\w*=", tok):
            out[-1].append(tok)
    return [c for c in out if c]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reader_env() -> dict[str, str]:
    """A new shell's environment: no venv on PATH, no store variables of the test's."""
    venv_bins = {str(Path(sys.prefix) / "bin"), str(ROOT / ".venv" / "bin")}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "SWEEPS_HOME", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    }
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if p not in venv_bins
    )
    return env


def run_serve_recipe(store: Path, work: Path) -> tuple[np.ndarray, np.ndarray]:
    """docs/REGISTRY.md's two serve blocks, run as written in a project folder whose `.sweeps`
    is `store` (only the port differs: a free one). Returns (the request's inputs, the served
    predictions); checks what the doc says of a wrongly shaped request and of the stray db."""
    doc = ROOT / "docs" / "REGISTRY.md"
    serve = block_with(doc, "mlflow models serve")
    request = block_with(doc, "/invocations")
    port = str(_free_port())
    assert "5001" in serve and "5001" in request, (serve, request)
    serve, request = serve.replace("5001", port), request.replace("5001", port)
    work.mkdir(parents=True, exist_ok=True)
    (work / ".venv").symlink_to(ROOT / ".venv")
    (work / ".sweeps").symlink_to(store)
    env = _reader_env()
    log = work / "serve.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            ["bash", "-e", "-c", serve],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its uvicorn child goes with it below
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 150
        while True:
            assert server.poll() is None, f"the server exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"no /ping answer in 150 s: {log.read_text()}"
            try:
                urllib.request.urlopen(f"{url}/ping", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        r = subprocess.run(
            ["bash", "-e", "-c", request],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        served = np.asarray(json.loads(r.stdout)["predictions"])
        x = np.asarray(json.loads((work / "request.json").read_text())["inputs"], np.float32)
        # another shape: HTTP 400 whose message ends as the doc quotes it
        flat = json.dumps({"inputs": x.reshape(len(x), -1).tolist()}).encode()
        post = urllib.request.Request(
            f"{url}/invocations", flat, {"Content-Type": "application/json"}
        )
        try:
            urllib.request.urlopen(post, timeout=30)
            raise AssertionError("a (5, 64) request was answered")
        except urllib.error.HTTPError as e:
            assert e.code == 400, e.code
            message = json.loads(e.read())["message"]
        tail = "does not match expected shape (-1, 1, 8, 8)."
        assert message.endswith(f"Shape of input (5, 64) {tail}"), message[-200:]
        assert " ".join(f"Shape of input (5, 64) {tail}".split()) in " ".join(
            doc.read_text().split()
        )
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert not (work / "mlflow.db").exists(), "the recipe left a stray ./mlflow.db"
    return x, served
