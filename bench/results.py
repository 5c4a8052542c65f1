"""Keep bench/RESULTS.md as one section per bench, replaced by the bench's latest run."""

from __future__ import annotations

import re
from pathlib import Path

HEADER = "# Benchmark results\n\nEach section is the latest output of the named script.\n"


def write_section(path: str, name: str, text: str) -> None:
    p = Path(path)
    body = p.read_text() if p.exists() else HEADER
    block = f"<!-- {name}:start -->\n{text.rstrip()}\n<!-- {name}:end -->"
    pattern = re.compile(
        rf"<!-- {re.escape(name)}:start -->.*?<!-- {re.escape(name)}:end -->", re.S
    )
    body = (
        pattern.sub(lambda _: block, body)
        if pattern.search(body)
        else (body.rstrip() + "\n\n" + block + "\n")
    )
    p.write_text(body)


def publish(text: str, out: str | None, name: str) -> None:
    """A bench's table: printed, and (with --out) kept as its section of RESULTS.md."""
    print(text)
    if out:
        write_section(out, name, text)
