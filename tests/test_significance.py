"""The promotion gate's statistics and the locked test split, as pure functions (no Ray)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sweeps.common.errors import SpecError
from tracking import significance
from tracking.promote_checks import scores
from tracking.significance import gate, single, welch

CHAMP = [0.950, 0.955, 0.948, 0.952, 0.951]


def test_identical_samples_are_refused():
    v = welch(list(CHAMP), list(CHAMP), "maximize")
    assert not v.better and v.method == "welch" and v.p_value == pytest.approx(0.5)
    assert v.reason.startswith("kept: ") and "p=0.5" in v.reason
    # the same value everywhere, no spread on either side: no evidence, p = 1
    flat = welch([0.9, 0.9], [0.9, 0.9], "maximize")
    assert not flat.better and flat.p_value == 1.0


def test_a_gain_within_the_noise_is_refused_and_a_real_one_accepted():
    noisy = [v + 0.001 for v in CHAMP]  # higher mean, well inside the seed spread
    v = welch(noisy, CHAMP, "maximize")
    assert v.gain is not None and v.gain > 0 and not v.better and v.p_value > 0.05
    better = [v + 0.02 for v in CHAMP]
    v = welch(better, CHAMP, "maximize")
    assert v.better and v.p_value < 0.001 and "Welch's t-test, n=5 vs 5" in v.reason


def test_direction_minimize_and_the_minimum_effect():
    loss = [0.30, 0.31, 0.29, 0.30, 0.32]
    lower = [x - 0.05 for x in loss]
    assert welch(lower, loss, "minimize").better
    assert not welch(lower, loss, "maximize").better  # lower is worse when maximizing
    assert not welch(loss, lower, "minimize").better
    # the gain (0.05) is real but smaller than the minimum effect asked for
    v = welch(lower, loss, "minimize", min_effect=0.1)
    assert not v.better and "minimum effect 0.1" in v.reason
    assert welch(lower, loss, "minimize", min_effect=0.01).better
    assert not welch([x + 0.02 for x in CHAMP], CHAMP, "maximize", alpha=1e-12).better


def test_without_replicates_on_both_sides_it_compares_single_values_and_says_so():
    v = gate(0.97, 0.95, "maximize", (None, CHAMP))
    assert v.better and v.method == "single" and v.p_value is None
    assert "compared single values" in v.reason
    assert gate(0.97, 0.95, "maximize", ([0.97], CHAMP)).method == "single"  # one value
    assert not single(0.96, 0.95, "maximize", min_effect=0.02).better
    assert gate(0.2, 0.3, "minimize", (None, None)).better
    assert gate(0.9, 0.9, "maximize", (CHAMP, CHAMP)).method == "welch"


def test_samples_are_read_from_json_and_recorded_with_the_verdict():
    assert significance.parse_samples("[1, 2.5]") == [1.0, 2.5]
    assert significance.parse_samples(json.dumps({"values": [0.1, 0.2]})) == [0.1, 0.2]
    assert significance.parse_samples("nope") is None
    assert significance.parse_samples('["a"]') is None and significance.parse_samples("") is None
    v = welch(CHAMP, CHAMP, "maximize")
    tags = significance.version_tags(v, CHAMP, CHAMP)
    assert tags["sweeps.gate_test"] == "welch" and float(tags["sweeps.p_value"]) == v.p_value
    assert json.loads(tags["sweeps.samples"]) == CHAMP == json.loads(tags["sweeps.holder_samples"])


def test_test_split_is_locked_deterministic_and_disjoint():
    from trainer.data import load_dataset, load_test_split, split_indices

    tr, va, te = split_indices(1797, 0, 0.2, 0.2)
    assert len(te) == 359 and not (set(te) & set(tr)) and not (set(te) & set(va))
    assert len(tr) + len(va) + len(te) == 1797
    tr2, va2, te2 = split_indices(1797, 0, 0.3, 0.2)  # another validation share, same test rows
    assert np.array_equal(te, te2)
    assert not np.array_equal(te, split_indices(1797, 1, 0.2, 0.2)[2])  # by seed
    # without a test fraction the split is what it always was (digests unchanged)
    old = load_dataset("digits", val_fraction=0.2, seed=0)
    assert (old.digest, old.digest_val) == ("fcd2d699c4504281", "2bcbe2b4ac134a6b")  # as before
    held = load_dataset("digits", val_fraction=0.2, seed=0, test_fraction=0.2)
    x, y, digest = load_test_split("digits", None, 0.2, 0, None, 0.2)
    assert len(x) == 359 and len(held.x_train) + len(held.x_val) == 1797 - 359
    assert digest not in {held.digest, held.digest_train, held.digest_val, old.digest_val}
    assert load_test_split("digits", None, 0.2, 0, None, 0.2)[2] == digest


def test_test_scores():
    logits = np.array([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    s = scores(logits, np.array([0, 1, 1]))
    assert s["test_accuracy"] == pytest.approx(2 / 3) and s["test_loss"] > 0
    assert scores(np.array([1.0, 2.0]), np.array([1.5, 2.5])) == {"test_mse": 0.25, "test_mae": 0.5}


def test_the_data_hooks_are_validated():
    from sweeps.spec import spec_from_dict

    assert spec_from_dict({"name": "x", "data": {"test_fraction": 0.2}}).data.test_fraction == 0.2
    bad = [
        ({"data": {"test_fraction": 0}}, "data.test_fraction"),
        ({"data": {"test_path": "t.csv"}}, "data.test_path: a .npz"),
        ({"data": {"test_fraction": 0.2}, "trainer": {"entrypoint": "m:f"}}, "give data.test_path"),
        ({"data": {"test_path": "t.npz"}}, "built-in data uses data.test_fraction"),
    ]
    for extra, msg in bad:
        with pytest.raises(SpecError, match=msg.replace(".", r"\.")):
            spec_from_dict({"name": "x", **extra})
    spec = spec_from_dict(
        {"name": "x", "data": {"test_path": "t.npz"}, "trainer": {"entrypoint": "m:f"}}
    )
    assert spec.data.test_path == "t.npz"


def test_the_byo_hook_scores_a_npz_once_or_says_in_one_line_why_not(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from sweeps.common import names
    from tracking import promote_checks

    tags: dict[str, str] = {}

    class Client:  # records the version tags score_test writes
        def set_model_version_tag(self, model: str, version: str, key: str, value: str) -> None:
            tags[key] = value

    path = tmp_path / "test.npz"
    spec = {"data": {"test_path": str(path)}, "trainer": {"entrypoint": "m:f"}}
    study = SimpleNamespace(user_attrs={names.SPEC: json.dumps(spec)})
    trial = SimpleNamespace(params={})
    args = (Client(), study, trial, "m", "1")
    out = promote_checks.score_test(*args, False, "sqlite:///x.db")
    assert out == {"note": f"test split not scored: data.test_path: file not found: {path}"}
    assert tags[names.TEST_NOTE] == out["note"]
    np.savez(path, x=np.zeros((4, 3), np.float32), y=np.array([0, 1, 1, 0]))
    seen = []
    logits = np.array([[1.0, 0], [0, 1.0], [1.0, 0], [1.0, 0]])
    monkeypatch.setattr(
        promote_checks, "_predict", lambda uri, x, _t: seen.append((uri, x.shape)) or logits
    )
    out = promote_checks.score_test(*args, False, "sqlite:///x.db")
    assert seen == [("models:/m/1", (4, 3))] and out["metrics"]["test_accuracy"] == 0.75
    assert json.loads(tags[names.TEST_METRICS])["test_rows"] == 4 and len(out["digest"]) == 16
    assert tags[names.TEST_DIGEST] == out["digest"]
    note = promote_checks.score_test(*args, True, "sqlite:///x.db")["note"]  # program's files
    assert note.startswith("test split not scored: the version holds a program's files")
    study.user_attrs[names.SPEC] = json.dumps({"trainer": {}})
    assert promote_checks.score_test(*args, False, "sqlite:///x.db") is None  # no test split
