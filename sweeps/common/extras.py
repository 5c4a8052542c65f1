"""How to install one of this project's extras where it is missing.

`pip install 'sweeps[x]'` would fetch another project: `sweeps` on the package index is not this
one. The hint names what this installation came from (pip's `direct_url.json`, PEP 610): the
checkout it was installed from, editable or not, with the pip of the running Python.
"""

from __future__ import annotations

import json
import shlex
import sys
from importlib import metadata
from urllib.parse import unquote, urlparse

DIST = "sweeps"


def install_hint(extra: str) -> str:
    """`pip install` for the extra `extra`, e.g.
    `/work/main/.venv/bin/python -m pip install -e '/work/main[aiplatform]'`; where this
    installation's source is unknown, its packages by name (from the extra's requirements)."""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    # A checkout's own `sweeps.egg-info` (on sys.path when run from it) says nothing of how it
    # was installed: the dist-info pip wrote does.
    dists = list(metadata.distributions(name=DIST))
    for d in dists:
        source = _source(d)
        if source is not None:
            folder, editable = source
            return f"{pip} {'-e ' if editable else ''}{shlex.quote(f'{folder}[{extra}]')}"
    dist = dists[0] if dists else None
    wanted = _requirements(dist, extra)
    if wanted:
        return f"{pip} {' '.join(shlex.quote(r) for r in wanted)}"
    return f"install this project's '{extra}' extra from its checkout: pip install -e '.[{extra}]'"


def _source(dist: metadata.Distribution) -> tuple[str, bool] | None:
    """(local folder, editable) this distribution was installed from, if it was a folder."""
    text = dist.read_text("direct_url.json")
    try:
        info = json.loads(text or "")
    except ValueError:
        return None
    url = urlparse(str(info.get("url", "")))
    if url.scheme != "file" or "dir_info" not in info:
        return None
    return unquote(url.path), bool(info["dir_info"].get("editable"))


def _requirements(dist: metadata.Distribution | None, extra: str) -> list[str]:
    """The requirements the extra adds, as its metadata lists them."""
    marker = f'extra == "{extra}"'
    out = []
    for req in (dist.requires or []) if dist is not None else []:
        name, _, cond = req.partition(";")
        if cond.strip() == marker:
            out.append(name.strip())
    return out
