"""Container health checks of the team stack (stdlib only; runs in the sweeps image).

healthcheck.py http URL [TOKEN_FILE]  URL answers 2xx (with Ray's bearer token when given)
healthcheck.py raylet                 this container's raylet process is alive
"""

import os
import sys
import urllib.request


def http(url: str, token_file: str | None = None) -> None:
    req = urllib.request.Request(url)
    if token_file:
        with open(token_file) as f:
            req.add_header("Authorization", f"Bearer {f.read().strip()}")
    with urllib.request.urlopen(req, timeout=5) as r:
        if not 200 <= r.status < 300:
            sys.exit(f"{url}: HTTP {r.status}")


def raylet() -> None:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0]
        except OSError:
            continue
        if argv0.endswith(b"/raylet"):
            return
    sys.exit("no raylet process")


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"http": http, "raylet": raylet}[cmd](*args)
