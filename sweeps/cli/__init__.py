"""`sweeps` command line: parses, prints, maps errors to exit codes. The work is in sweeps.api.

Exit codes: 0 ok, 1 failure at run time, 2 bad input, 130 interrupted. Each module registers
its commands on the one app; heavy libraries load inside the commands, never at import.

Owns: the commands, and `progress` (the live progress line).
May import: everything below it; the work itself is in `sweeps.api`.
"""

from __future__ import annotations

import importlib
import os
import sys

from sweeps.cli._app import STANDALONE, app, err, quiet
from sweeps.common.errors import SweepsError, one_line

# Each module registers its commands on `app`; this order is the order of `sweeps --help`.
for _module in ("run", "extend", "service", "queue", "browse", "team", "registry", "ops"):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["app", "main"]


def main() -> None:
    from sweeps.cli.thin import delegate

    forked = delegate(sys.argv)  # `submit` beside a local service: its zygote runs it warm
    if forked is not None:
        sys.exit(forked)
    quiet("-v" in sys.argv[1:2] or "--verbose" in sys.argv[1:2])
    STANDALONE.append(True)
    try:
        app()
    except SweepsError as e:  # pragma: no cover - the group handles these
        err.print(f"error: {e}")
        sys.exit(e.exit_code)
    except Exception as e:
        # A bug of ours or a service failing in an unexpected way: one line, exit 1; the
        # traceback is there for whoever asks for it.
        if os.environ.get("SWEEPS_DEBUG"):
            raise
        err.print(
            f"error: {type(e).__name__}: {one_line(e, 500)} (SWEEPS_DEBUG=1 shows the traceback)",
            highlight=False,
            soft_wrap=True,
        )
        sys.exit(1)
