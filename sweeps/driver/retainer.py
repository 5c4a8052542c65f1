"""The sweep's checkpoint retention, applied as trials end and once at the sweep's end.

The policy is pure (`retention.to_delete`); this reads the study, deletes what it drops (one
folder per checkpoint, local or gs://: `execution.storage.delete_tree`) and records, for each
ended trial, the checkpoints it still has and their bytes (a study attr per trial: Optuna keeps
a finished trial read-only), and the sweep's total (`CHECKPOINT_BYTES`), which `show` and `ls`
read without touching the store. A trial's checkpoints are known exactly
(the ones this driver saw written, and the ones recorded on the study), so a warm lane's folder
shared with another sweep is never listed, nor anything of that sweep deleted.

With no `checkpoints` block nothing is deleted: the bytes are still recorded, and measured
again at the sweep's end (each lane run's `execution.keep_checkpoints` deletes older ones)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from sweeps.common import names
from sweeps.common.errors import one_line
from sweeps.driver import retention as r
from sweeps.execution import storage
from sweeps.search import study as st

Checkpoints = list[tuple[int, str]]
RETRY_S = 0.2  # how soon a trial whose tell waited applies the policy again
FEW = 64  # up to this many trials are read one by one, more with the study's whole list


class Retainer:
    def __init__(self, spec: Any, study: Any, notice: Callable[[str], None]) -> None:
        self.conf = spec.checkpoints
        self.study = study
        self.notice = notice
        self.seen: dict[int, Checkpoints] = {}  # trial number: checkpoints written this session
        self.live: set[int] = set()  # trials running at the last tick
        self.gone: set[str] = set()  # paths deleted
        self.warned = False
        self.told_late: set[int] = set()  # ended, but Optuna still said RUNNING at the last pass
        self.applied_at = 0.0
        self.total_written = False  # the sweep's CHECKPOINT_BYTES, by this driver
        pre = names.CHECKPOINTS_OF_TRIAL_PREFIX
        self.entries: dict[int, dict[str, Any]] = {
            int(k.removeprefix(pre)): v for k, v in study.user_attrs.items() if k.startswith(pre)
        }  # trial number: {"bytes": int, "kept": [[step, path], ...]}, as on the study

    def policy(self) -> r.Policy:
        c, dirs = self.conf, self.study.directions
        direction = dirs[0].name.lower() if len(dirs) == 1 else None
        return r.Policy(c.keep_best_trials, c.keep_latest_per_trial, c.pruned, direction)

    def checkpointed(self, number: int, step: int, path: str, resume_from: str | None) -> None:
        """A running trial's new checkpoint. Its older ones beyond what it keeps go now, so a
        long trial does not pile them up (each lane run then keeps all: `lane_keep`)."""
        mine = self.seen.setdefault(number, [])
        mine.append((step, path))
        if self.conf is None:
            return
        t = r.TrialCheckpoints(number, "RUNNING", None, mine, True, (resume_from or "",))
        self._delete(r.to_delete([t], self.policy()))
        self.seen[number] = [(s, p) for s, p in mine if p not in self.gone]

    def tick(self, running: Iterable[int]) -> None:
        """After each turn: a trial that ended since the last one applies the policy; one whose
        Optuna tell waited (it still read RUNNING) applies it again RETRY_S later."""
        now = set(running)
        ended, self.live = self.live - now, now
        if not ended and self.told_late and time.monotonic() - self.applied_at >= RETRY_S:
            ended = self.told_late
        if ended:
            self.apply(ended)

    def apply(self, ended: set[int], final: bool = False) -> None:
        """Apply the policy to the whole study; record checkpoints and bytes of the trials that
        ended (`ended`), lost checkpoints, or (`final`) were seen by this driver. Never raises."""
        try:
            if self.conf is None:  # nothing to delete: rows for the trials to record only,
                want = ended | self.told_late | (set(self.seen) if final else set())
                trials = self._numbered(want)  # not the whole study's at each trial's end
            else:
                trials = self.study.get_trials(deepcopy=False)
            requeued = {t.user_attrs.get(names.REQUEUED_FROM) for t in trials}
            frontier = pbt_frontier(trials)
            rows = {t.number: self._row(t, t.number in requeued, frontier) for t in trials}
            if self.conf is not None:
                self._delete(r.to_delete(list(rows.values()), self.policy()))
            changed = False
            self.applied_at = time.monotonic()
            late = ended | self.told_late
            self.told_late = {n for n in late if n in rows and rows[n].state == "RUNNING"}
            for t in trials:
                row = rows[t.number]
                lost = any(p in self.gone for _, p in row.checkpoints)
                if row.state in ("RUNNING", "WAITING"):
                    continue  # its bytes are recorded once it ends
                if t.number in ended or lost or (final and t.number in self.seen):
                    changed |= self._record(t.number, row.checkpoints)
            if changed or (final and not self.total_written):
                self.total_written = True
                total = sum(int(e.get("bytes") or 0) for e in self.entries.values())
                self.study.set_user_attr(names.CHECKPOINT_BYTES, total)
        except Exception as e:
            self._warn(f"checkpoint retention: {one_line(e)}")

    def _numbered(self, numbers: set[int]) -> list[Any]:
        if len(numbers) <= FEW:
            return st.trials_numbered(self.study, numbers)
        return _numbered(self.study.get_trials(deepcopy=False), numbers)

    def _row(self, t: Any, requeued: bool, frontier: set[int]) -> r.TrialCheckpoints:
        a = t.user_attrs
        kept = self.entries.get(t.number, {}).get("kept") or []
        cps: dict[str, int] = {p: int(s) for s, p in kept}
        if a.get(names.CHECKPOINT):
            cps.setdefault(a[names.CHECKPOINT], int(a.get(names.CHECKPOINT_STEP) or 0))
        for s, p in self.seen.get(t.number, []):
            cps[p] = s
        state = t.state.name
        held = r.is_held(state, bool(a.get(names.CANCELLED)), requeued) or t.number in frontier
        value = t.values[0] if state == "COMPLETE" and t.values and len(t.values) == 1 else None
        if names.PBT_MEMBER in a and not a.get(names.PBT_FINAL):
            value = None  # a member's result is its final segment's: only those rank
        needs = tuple(p for p in (a.get(names.RESUME_CHECKPOINT),) if p)
        checkpoints = [(s, p) for p, s in cps.items() if p not in self.gone]
        return r.TrialCheckpoints(t.number, state, value, checkpoints, held, needs)

    def _record(self, number: int, cps: Checkpoints) -> bool:
        """Its checkpoints still there, and their bytes, on the study; whether they changed."""
        sizes = {p: storage.tree_bytes(p) for _, p in cps if p not in self.gone}
        left = [[s, p] for s, p in sorted(cps) if sizes.get(p)]  # 0: gone (Ray's num_to_keep)
        entry = {"bytes": sum(sizes.values()), "kept": left}
        if self.entries.get(number, {"bytes": 0, "kept": []}) == entry:
            return False  # unchanged; or none ever: no attr (10,000 of them slow every read)
        self.study.set_user_attr(f"{names.CHECKPOINTS_OF_TRIAL_PREFIX}{number}", entry)
        self.entries[number] = entry
        return True

    def _delete(self, paths: list[str]) -> None:
        for path in paths:
            if path in self.gone:
                continue
            try:
                storage.delete_tree(path)
                self.gone.add(path)
            except Exception as e:
                self._warn(f"could not delete checkpoint {path}: {one_line(e)}")

    def _warn(self, line: str) -> None:
        """Once per sweep: a store that refuses deletes would otherwise say so per trial."""
        if not self.warned:
            self.warned = True
            self.notice(f"{line} (further checkpoint retention errors not shown)")


def _numbered(trials: list[Any], numbers: set[int]) -> list[Any]:
    """The trials of `numbers`: Optuna's list of a study's trials is indexed by number."""
    n = len(trials)
    if all(0 <= k < n and trials[k].number == k for k in numbers):
        return [trials[k] for k in sorted(numbers)]
    return [t for t in trials if t.number in numbers]


def lane_keep(spec: Any, keep_checkpoints: int) -> int | None:
    """Ray's CheckpointConfig.num_to_keep for the sweep's lane runs: all, when the sweep's own
    retention decides (Ray's would delete the best trials' checkpoints as a lane moves on)."""
    return None if spec.checkpoints is not None else keep_checkpoints


def pbt_frontier(trials: Iterable[Any]) -> set[int]:
    """PBT: each member's latest complete segment that is not its last. Its next segment, or
    another member's exploit of it, starts from its checkpoint: it is held like a parked trial."""
    latest: dict[int, Any] = {}
    for t in trials:
        a = t.user_attrs
        if names.PBT_MEMBER not in a or t.state.name != "COMPLETE":
            continue
        key = (int(a.get(names.PBT_GENERATION, 0)), t.number)
        cur = latest.get(a[names.PBT_MEMBER])
        if cur is None or key > (int(cur.user_attrs.get(names.PBT_GENERATION, 0)), cur.number):
            latest[a[names.PBT_MEMBER]] = t
    return {t.number for t in latest.values() if not t.user_attrs.get(names.PBT_FINAL)}
