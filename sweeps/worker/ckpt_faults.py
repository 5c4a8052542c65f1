"""Checkpoint faults on a worker (issue 32 #7): a write that fails, a resume from a torn one.

A write that fails (a full disk, a quota, a store that refuses) costs that checkpoint only: the
trial goes on from memory, its log and the driver's terminal get one line, and the next
checkpoint is tried again. Ray Train V2 leaves a rank whose upload raised one report behind its
own count, so its next report would wait forever: `_realign` hands Ray the report it missed,
without a checkpoint, as the other ranks' were (Ray Train's private names, checked as
`untested_release` does: on another Ray the trial fails with one line instead).

Each checkpoint's `sweeps_meta.json` lists its files and their sizes. A resume checks the
checkpoint it was given against that list; a torn one (a file missing or short, the list
unreadable) falls back to the newest intact checkpoint before it of the same trial, in the same
folder, and says so in one line naming both. `resume_order` and `damage` are pure.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from sweeps.common.errors import one_line

META = "sweeps_meta.json"
# Lines a worker prints into the trial's log; the driver repeats them on its terminal.
NOT_WRITTEN = "sweeps: checkpoint not written"
FELL_BACK = "sweeps: damaged checkpoint"
# runtime._persist's checkpoint_dir_name: `checkpoint_name`
NAME = re.compile(r"^(.*?)trial(\d+)-step(\d+)-(\d+)$")


def checkpoint_name(sweep: str, lane_id: str, trial: int, step: int, restarts: int) -> str:
    """Pure: a checkpoint's folder name in its lane's run folder. A warm lane's run folder is
    named after the sweep that started it and holds every later sweep's checkpoints too; trial
    numbers repeat across sweeps, so another sweep's names carry that sweep's name."""
    own = not sweep or lane_id.startswith(f"{sweep}-lane")
    return f"{'' if own else sweep + '-'}trial{trial:06d}-step{step:05d}-{restarts}"


class CheckpointWriteError(RuntimeError):
    """A checkpoint write failed and this Ray cannot go on without it (one line)."""


def manifest(folder: str) -> dict[str, int]:
    """Each file under `folder` (relative path) and its size, the meta file excepted."""
    out: dict[str, int] = {}
    for base, _, files in os.walk(folder):
        for f in files:
            rel = os.path.relpath(os.path.join(base, f), folder)
            if rel != META:
                out[rel] = os.path.getsize(os.path.join(base, f))
    return out


def damage(meta_text: str | None, sizes: Mapping[str, int]) -> str | None:
    """Pure: why a checkpoint is torn (None: intact). `meta_text`: its meta file (None: gone);
    `sizes`: the size of each file it holds. A meta file from before the list was kept (no
    "files") passes on its step alone."""
    if meta_text is None:
        return f"{META} is missing"
    try:
        meta = json.loads(meta_text)
        int(meta["step"])
    except (ValueError, KeyError, TypeError):
        return f"{META} is unreadable"
    for rel, size in sorted((meta.get("files") or {}).items()):
        have = sizes.get(rel)
        if have is None:
            return f"{rel} is missing"
        if have != size:
            return f"{rel} has {have} of its {size} bytes"
    return None


def resume_order(latest: str, siblings: Iterable[str]) -> list[str]:
    """Pure: the checkpoints to try, in order: `latest` (a path ending in a checkpoint folder's
    name), then the same trial's earlier ones among `siblings` (names in its folder), newest
    first. A name that is not one of ours has no earlier ones."""
    parent, name = os.path.split(latest.rstrip("/"))
    m = NAME.match(name)
    if m is None:
        return [latest]
    prefix, trial, step = m[1], int(m[2]), int(m[3])
    earlier = []
    for s in siblings:
        n = NAME.match(s)
        if n is not None and (n[1], int(n[2])) == (prefix, trial) and int(n[3]) < step:
            earlier.append((int(n[3]), int(n[4]), s))
    return [latest] + [f"{parent}/{s}" for _, _, s in sorted(earlier, reverse=True)]


def pick(order: list[str], check: Callable[[str], str | None]) -> tuple[str | None, list[str]]:
    """Pure given `check`: the first intact checkpoint of `order` (None: none), and a line for
    each torn one passed over, naming what was used instead."""
    torn: list[tuple[str, str]] = []
    for path in order:
        why = check(path)
        if why is None:
            return path, [_fell_back(p, w, path) for p, w in torn]
        torn.append((path, why))
    return None, [_fell_back(p, w, None) for p, w in torn]


def _fell_back(path: str, why: str, used: str | None) -> str:
    then = f"resuming from {used}" if used else "no intact one before it: starting over"
    return f"{FELL_BACK} {path} ({why}); {then}"


def _check(fs: Any, path: str) -> str | None:
    """Why the checkpoint at `path` of pyarrow filesystem `fs` is torn (None: intact)."""
    from pyarrow.fs import FileSelector, FileType

    try:
        infos = fs.get_file_info(FileSelector(path, recursive=True))
    except (OSError, FileNotFoundError) as e:
        return f"unreadable: {one_line(e, 120)}"
    root = path.rstrip("/") + "/"
    sizes = {i.path.removeprefix(root): int(i.size or 0) for i in infos if i.type is FileType.File}
    text = None
    if META in sizes:
        with fs.open_input_stream(f"{root}{META}") as f:
            text = f.read().decode("utf-8", "replace")
    return damage(text, sizes)


def intact(ckpt: Any) -> tuple[Any, list[str]]:
    """The checkpoint to resume from instead of `ckpt` (a ray.train.Checkpoint), or None for a
    fresh start, and a line for each torn one passed over."""
    import ray.train
    from pyarrow.fs import FileSelector

    fs, latest = ckpt.filesystem, ckpt.path
    parent = os.path.dirname(latest.rstrip("/"))
    try:
        listing = fs.get_file_info(FileSelector(parent, allow_not_found=True))
        siblings = [os.path.basename(i.path.rstrip("/")) for i in listing]
    except OSError:
        siblings = []
    path, lines = pick(resume_order(latest, siblings), lambda p: _check(fs, p))
    if path == latest:
        return ckpt, lines
    return (ray.train.Checkpoint(path, filesystem=fs) if path else None), lines


def say(lines: list[str]) -> None:
    """Into the trial's log (its stderr is copied there); the driver repeats each line."""
    for line in lines:
        print(line, file=sys.stderr, flush=True)


