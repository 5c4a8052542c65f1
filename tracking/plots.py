"""Sweep plots for the parent run and the report: interactive HTML (plotly) and PNG (matplotlib).

Each plot is optional: a sweep with one finished trial has no parameter importances, and that
is a note, not a failure.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import warnings
from typing import Any

from sweeps.common import names, timeline
from sweeps.common.errors import one_line
from sweeps.contracts.observers import SweepObserver, Tracker
from sweeps.contracts.records import SweepContext, SweepSummary

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
    searched = {k for t in study.get_trials(deepcopy=False) for k in t.params}
    if "param_importances" in names and len(searched) < 2:
        # One parameter has importance 1: drawing it cost the 1,000-trial sweep ~2 s at its
        # end (scikit-learn's import and a fANOVA forest over every trial).
        names.remove("param_importances")
        notes.append("param_importances: not drawn (fewer than two parameters searched)")
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
                _drop_long_legend(ax)
                figure = ax.figure if hasattr(ax, "figure") else ax[0].figure
                figure.set_size_inches(8, 5)
                figure.savefig(png, dpi=90, bbox_inches="tight")
                plt.close("all")
            files[name] = {"html": html, "png": png}
        except Exception as e:  # too few trials for this plot, typically
            notes.append(f"{name}: not drawn ({one_line(e, 160)})")
            plt.close("all")
    return files, notes


# Optuna's matplotlib plots give every trial a legend entry. Past this many the legend is
# unreadable, and "tight" saving grows the PNG around it: 1,000 trials made a 756x20296 px
# intermediate-values plot and cost 3.8 s of the sweep's end (0.3 s without it). The HTML
# plot, where a hover names the trial, keeps them all.
MAX_LEGEND_ENTRIES = 20


def _drop_long_legend(ax: Any) -> None:
    for a in ax if isinstance(ax, (list, tuple)) else getattr(ax, "flat", [ax]):
        legend = a.get_legend() if hasattr(a, "get_legend") else None
        if legend is not None and len(legend.get_texts()) > MAX_LEGEND_ENTRIES:
            legend.remove()


def warm_plotting() -> None:
    """Draw every plot once for a tiny throwaway study, into a folder then removed.

    The first drawing in a process costs ~2.7 s here (plotting imports, plotly's figure
    machinery, matplotlib's fonts) against ~0.7 s for the next: paid while the lanes start,
    it is off the end of the sweep, where the user waits for the terminal.
    """
    import shutil

    import optuna

    study = optuna.create_study(directions=["maximize"])
    for x in (0.1, 0.5, 0.9):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": x, "y": 1 - x},
                distributions={
                    "x": optuna.distributions.FloatDistribution(0, 1),
                    "y": optuna.distributions.FloatDistribution(0, 1),
                },
                value=x,
                intermediate_values={0: x / 2, 1: x},
            )
        )
    out = tempfile.mkdtemp(prefix="sweeps-plots-warm-")
    try:
        make_plots(study, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


class PlotLogger(SweepObserver):
    """At the sweep's end, its plots go to the parent run (`plots/`) through the tracker's
    ordered writer. A plotting problem is a note on the run, never a failed sweep."""

    def __init__(self, tracker: Tracker, warm_up: bool = True) -> None:
        """`warm_up`: draw once in the background while lanes start cold. Not when every lane
        came warm: then there is no idle time to fill, and the drawing libraries' import
        starved the driver's loop of the GIL (a warm sweep's trial waited ~1-2 s for its
        next assignment, its end for the summary)."""
        self.tracker = tracker
        self.warm_up = warm_up
        self._warm: threading.Thread | None = None

    # Above this budget the head start is not worth its memory: ~2 s off a sweep of minutes,
    # while the drawing libraries, loaded early, cost the 1,000-trial driver ~30 MB more peak
    # RSS. Measured again after the legend fix: 495 -> 523 MB, and no shorter wall.
    WARM_UP_MAX_TRIALS = 100

    def on_sweep_start(self, ctx: SweepContext) -> None:
        if not self.warm_up or ctx.spec.budget.trials > self.WARM_UP_MAX_TRIALS:
            return
        # A daemon thread: a sweep that ends (or fails) first only waits for it in on_sweep_end.
        self._warm = threading.Thread(target=self._warm_up, name="sweeps-plots-warm", daemon=True)
        self._warm.start()

    @staticmethod
    def _warm_up() -> None:
        with contextlib.suppress(Exception):  # only a head start: the real drawing reports
            warm_plotting()

    def on_sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None:
        if self._warm is not None:
            self._warm.join()  # pyplot is one state machine: never two drawings at once
        if not ctx.parent_run_id or ctx.study is None:
            return
        out = tempfile.mkdtemp(prefix="sweeps-plots-")
        files, notes = make_plots(ctx.study, out)
        timeline.mark("plots.done")
        paths = [p for kinds in files.values() for p in kinds.values()]
        self.tracker.log_artifacts(ctx.parent_run_id, paths, "plots", then_remove=out)
        if notes:
            self.tracker.set_tags(
                ctx.parent_run_id, {names.PLOT_NOTES: one_line("; ".join(notes), 5000)}
            )


class TimelineLogger(SweepObserver):
    """The sweep's timeline (`sweeps.common.timeline`) as `timeline.json` on its parent run."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def on_sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None:
        import json

        if ctx.parent_run_id:
            events = timeline.current().to_json()
            self.tracker.log_text(ctx.parent_run_id, json.dumps(events, indent=1), "timeline.json")
