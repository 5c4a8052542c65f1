"""Sweep-wide checkpoint retention (`checkpoints:`): the pure policy, the driver's retainer
against a real in-memory Optuna study and real folders, gs:// deletion on the GCS emulator."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest
from services import gcs_bucket, gcs_client

from sweeps import queries
from sweeps.common import names
from sweeps.driver import retention as r
from sweeps.driver.retainer import Retainer, lane_keep
from sweeps.execution import storage
from sweeps.spec.models import Spec

MIN = r.Policy(keep_best_trials=2, keep_latest_per_trial=1, pruned="delete", direction="minimize")


def trial(n, state="COMPLETE", value=None, steps=(1, 2), held=False, needs=()):
    cps = [(s, f"/c/t{n}-s{s}") for s in steps]
    return r.TrialCheckpoints(n, state, value, cps, held, needs)


def test_best_trials_keep_their_latest_the_rest_go():
    trials = [trial(0, value=0.5), trial(1, value=0.1), trial(2, value=0.3), trial(3, value=0.9)]
    gone = set(r.to_delete(trials, MIN))
    assert gone == {"/c/t0-s1", "/c/t0-s2", "/c/t1-s1", "/c/t2-s1", "/c/t3-s1", "/c/t3-s2"}
    maximize = r.Policy(2, 2, "delete", "maximize")
    gone = set(r.to_delete(trials, maximize))
    assert gone == {"/c/t1-s1", "/c/t1-s2", "/c/t2-s1", "/c/t2-s2"}  # 3 and 0 are the best


def test_never_deletes_what_a_resumable_trial_needs():
    trials = [
        trial(0, value=0.1),
        trial(1, value=0.2),
        trial(2, value=0.9, steps=(1, 2, 3)),  # not among the best, but a retry resumes from it
        trial(3, "WAITING", held=True, steps=(), needs=("/c/t2-s3",)),
        trial(4, "FAIL", steps=(1, 2, 3), held=r.is_held("FAIL", True, False)),  # parked
        trial(5, "RUNNING", steps=(1, 2, 3, 4), held=True),
        trial(6, "FAIL", steps=(1,), held=r.is_held("FAIL", True, True)),  # re-queued already
        trial(7, "COMPLETE", value=5.0, steps=(4,), needs=("/c/t0-s1",)),  # ended: needs none
    ]
    gone = set(r.to_delete(trials, MIN))
    assert "/c/t2-s3" not in gone  # the waiting retry starts from it
    assert "/c/t2-s2" not in gone, "what that retry falls back to if /c/t2-s3 is torn"
    assert "/c/t2-s1" in gone
    assert not {"/c/t4-s2", "/c/t4-s3"} & gone  # a parked trial keeps its newest two
    assert not {"/c/t5-s3", "/c/t5-s4"} & gone
    assert {"/c/t4-s1", "/c/t5-s1", "/c/t5-s2", "/c/t6-s1", "/c/t7-s4", "/c/t0-s1"} <= gone


def test_pruned_failed_and_multi_objective():
    trials = [trial(0, value=0.1), trial(1, "PRUNED"), trial(2, "FAIL")]
    assert set(r.to_delete(trials, MIN)) == {
        "/c/t0-s1",
        "/c/t1-s1",
        "/c/t1-s2",
        "/c/t2-s1",
        "/c/t2-s2",
    }
    keep_pruned = r.Policy(2, 1, "keep", "minimize")
    assert "/c/t1-s2" not in r.to_delete(trials, keep_pruned)
    multi = r.Policy(1, 1, "delete", None)  # several objectives: every complete trial stays
    many = [trial(n, value=None) for n in range(4)]
    assert set(r.to_delete(many, multi)) == {f"/c/t{n}-s1" for n in range(4)}
    every = r.Policy(None, 5, "keep", "minimize")
    assert r.to_delete(trials, every) == []


def test_spec_fields_and_checks():
    assert Spec(name="a").checkpoints is None  # today's behaviour: Ray's per-lane bound only
    c = Spec(name="a", checkpoints={}).checkpoints
    assert (c.keep_best_trials, c.keep_latest_per_trial, c.pruned) == (3, 1, "delete")
    for bad in ({"keep_best_trials": 0}, {"pruned": "archive"}, {"keep_latest_per_trial": 0}):
        with pytest.raises(ValueError):
            Spec(name="a", checkpoints=bad)
    two = [{"metric": "val_loss"}, {"metric": "epoch_seconds"}]
    with pytest.raises(ValueError, match="single objective"):
        Spec(name="a", objectives=two, checkpoints={"keep_best_trials": 2})
    assert Spec(name="a", objectives=two, checkpoints={}).checkpoints is not None
    assert lane_keep(Spec(name="a", checkpoints={}), 2) is None
    assert lane_keep(Spec(name="a"), 2) == 2


def _write(folder: Path, size: int) -> str:
    folder.mkdir(parents=True)
    (folder / "model.pt").write_bytes(b"x" * size)
    return str(folder)


def _finish(study, number_value, attrs):
    t = study.ask()
    for k, v in attrs.items():
        t.set_user_attr(k, v)
    if number_value is None:
        return t
    study.tell(t, number_value)
    return t


def test_retainer_applies_as_trials_end_and_records_bytes(tmp_path):
    spec = Spec(name="ret", checkpoints={"keep_best_trials": 1})
    url = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(direction="minimize", storage=url, study_name="ret")
    notes: list[str] = []
    ret = Retainer(spec, study, notes.append)
    lane = tmp_path / "ret-lane0-abcdef"
    paths = {}
    for n, value in enumerate([0.5, 0.2]):
        for step in (1, 2, 3):
            paths[n, step] = _write(lane / f"trial{n:06d}-step{step:05d}-0", 100 * (n + 1))
        ret.tick([n])
        for step in (1, 2, 3):
            ret.checkpointed(n, step, paths[n, step], None)
        assert not os.path.exists(paths[n, 1])  # a running trial keeps its newest two
        assert os.path.exists(paths[n, 2])
        attrs = {names.CHECKPOINT: paths[n, 3], names.CHECKPOINT_STEP: 3}
        _finish(study, value, attrs)
        ret.tick([])
    # Trial 0 fell out of the best one, trial 1 keeps its latest only.
    left = sorted(p.name for p in lane.iterdir())
    assert left == ["trial000001-step00003-0"]
    assert notes == []
    attrs = optuna.load_study(study_name="ret", storage=url).user_attrs
    of = names.CHECKPOINTS_OF_TRIAL_PREFIX
    assert attrs[f"{of}0"] == {"bytes": 0, "kept": []}
    assert attrs[f"{of}1"] == {"bytes": 200, "kept": [[3, paths[1, 3]]]}
    assert attrs[names.CHECKPOINT_BYTES] == 200
    assert queries.show("ret", url)["checkpoint_bytes"] == 200
    assert [row["checkpoint_bytes"] for row in queries.ls(url)] == [200]
    # A new driver (a resumed sweep) reads what is kept from the study.
    assert Retainer(spec, study, notes.append).entries[1]["bytes"] == 200
    # A parked trial (cancelled, not yet re-queued) keeps what it resumes from.
    park = _write(lane / "trial000002-step00001-0", 10)
    t = _finish(study, None, {names.CHECKPOINT: park, names.CHECKPOINT_STEP: 1})
    t.set_user_attr(names.CANCELLED, True)
    study.tell(t, state=optuna.trial.TrialState.FAIL)
    ret.apply(set(), final=True)
    assert os.path.exists(park) and notes == []


def test_pbt_keeps_what_members_may_continue_from(tmp_path):
    """A member's latest complete segment keeps its checkpoint (its next segment or an exploit
    starts there); a superseded segment's goes; only final segments rank for the best."""
    spec = Spec(name="pbt", checkpoints={"keep_best_trials": 1, "keep_latest_per_trial": 1})
    study = optuna.create_study(direction="maximize")
    ret = Retainer(spec, study, [].append)
    cp = {n: _write(tmp_path / f"t{n}", 10) for n in range(4)}

    def segment(n: int, member: int, gen: int, value: float, final: bool) -> None:
        attrs = {names.CHECKPOINT: cp[n], names.CHECKPOINT_STEP: gen + 1}
        attrs |= {names.PBT_MEMBER: member, names.PBT_GENERATION: gen, names.PBT_FINAL: final}
        _finish(study, value, attrs)
        ret.apply({n})

    segment(0, 0, 0, 0.9, False)
    segment(1, 1, 0, 0.5, False)  # worse than anything, but member 1 goes on from it
    segment(2, 0, 1, 0.8, True)  # member 0's last: its first segment is superseded
    assert [os.path.exists(cp[n]) for n in range(3)] == [False, True, True]
    segment(3, 1, 1, 0.7, True)  # below member 0's final: not the one best
    assert [os.path.exists(cp[n]) for n in range(4)] == [False, False, True, False]


