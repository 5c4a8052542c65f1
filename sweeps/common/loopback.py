"""Store addresses a submitter's shell passes to a driver that runs in another network.

A URL whose host is the submitter's loopback (`127.0.0.1`, `localhost`, `::1`) may name a
different machine where the driver runs: on the team stack the host's `http://127.0.0.1:5000`
is a published port, while the driver on `ray-head` reaches MLflow as `http://mlflow:5000`,
which that container's environment says. So where the driver's own environment already names a
store that is not a loopback address and the submitted value is one, the driver keeps its own
and says so in its log. Anywhere else (the same machine, a node with no such setting) the
submitted value is used, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from urllib.parse import urlsplit

from sweeps.common.redact import mask_url

LOOPBACK = ("localhost", "::1")


def is_loopback(value: str) -> bool:
    """Pure: whether `value` is a URL whose host is a loopback address."""
    try:
        host = urlsplit(value).hostname
    except ValueError:
        return False
    return host is not None and (host in LOOPBACK or host.startswith("127."))


def merge(
    submitted: Mapping[str, str], here: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """Pure: the submitted settings to apply where `here` is this process's environment, and
    the names kept from `here` (a submitted loopback URL where `here` has a routable one)."""
    kept = sorted(
        k
        for k, v in submitted.items()
        if is_loopback(v) and here.get(k) and not is_loopback(here[k])
    )
    return {k: v for k, v in submitted.items() if k not in kept}, kept


def note(kept: list[str], here: Mapping[str, str]) -> str | None:
    """The driver log's line for what it kept of its own, or None."""
    if not kept:
        return None
    said = ", ".join(f"{k}={mask_url(here[k])}" for k in kept)
    return f"the submitter's loopback address is not this node's: using {said}"


def apply(
    submitted: Mapping[str, str], environ: MutableMapping[str, str], say: Callable[[str], None]
) -> None:
    """Put the submitted settings into `environ` (`merge`), and `say` what was kept."""
    env, kept = merge(submitted, environ)
    environ.update(env)
    if line := note(kept, environ):
        say(line)
