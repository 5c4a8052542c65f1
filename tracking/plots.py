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


def shared_plotly_js(folder: str) -> str:
    """plotly.js, written once into `folder` (one copy per sweeps home) for every interactive
    plot to load by relative path: no CDN (self-hosted users are often offline), and not ~4.8 MB
    inside each plot's HTML (4 plots a sweep made ~19 MB; 28 tiny sweeps, 477 MB)."""
    import plotly
    from plotly.offline import get_plotlyjs

    path = os.path.join(folder, f"plotly-{plotly.__version__}.min.js")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(get_plotlyjs())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from a browser run by another user
        os.replace(tmp, path)  # whole or absent, even with two writers at once
    return path


def make_plots(
    study: Any, out_dir: str, plotly_js: str | None = None
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Write each plot as PNG into out_dir, and as interactive HTML that loads `plotly_js`
    (`shared_plotly_js`) by relative path when given; returns ({plot: {fmt: path}}, notes).

    The MLflow run gets the PNGs only: its UI shows an HTML artifact in a sandboxed frame
    where no relative path resolves, so plotly.js would have to be inside each file again.
    The interactive plots are in `sweeps report`'s folder and in `sweeps ui`'s dashboard.
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
        drawn = study
        if name == "intermediate_values":
            drawn, note = _latest_curves(study)
            notes += [note] if note else []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kinds: dict[str, str] = {}
                if plotly_js:
                    fig = getattr(vis, f"plot_{name}")(drawn, **kw)
                    kinds["html"] = os.path.join(out_dir, f"{name}.html")
                    js = os.path.relpath(plotly_js, out_dir)
                    fig.write_html(kinds["html"], include_plotlyjs=js, full_html=True)
                ax = getattr(vis_mpl, f"plot_{name}")(drawn, **kw)
                png = os.path.join(out_dir, f"{name}.png")
                _drop_long_legend(ax)
                figure = ax.figure if hasattr(ax, "figure") else ax[0].figure
                figure.set_size_inches(8, 5)
                figure.savefig(png, dpi=90, bbox_inches="tight")
                plt.close("all")
            files[name] = {**kinds, "png": png}
        except Exception as e:  # too few trials for this plot, typically
            notes.append(f"{name}: not drawn ({one_line(e, 160)})")
            plt.close("all")
    return files, notes


# The intermediate-values plot draws a line and a legend entry per trial: 12 ms a trial in
# matplotlib, 116 s at the end of a 10,000-trial sweep. It draws the latest CURVES trials.
CURVES = 100


def _latest_curves(study: Any) -> tuple[Any, str | None]:
    """The study as the intermediate-values plot reads it, and the note saying what it drew."""
    n = len(study.get_trials(deepcopy=False))
    if n <= CURVES:
        return study, None
    return _Latest(study, CURVES), f"intermediate_values: the latest {CURVES} of {n} trials"


class _Latest:
    """A study whose `get_trials` gives its latest `n` trials; all else is the study's."""

    def __init__(self, study: Any, n: int) -> None:
        self._study, self._n = study, n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def get_trials(self, deepcopy: bool = True, states: Any = None) -> list[Any]:
        return self._study.get_trials(deepcopy=deepcopy, states=states)[-self._n :]


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
        make_plots(study, out)  # the PNGs, as the sweep's end draws them
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