def test_delete_failures_are_told_once(tmp_path, monkeypatch):
    spec = Spec(name="ret", checkpoints={"keep_best_trials": 1})
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db")
    notes: list[str] = []
    ret = Retainer(spec, study, notes.append)

    def refuse(path: str) -> None:
        raise PermissionError(f"read-only: {path}")

    monkeypatch.setattr(storage, "delete_tree", refuse)
    for n in range(3):
        _finish(study, float(n), {names.CHECKPOINT: str(tmp_path / f"t{n}"), "x": n})
        ret.apply({n})
    assert len(notes) == 1 and "could not delete checkpoint" in notes[0]


def test_gs_delete_and_bytes_on_the_emulator(gcs_emulator, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    bucket = gcs_bucket(gcs_emulator, "retention")
    for name, size in (("a/trial000001-step00001-0/m.pt", 7), ("a/trial000001-step00001-0/x", 5)):
        bucket.blob(name).upload_from_string(b"y" * size)
    bucket.blob("a/trial000002-step00001-0/m.pt").upload_from_string(b"z" * 3)
    uri = "gs://retention/a/trial000001-step00001-0"
    assert storage.tree_bytes(uri) == 12
    storage.delete_tree(uri)
    storage.delete_tree(uri)  # gone already: fine
    assert storage.tree_bytes(uri) == 0
    names_left = [b.name for b in gcs_client(gcs_emulator).list_blobs("retention")]
    assert names_left == ["a/trial000002-step00001-0/m.pt"]


def test_the_driver_applies_it_as_each_trial_ends_and_at_the_end(tmp_path):
    from driver_fakes import Harness

    from sweeps.contracts.protocol import Checkpointed

    h = Harness(budget={"trials": 3, "parallel": 1}, checkpoints={"keep_best_trials": 1})
    h.driver.start()
    (lane,) = h.lanes
    folders = {}
    for n, value in enumerate([0.6, 0.9, 0.7]):  # val_accuracy: maximize
        a = h.next(lane)
        for step in (1, 2):
            path = _write(tmp_path / f"trial{n:06d}-step{step:05d}-0", 10 * (n + 1))
            folders[n, step] = path
            h.report(a, lane, step, val_accuracy=value)
            h.channel.push(Checkpointed(lane.lane_id, a.seq, step, path))
            h.driver.step(0)
        h.finish(a, lane, val_accuracy=value)
        h.driver.step(0)
        left = sorted(p.name for p in tmp_path.iterdir())
        best = 0 if n == 0 else 1
        assert left == [f"trial{best:06d}-step00002-0"], (n, left)
    h.end_lane(lane)
    assert h.driver.finish().state == "finished"
    assert h.study.user_attrs[names.CHECKPOINT_BYTES] == 20
