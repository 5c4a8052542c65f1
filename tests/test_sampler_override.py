"""`--set sampler.name=X` on a spec whose options belong to another sampler (issue 17, item 20)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweeps.common.errors import SpecError
from sweeps.search.samplers import adapt_options, make_sampler
from sweeps.spec import load_spec

QUICKSTART = Path(__file__).resolve().parent.parent / "conf" / "quickstart.yaml"


def test_switching_sampler_drops_options_the_new_one_does_not_take():
    spec = load_spec(QUICKSTART, ["sampler.name=random"])
    adapted, notes = adapt_options(spec, ["sampler.name=random"])
    assert adapted.sampler.name == "random" and adapted.sampler.options == {}
    assert adapted.sampler.seed == 7
    assert len(notes) == 1
    assert "sampler.options.n_startup_trials" in notes[0] and "'random'" in notes[0]
    make_sampler(adapted)  # builds
    with pytest.raises(SpecError, match="n_startup_trials: unknown option"):
        make_sampler(spec)  # the unadapted spec is what failed before


def test_options_the_new_sampler_takes_are_kept():
    spec = load_spec(QUICKSTART, ["sampler.name=nsga2"])  # NSGA-II has no n_startup_trials
    adapted, notes = adapt_options(spec, ["sampler.name=nsga2"])
    assert adapted.sampler.options == {} and len(notes) == 1
    spec = load_spec(QUICKSTART, ["sampler.name=gp"])  # GP takes n_startup_trials too
    adapted, notes = adapt_options(spec, ["sampler.name=gp"])
    assert adapted.sampler.options == {"n_startup_trials": 4} and notes == []


def test_no_sampler_name_override_changes_nothing():
    spec = load_spec(QUICKSTART, ["budget.trials=3"])
    adapted, notes = adapt_options(spec, ["budget.trials=3"])
    assert adapted is spec and notes == []


def test_an_option_set_explicitly_with_set_is_still_an_error():
    sets = ["sampler.name=random", "sampler.options.n_startup_trials=3"]
    spec = load_spec(QUICKSTART, sets)
    adapted, notes = adapt_options(spec, sets)
    assert adapted.sampler.options == {"n_startup_trials": 3} and notes == []
    with pytest.raises(SpecError, match="sampler.options.n_startup_trials: unknown option"):
        make_sampler(adapted)


def _cli(*args: str):
    from sweeps.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_validate_with_a_new_sampler_notes_each_dropped_option_on_stderr():
    r = _cli("validate", str(QUICKSTART), "--set", "sampler.name=random")
    assert r.exit_code == 0, r.output
    notes = [ln for ln in r.stderr.splitlines() if "dropped" in ln]
    assert len(notes) == 1 and "sampler.options.n_startup_trials" in notes[0], r.stderr
    assert "sampler random" in r.stdout


def test_cli_explicit_unknown_option_exits_2_for_validate_and_run():
    for cmd in ("validate", "run"):
        r = _cli(
            cmd,
            str(QUICKSTART),
            "--set",
            "sampler.name=random",
            "--set",
            "sampler.options.n_startup_trials=3",
        )
        assert r.exit_code == 2, (cmd, r.output)
        assert "sampler.options.n_startup_trials: unknown option" in r.stderr


def test_switching_pruner_drops_options_the_new_one_does_not_take():
    from sweeps.search.samplers import make_pruner

    spec = load_spec(QUICKSTART, ["pruner.name=none"])
    with pytest.raises(SpecError, match="pruner.options.n_startup_trials: unknown option"):
        make_pruner(spec.pruner)  # what `--set pruner.name=none` failed with before
    adapted, notes = adapt_options(spec, ["pruner.name=none"])
    assert adapted.pruner.name == "none" and adapted.pruner.options == {}
    assert sorted(notes) == [
        "note: pruner.options.n_startup_trials dropped: pruner 'none' does not take it",
        "note: pruner.options.n_warmup_steps dropped: pruner 'none' does not take it",
    ]
    make_pruner(adapted.pruner)
    # Percentile takes both of the median's options: nothing dropped.
    spec = load_spec(QUICKSTART, ["pruner.name=percentile"])
    assert adapt_options(spec, ["pruner.name=percentile"]) == (spec, [])


def test_cli_submit_notes_dropped_pruner_options_before_it_reaches_the_service(home):
    # Nothing answers on port 9: submit gets past loading and validation (which a spec whose
    # options belong to another pruner would fail, exit 2) and fails on the address, exit 1.
    r = _cli(
        "submit", str(QUICKSTART), "--set", "pruner.name=none", "--address", "http://127.0.0.1:9"
    )
    assert "pruner.options.n_warmup_steps dropped" in r.stderr, r.output
    assert "unknown option" not in r.stderr
    assert r.exit_code == 1, r.output
    assert "127.0.0.1:9" in r.stderr
