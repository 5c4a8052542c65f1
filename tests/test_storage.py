"""Creating a study's database while others touch it: `sweeps show` polling while the sweep
starts, or a second driver joining a brand-new study. Before the schema-race retry the driver
lost this race in 24 of 40 tries here (a CREATE TABLE or the alembic_version row)."""

from __future__ import annotations

import os
import threading

import pytest
from conftest import make_spec

from sweeps.common.errors import NotFoundError
from sweeps.search.study import load_study, open_storage, open_study


def test_a_new_study_survives_concurrent_readers_and_creators(tmp_path):
    spec = make_spec(name="race")
    for i in range(12):
        url = f"sqlite:///{tmp_path}/optuna-{i}.db"
        errors: list[BaseException] = []
        stop = threading.Event()

        def poll(
            create: bool,
            url: str = url,
            stop: threading.Event = stop,
            errors: list[BaseException] = errors,
        ) -> None:
            while not stop.is_set():
                try:
                    open_storage(url) if create else load_study("race", url)
                except NotFoundError:
                    pass  # the study is not there yet: what `sweeps show` then says
                except Exception as e:  # collected for the assertion below
                    errors.append(e)

        pollers = [threading.Thread(target=poll, args=(c,)) for c in (True, True, False)]
        for t in pollers:
            t.start()
        try:
            study = open_study(spec, url)
        finally:
            stop.set()
            for t in pollers:
                t.join()
        assert study.study_name == "race"
        assert not errors, errors[:3]


def test_reading_a_sweep_never_creates_the_database(tmp_path):
    path = tmp_path / "optuna.db"
    with pytest.raises(NotFoundError, match="no sweeps yet"):
        load_study("nope", f"sqlite:///{path}")
    assert not os.path.exists(path)


def test_only_trials_of_dead_drivers_are_stale(tmp_path, monkeypatch):
    import sweeps.search.liveness as st

    study = open_study(make_spec(name="stale"), f"sqlite:///{tmp_path}/optuna.db")
    st.heartbeat(study, "alive")  # this process: alive
    study.set_user_attr("sweeps.driver.gone", {"t": 0, "host": "x", "pid": 1})
    mine, theirs, unclaimed = study.ask(), study.ask(), study.ask()
    mine.set_user_attr("sweeps.driver", "alive")
    theirs.set_user_attr("sweeps.driver", "gone")
    stale = {t.number for t in st.stale_running(study, "joiner")}
    assert stale == {theirs.number}, "a trial asked a moment ago is not yet anybody's"
    monkeypatch.setattr(st, "STALE_AFTER_S", 0.0)  # ...but one unclaimed for long is
    assert unclaimed.number in {t.number for t in st.stale_running(study, "joiner")}
