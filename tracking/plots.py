"""Sweep plots for the parent run and the report: interactive HTML (plotly) and PNG (matplotlib).

Each plot is optional: a sweep with one finished trial has no parameter importances, and that
is a note, not a failure.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

PLOTS = ("optimization_history", "param_importances", "parallel_coordinate", "intermediate_values")


def make_plots(study: Any, out_dir: str) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Write each plot as HTML and PNG into out_dir; returns ({plot: {fmt: path}}, notes).

    The HTML embeds plotly.js (no CDN): self-hosted users are often offline.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization as vis
    import optuna.visualization.matplotlib as vis_mpl

    os.makedirs(out_dir, exist_ok=True)
    names = list(PLOTS)
    if len(study.directions) > 1:
        names = ["pareto_front"]
    files: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    for name in names:
        kw: dict[str, Any] = {}
        if name == "pareto_front":
            kw = {}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fig = getattr(vis, f"plot_{name}")(study, **kw)
                html = os.path.join(out_dir, f"{name}.html")
                fig.write_html(html, include_plotlyjs=True, full_html=True)
                ax = getattr(vis_mpl, f"plot_{name}")(study, **kw)
                png = os.path.join(out_dir, f"{name}.png")
                figure = ax.figure if hasattr(ax, "figure") else ax[0].figure
                figure.set_size_inches(8, 5)
                figure.savefig(png, dpi=90, bbox_inches="tight")
                plt.close("all")
            files[name] = {"html": html, "png": png}
        except Exception as e:  # too few trials for this plot, typically
            notes.append(f"{name}: not drawn ({' '.join(str(e).split())[:160]})")
            plt.close("all")
    return files, notes
