"""What keeps a 10,000-trial sweep's driver, `show` and `ls` from slowing with the trial count
(issue 30 item 3), checked on small studies by what they read and write. No Ray, not timed."""

from __future__ import annotations

import io
import json
import subprocess

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner

from sweeps import queries
from sweeps.cli import app
from sweeps.cli._app import _Console
from sweeps.cli.tables import print_table
from sweeps.common import names
from sweeps.driver.retainer import Retainer
from sweeps.search import bulk

optuna.logging.set_verbosity(optuna.logging.ERROR)


def test_a_sweep_without_checkpoints_writes_no_study_attr_per_trial():
    """Each study attr is read back by every `show`, `ls` and resume: one per trial made a
    10,000-trial study's attrs 9,800 rows of `{"bytes": 0, "kept": []}`."""
    from driver_fakes import Harness

    h = Harness(budget={"trials": 4, "parallel": 1})
    h.driver.start()
    (lane,) = h.lanes
    rows: list[int] = []
    inner = Retainer._row

    def counted(self, t, requeued):
        rows.append(t.number)
        return inner(self, t, requeued)

    Retainer._row = counted  # type: ignore[method-assign]
    try:
        for _ in range(4):
            rows.clear()
            h.run_trial(lane, [0.5, 0.6])
            h.driver.step(0)
            # With no `checkpoints:` block nothing is deleted: only the trial that ended is
            # read, not the whole study (that made each trial's end O(trials)).
            assert set(rows) <= {h.study.get_trials(deepcopy=False)[-1].number}
    finally:
        Retainer._row = inner  # type: ignore[method-assign]
    h.end_lane(lane)
    assert h.driver.finish().state == "finished"
    attrs = h.study.user_attrs
    assert not [k for k in attrs if k.startswith(names.CHECKPOINTS_OF_TRIAL_PREFIX)]
    assert attrs[names.CHECKPOINT_BYTES] == 0  # `show` still says "checkpoints: 0.0 MB"


def _study(tmp_path, n: int = 30):
    url = f"sqlite:///{tmp_path}/o.db"
    study = optuna.create_study(study_name="big", storage=url, direction="maximize")
    d = {"lr": FloatDistribution(1e-4, 1e-1, log=True), "tag": CategoricalDistribution(["[b]x"])}
    study.add_trials(
        [
            create_trial(
                state=TrialState.COMPLETE if i % 3 else TrialState.PRUNED,
                params={"lr": 1e-3 * (i + 1), "tag": "[b]x"},
                distributions=d,
                value=i / n,
                user_attrs={"duration_s": 0.5, "cost_usd": 0.0, "mlflow_run_id": f"r{i:03d}"},
            )
            for i in range(n)
        ]
    )
    study.set_user_attr(names.OBJECTIVE, "val_accuracy")
    for i in range(n):  # as a sweep with `checkpoints:` keeps them: one per trial
        study.set_user_attr(f"{names.CHECKPOINTS_OF_TRIAL_PREFIX}{i}", {"bytes": i, "kept": []})
    optuna.create_study(study_name="other", storage=url)
    return url, study


def test_show_and_ls_read_the_study_attrs_once_in_plain_sql(tmp_path, monkeypatch):
    url, study = _study(tmp_path)
    assert bulk.study_attrs(study) == study.user_attrs
    assert bulk.study_names(study._storage) == [
        s.study_name for s in study._storage.get_all_studies()
    ]
    doc, rows = queries.show("big", url), queries.ls(url)

    def refuse(*a, **kw):
        raise AssertionError("Optuna's ORM read of every study attr")

    monkeypatch.setattr(optuna.storages.RDBStorage, "get_study_user_attrs", refuse)
    monkeypatch.setattr(optuna.storages.RDBStorage, "get_all_studies", refuse)
    assert queries.show("big", url) == doc
    assert queries.ls(url) == rows
    assert [r["name"] for r in rows] == ["big", "other"]
    assert doc["best"]["number"] == 29 and rows[0]["best"] == doc["best"]["value"]
    assert rows[0]["trials"] == {"COMPLETE": 20, "PRUNED": 10}


def _rich(headers, rows, title=None) -> str:
    console = _Console(file=io.StringIO())
    table = Table(*headers, title=title)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print(table)
    return console.file.getvalue()


def _plain(headers, rows, title=None, width=None) -> str:
    terminal = {"width": width, "force_terminal": True, "color_system": None} if width else {}
    console = _Console(file=io.StringIO(), **terminal)
    print_table(console, headers, rows, title)
    return console.file.getvalue()


@pytest.mark.parametrize(
    "headers,rows,title",
    [
        (["#", "state", "v", "params"], [["0", "COMPLETE", "0.5", '{"a": "é漢"}'], ["10", "-", "", "{}"]], "s (finished)"),  # noqa: E501
        (["sweep", "state"], [], None),
        (["#", "state"], [["1", "PRUNED"]], "odd title"),
    ],
)  # fmt: skip
def test_the_line_by_line_table_prints_what_rich_prints(headers, rows, title):
    assert _plain(headers, rows, title) == _rich(headers, rows, title)


def test_a_table_wider_than_the_terminal_is_richs_wrapped_one():
    rows = [["1", "x" * 60]]
    assert _plain(["#", "params"], rows, width=30) == _rich_width(["#", "params"], rows, 30)


def _rich_width(headers, rows, width) -> str:
    console = _Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    table = Table(*headers)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print(table)
    return console.file.getvalue()


