"""Richer logging from training code: `sweeps.log`, `sweeps.log_artifact`, `sweeps.log_figure`.

Workers never write to MLflow: these send what rank 0 logs to the driver through the broker, and
the driver (the single writer) puts it into the trial's run. Other ranks' calls are ignored, so
code that calls them on every rank logs once. Limits keep a trial from flooding the driver:
an artifact is at most MAX_ARTIFACT_BYTES, a trial's artifacts together MAX_TRIAL_BYTES;
going over raises ValueError in the training code, which says which limit it hit.
"""

from __future__ import annotations

import io
import os
from typing import Any

MAX_ARTIFACT_BYTES = 50 * 2**20
MAX_TRIAL_BYTES = 200 * 2**20


def _ctx() -> Any:
    from sweeps.worker.runtime import context

    return context()


def log(metrics: dict[str, float], step: int | None = None) -> None:
    """Metrics into the trial's run at `step` (default: the current epoch). Unlike `report`,
    they are not seen by the pruner: use it for extra curves (per batch, per layer)."""
    ctx = _ctx()
    if ctx.rank != 0 or ctx.broker is None:
        return
    clean = {str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float)}
    ctx.broker.user_log.remote(ctx.lane_id, ctx.seq, ctx.step if step is None else int(step), clean)


def log_artifact(path: str, name: str | None = None) -> None:
    """A file into the trial's run, as `name` (default: its file name)."""
    ctx = _ctx()
    if ctx.rank != 0 or ctx.broker is None:
        return
    size = os.path.getsize(path)
    _account(ctx, size, path)
    with open(path, "rb") as f:
        data = f.read()
    _send(ctx, name or os.path.basename(path), data)


def log_figure(fig: Any, name: str) -> None:
    """A matplotlib figure (PNG) or a plotly figure (HTML) into the trial's run as `name`."""
    ctx = _ctx()
    if ctx.rank != 0 or ctx.broker is None:
        return
    buf = io.BytesIO()
    if hasattr(fig, "savefig"):
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        name = name if name.endswith(".png") else f"{name}.png"
    elif hasattr(fig, "to_html"):
        buf.write(fig.to_html(include_plotlyjs=True, full_html=True).encode())
        name = name if name.endswith(".html") else f"{name}.html"
    else:
        raise TypeError(f"log_figure: a matplotlib or plotly figure, not {type(fig).__name__}")
    data = buf.getvalue()
    _account(ctx, len(data), name)
    _send(ctx, f"figures/{name}", data)


def _account(ctx: Any, size: int, what: str) -> None:
    if size > MAX_ARTIFACT_BYTES:
        raise ValueError(
            f"log_artifact: {what} is {size / 2**20:.1f} MB, over the {MAX_ARTIFACT_BYTES >> 20} MB"
            " limit of one artifact; write large outputs to the trial dir (program mode) or to "
            "your own storage and log their path"
        )
    used = ctx.artifact_bytes + size
    if used > MAX_TRIAL_BYTES:
        raise ValueError(
            f"log_artifact: this trial's artifacts would reach {used / 2**20:.1f} MB, over the "
            f"{MAX_TRIAL_BYTES >> 20} MB limit of a trial"
        )
    ctx.artifact_bytes = used


def _send(ctx: Any, name: str, data: bytes) -> None:
    import ray

    # Waited for: the bytes must reach the broker before the trial's end is reported.
    ray.get(ctx.broker.user_artifact.remote(ctx.lane_id, ctx.seq, name, data))
