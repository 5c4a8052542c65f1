"""Errors the CLI maps to exit codes.

Bad input (a spec, an argument, an unknown sweep) is the user's to fix: exit 2, one line.
A service that fails at run time (MLflow, the database, Ray) is not: exit 1, one line.
"""

from __future__ import annotations


class SweepsError(Exception):
    """Base class: the message is a single line meant for the user."""

    exit_code = 1


class SpecError(SweepsError):
    """The spec or a command-line argument is invalid."""

    exit_code = 2


class NotFoundError(SweepsError):
    """A sweep, trial or model the user named does not exist."""

    exit_code = 2


class ServiceError(SweepsError):
    """A store or cluster the sweep needs is unreachable or refused us."""

    exit_code = 1


class ProtocolError(SweepsError):
    """A driver/worker message of the wrong kind: a bug of ours, raised loudly, never waited on."""

    exit_code = 1


# What a store keeps of a trial's error: its start says what failed, its end why (a
# traceback's last line is the exception).
ERROR_CHARS = 2000


def keep_end(text: str, limit: int = ERROR_CHARS) -> str:
    """A long error as its first line and its last characters, at most `limit` in all."""
    if len(text) <= limit:
        return text
    head = text.split("\n", 1)[0][: limit // 4]
    room = limit - len(head) - len(f"\n… ({len(text)} characters cut) …\n")
    tail = text[len(text) - room :]
    return f"{head}\n… ({len(text) - len(head) - room} characters cut) …\n{tail}"


def error_summary(text: str | None, limit: int = 300) -> str:
    """One line for a terminal: an error's first line and, when it differs, its last one (the
    exception of a traceback), each shortened in its middle, never at its end."""
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    if not lines:
        return ""
    first, last = lines[0], lines[-1]
    if len(lines) == 1:
        return _middle_cut(first, limit)
    half = max(20, (limit - 3) // 2)
    return f"{_middle_cut(first, half)} … {_middle_cut(last, limit - 3 - min(len(first), half))}"


def _middle_cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(1, limit - 1)
    return text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2) :]


def one_line(e: BaseException | str | None, limit: int = 300) -> str:
    """An exception (or text) as one line of at most `limit` characters, for the terminal and
    for stores that keep a message per trial. Multi-line tracebacks never reach the user."""
    text = " ".join(str(e if e is not None else "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