def test_show_prints_each_trial_and_its_params_as_text(tmp_path, monkeypatch):
    url, _ = _study(tmp_path)
    monkeypatch.setenv("SWEEPS_STORAGE", url)
    got = CliRunner().invoke(app, ["show", "big"])
    assert got.exit_code == 0, got.output
    lines = [ln for ln in got.output.splitlines() if ln.startswith("│")]
    assert len(lines) == 30
    assert json.dumps({"lr": 0.001, "tag": "[b]x"}) in lines[0]  # not read as rich markup
    assert "r000" in lines[0] and "r029" in lines[-1]
    got = CliRunner().invoke(app, ["ls"])
    assert got.exit_code == 0 and "│ big " in got.output and "│ other " in got.output


def test_the_reader_opens_a_current_schema_without_optunas_set_up(tmp_path):
    import sys

    from sweeps.search import optuna_tables, reader

    url, _ = _study(tmp_path)
    storage = optuna.storages.RDBStorage(url)
    head = storage.get_head_version()
    assert storage.get_current_version() == optuna_tables.SCHEMA_HEAD == head
    assert isinstance(reader.open_reader(url), reader._LightStore)  # no Optuna set-up
    study = reader.load_for_reading("big", url)
    assert isinstance(study, reader.LightStudy) and study.study_name == "big"
    code = (
        "import sys; from sweeps import queries; "
        f"queries.show('big', {url!r}); queries.ls({url!r}); "
        "print(sorted({'optuna', 'sqlalchemy'} & set(sys.modules)))"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert got.stdout.strip() == "[]", got.stderr  # neither imports Optuna nor, on SQLite,
    # SQLAlchemy (0.2-0.3 s of an `ls`: search/sql_rows.py)
    assert study.directions[0].name == "MAXIMIZE" and len(bulk.trials(study)) == 30
    with pytest.raises(Exception, match="no sweep named 'nope'.*known: big, other"):
        reader.load_for_reading("nope", url)
    # Another revision: Optuna's own open, and its own message.
    import sqlalchemy as sa

    with storage.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'v3.0.0.d'"))
    with pytest.raises(RuntimeError, match="optuna storage upgrade"):
        reader.open_reader(url)


def test_params_read_back_as_optunas_distributions_give_them():
    from optuna import distributions as od

    from sweeps.search.optuna_tables import Params

    cases = [
        (od.FloatDistribution(1e-4, 1.0, log=True), 0.0123),
        (od.FloatDistribution(0.0, 1.0, step=0.25), 0.75),
        (od.IntDistribution(32, 256, step=32), 96.0),
        (od.IntDistribution(1, 1000, log=True), 17.0),
        (od.CategoricalDistribution(["adamw", None, 3, 2.5, True]), 1.0),
        (od.CategoricalDistribution(["adamw", None, 3, 2.5, True]), 4.0),
        (od.UniformDistribution(0.0, 1.0), 0.5),
        (od.LogUniformDistribution(1e-3, 1.0), 0.01),
        (od.DiscreteUniformDistribution(0.0, 1.0, 0.5), 0.5),
        (od.IntUniformDistribution(0, 10), 4.0),
        (od.IntLogUniformDistribution(1, 100), 8.0),
    ]
    read = Params()
    for dist, stored in cases:
        theirs = od.json_to_distribution(od.distribution_to_json(dist)).to_external_repr(stored)
        ours = read.external(od.distribution_to_json(dist), stored)
        assert ours == theirs and type(ours) is type(theirs), dist


def test_show_of_a_multi_objective_sweep(tmp_path):
    url = f"sqlite:///{tmp_path}/o.db"
    study = optuna.create_study(study_name="mo", storage=url, directions=["minimize", "maximize"])
    study.add_trial(create_trial(values=[0.1, 0.9]))
    doc = queries.show("mo", url)  # Optuna's `study.direction` raises on two objectives
    assert doc["direction"] == "minimize" and doc["trials"][0]["values"] == [0.1, 0.9]
    assert doc["best"] is None and doc["replicated"] == []


def test_a_driver_polls_only_the_request_keys(tmp_path, monkeypatch):
    """A driver polls for `sweeps stop` every 2 s: reading every study attr through Optuna
    then was 10% of its time at 2,000 trials. Another process's request is still seen."""
    from sweeps.search import liveness

    url, study = _study(tmp_path)
    other = optuna.load_study(study_name="big", storage=url)  # `sweeps stop`, elsewhere
    assert liveness.requested(study, 0.0) is None
    other.set_user_attr(names.requested("stop"), 5.0)

    def refuse(*a, **kw):
        raise AssertionError("every study attr, through the ORM")

    monkeypatch.setattr(optuna.storages.RDBStorage, "get_study_user_attrs", refuse)
    assert liveness.requested(study, 1.0) is liveness.Request.STOP
    assert liveness.requested(study, 6.0) is None  # made before this driver started


def test_the_intermediate_values_plot_draws_the_latest_trials(tmp_path):
    """A line and a legend entry per trial: 116 s of a 10,000-trial sweep's end."""
    from tracking import plots

    study = optuna.create_study()
    d = {"x": FloatDistribution(0, 1)}
    study.add_trials(
        [
            create_trial(
                params={"x": i / 130}, distributions=d, value=i, intermediate_values={0: 1}
            )
            for i in range(plots.CURVES + 30)
        ]
    )
    files, notes = plots.make_plots(study, str(tmp_path))
    assert f"intermediate_values: the latest {plots.CURVES} of {plots.CURVES + 30} trials" in notes
    assert (tmp_path / "intermediate_values.png").exists()
    assert (tmp_path / "optimization_history.png").exists()  # the others draw every trial
    latest = plots._Latest(study, plots.CURVES).get_trials(states=(TrialState.COMPLETE,))
    assert [t.number for t in latest] == list(range(30, plots.CURVES + 30))
