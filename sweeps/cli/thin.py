"""`sweeps submit` beside a running local service, run by the service's zygote.

The zygote has Optuna, Ray and the driver's modules imported; it forks this command with this
process's stdio, working dir and environment, and this process only waits for its exit code
(signals are passed on). That saves the second or so a cold `submit` spends importing before it
can hand the sweep over. Anything else (another command, `--address`, RAY_ADDRESS, no service
here, SWEEPS_THIN_CLIENT=0, a zygote that does not answer) runs in this process as before.
"""

from __future__ import annotations

import os
import signal

THIN_ENV = "SWEEPS_THIN_CLIENT"  # "0": never hand the command to the zygote
FORKED_ENV = "SWEEPS_FORKED_CLI"  # set in the forked command: it runs, never hands over again


def delegate(argv: list[str]) -> int | None:
    """The exit code of `argv` run by the local zygote; None where it runs here."""
    if os.environ.get(THIN_ENV) == "0" or os.environ.get(FORKED_ENV):
        return None
    args = argv[1:]
    command = [a for a in args if a not in ("-v", "--verbose")][:1]
    if command != ["submit"] or os.environ.get("RAY_ADDRESS"):
        return None
    if any(a == "--address" or a.startswith("--address=") for a in args):
        return None
    from sweeps.common import names, paths

    sock = paths.zygote_socket()
    if not sock.exists():
        return None
    from sweeps.service import zygote

    os.environ[FORKED_ENV] = "1"
    forked = zygote.spawn(str(sock), names.CLI_MODULE, args)
    if forked is None:
        del os.environ[FORKED_ENV]
        return None
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: forked.send_signal(signum))
    rc = forked.wait()
    return 128 - rc if rc < 0 else rc  # killed by a signal: as a shell reports it
