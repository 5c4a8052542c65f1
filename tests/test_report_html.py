"""Issue 29 item 22: the HTML report is HTML (tables, images, code as HTML; no Markdown left
literally), and plots do not carry plotly.js each: one shared copy per sweeps home, loaded by
relative path (no network). Real Optuna and MLflow (SQLite); no Ray."""

from __future__ import annotations

import os
from html.parser import HTMLParser
from pathlib import Path

import optuna
import pytest


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _study(name: str, storage: str) -> optuna.Study:
    study = optuna.create_study(study_name=name, storage=storage, direction="maximize")
    space = {
        "lr": optuna.distributions.FloatDistribution(1e-4, 1, log=True),
        "dropout": optuna.distributions.FloatDistribution(0, 0.5),
    }
    for i in range(5):
        t = study.ask(space)
        t.report(0.1 * i, 1)
        study.tell(t, 0.1 * i + t.params["dropout"])
    return study


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def test_the_html_report_is_html_and_plots_share_one_plotly(home):
    from tracking.report import write_report

    storage, uri = f"sqlite:///{home}/optuna.db", f"sqlite:///{home}/mlflow.db"
    docs = [write_report(_study(n, storage), uri, str(home / "reports" / n)) for n in "ab"]
    page = _Tags()
    page.feed(Path(docs[0]["html"]).read_text())
    tags = [t for t, _ in page.tags]
    assert "table" in tags and tags.count("pre") == 1, tags  # the best params' JSON only
    imgs = [a["src"] or "" for t, a in page.tags if t == "img"]
    assert len(imgs) == 4 and all(s.startswith("data:image/png;base64,") for s in imgs)
    text = "".join(page.text)
    for markdown in ("```", "|---", "![", "## ", "**"):
        assert markdown not in text, markdown
    # One plotly.js in the home, not one inside each plot: each plot's HTML is small and
    # loads the shared copy by a relative path that resolves.
    (js,) = (home / "assets").glob("plotly-*.min.js")
    assert js.stat().st_size > 1_000_000
    plots = list((home / "reports").glob("*/plots/*.html"))
    assert len(plots) == 8
    for html in plots:
        assert html.stat().st_size < 200_000, (html, html.stat().st_size)
        scripts = [a.get("src") for t, a in _parsed(html).tags if t == "script" and a.get("src")]
        assert scripts and not scripts[0].startswith(("http", "/")), scripts
        assert (html.parent / scripts[0]).resolve() == js.resolve()


def _parsed(path: Path) -> _Tags:
    p = _Tags()
    p.feed(path.read_text())
    return p


def test_the_plots_on_a_sweeps_mlflow_run_are_pngs_of_a_plot_size(tmp_path):
    from tracking.plots import make_plots

    study = _study("c", f"sqlite:///{tmp_path}/optuna.db")
    files, notes = make_plots(study, str(tmp_path / "plots"))
    assert set(files) == {
        "optimization_history",
        "param_importances",
        "parallel_coordinate",
        "intermediate_values",
    }, notes
    total = sum(os.path.getsize(p) for kinds in files.values() for p in kinds.values())
    assert all(set(kinds) == {"png"} for kinds in files.values()), files
    assert total < 500_000, total  # was ~19 MB: plotly.js inside each of 4 HTML files