def write_failed(metrics: dict[str, Any], dir_name: str, step: int, e: BaseException) -> None:
    """Rank 0's upload of the checkpoint at `step` raised `e`: Ray Train gets the report with
    no checkpoint, the partial copy goes, and the trial's log says so."""
    why = _realign(metrics)
    if why is not None:
        raise CheckpointWriteError(
            f"checkpoint at step {step} not written ({one_line(e, 160)}), and {why}"
        ) from None
    _remove_partial(dir_name)
    say([f"{NOT_WRITTEN} at step {step} ({one_line(e, 200)}); the trial goes on, "
         "the next checkpoint is tried again"])  # fmt: skip


def _realign(metrics: dict[str, Any]) -> str | None:
    """Put the report Ray Train's upload skipped (no checkpoint) on this rank's queue, so its
    count of reports matches the other ranks'. Why it cannot (None: done)."""
    try:
        from ray.train.v2._internal.execution.context import get_train_context
        from ray.train.v2._internal.execution.training_report import _TrainingReport

        tc = get_train_context()
        index = tc.report_call_index
        if tc.current_report_index == index - 1:  # the upload raised before its turn
            tc._wait_then_report(_TrainingReport(None, metrics, False), index)
        return None
    except Exception as e:  # another Ray: its report order cannot be repaired from here
        return f"this Ray Train cannot go on without it ({one_line(e, 120)})"


def _remove_partial(dir_name: str) -> None:
    """The torn copy in storage: it holds disk the next checkpoint needs."""
    try:
        import ray.train

        storage = ray.train.get_context().get_storage()
        path = storage.build_checkpoint_path_from_name(dir_name)
        storage.storage_filesystem.delete_dir(path)
    except Exception:  # nothing was copied, or the store refuses: the retention deletes it
        pass


def terminal_lines(text: str) -> list[str]:
    """Pure: the lines of a trial's output that the driver's terminal repeats."""
    return [ln.strip() for ln in text.splitlines() if ln.startswith((NOT_WRITTEN, FELL_BACK))]
