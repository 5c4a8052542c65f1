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


def one_line(e: BaseException | str | None, limit: int = 300) -> str:
    """An exception (or text) as one line of at most `limit` characters, for the terminal and
    for stores that keep a message per trial. Multi-line tracebacks never reach the user."""
    text = " ".join(str(e if e is not None else "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
