"""Each trial's own working directory: a view of `code_dir` that its relative writes land in.

Parallel trials of one script share its `code_dir`; a `model.pth`, `./wandb` or `./data` written
relative to it would collide between them and land in the user's source tree. A trial runs in
a fresh folder instead, filled from `code_dir`:

- small files (source, configs) are copied, so a trial that rewrites one leaves the user's
  copy alone;
- large files (datasets, weights) are hard links, free in time and disk; a trial that opens
  one for writing in place would change the user's file too (the docs say so);
- folders that are not code (version control, virtual environments, caches, our own and
  W&B's stores) are left out.

After the script, :func:`written` lists what the trial created or changed there, which rank 0
logs as the trial's artifacts (:func:`pack`).

Program mode (`sweeps.worker.program`) runs its script there as a child process. A function
trial (`trainer.entrypoint` with a `code_dir`) runs with the view as the process's working
directory (:func:`entered`), each rank in its own view, as each rank of a script runs in its own.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Files at most this large are copied; larger ones are hard-linked.
COPY_MAX_BYTES = 1 << 20
# More files than this is a home or data folder, not a code folder: say so rather than copy it.
MAX_FILES = 20_000
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        ".sweeps",
        "mlruns",
        "wandb",
    }
)

MAX_ARTIFACTS_MB = 512  # what a trial wrote, uncompressed, at most
ARTIFACTS_DIR = "workdir"  # what a trial wrote in its working directory, in its artifacts

Snapshot = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns) as placed


class TooLarge(RuntimeError):
    """A trial wrote more than its artifacts may hold: the trial fails with this message."""


def source(code_dir: str) -> Path:
    """The folder a trial's view is made from: code_dir, relative to this worker's cwd (a Ray
    Job's working dir on this node), or that cwd when code_dir is not a folder here."""
    return Path(os.path.abspath(code_dir) if os.path.isdir(code_dir) else os.getcwd())


def make_view(code_dir: Path, dest: Path) -> Snapshot:
    """Fill `dest` (which exists) from `code_dir`; return what was placed there."""
    placed: Snapshot = {}
    for root, dirs, files in os.walk(code_dir):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        rel_root = os.path.relpath(root, code_dir)
        target_root = dest if rel_root == "." else dest / rel_root
        target_root.mkdir(exist_ok=True)
        for name in files:
            src = os.path.join(root, name)
            dst = target_root / name
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
                continue
            if len(placed) >= MAX_FILES:
                raise ValueError(
                    f"trainer.code_dir {code_dir} holds more than {MAX_FILES} files; each trial "
                    "runs in a copy of it: point trainer.code_dir at the folder with your code"
                )
            _place(src, dst)
            st = dst.stat()
            placed[os.path.relpath(dst, dest)] = (st.st_size, st.st_mtime_ns)
    return placed


def _place(src: str, dst: Path) -> None:
    if os.path.getsize(src) > COPY_MAX_BYTES:
        try:
            os.link(src, dst)
            return
        except OSError:  # another file system, or links not allowed: copy instead
            pass
    shutil.copy(src, dst)  # content and mode; its own mtime marks it as placed


def written(view: Path, placed: Snapshot) -> list[Path]:
    """Files under `view` that the trial created or changed (not what the view started with)."""
    out = []
    for root, dirs, files in os.walk(view):
        dirs.sort()
        for name in sorted(files):
            p = Path(root) / name
            if p.is_symlink():
                continue
            st = p.stat()
            if placed.get(os.path.relpath(p, view)) != (st.st_size, st.st_mtime_ns):
                out.append(p)
    return out


def pack(
    trial_dir: Path | None,
    limit_mb: int,
    work: Path | None = None,
    written: list[Path] | None = None,
) -> bytes | None:
    """The trial folder (program mode's SWEEPS_TRIAL_DIR), and what the trial wrote in its
    working directory (under `workdir/`), as tar.gz bytes; None when it wrote nothing."""
    files = [] if trial_dir is None else sorted(trial_dir.rglob("*"))
    named = [
        (p, str(p.relative_to(trial_dir))) for p in files if p.is_file() and not p.is_symlink()
    ]
    if work is not None:
        named += [(p, f"{ARTIFACTS_DIR}/{p.relative_to(work)}") for p in written or []]
    if not named:
        return None
    total = sum(p.stat().st_size for p, _ in named)
    if total > limit_mb * 2**20:
        where = "its working directory" + (" and SWEEPS_TRIAL_DIR" if trial_dir else "")
        raise TooLarge(
            f"the trial wrote {total / 2**20:.0f} MB in {where}: over the {limit_mb} MB limit "
            "on a trial's artifacts"
        )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p, arcname in named:
            tar.add(p, arcname=arcname, recursive=False)
    return buf.getvalue()


@dataclass
class View:
    """A trial's working directory, and what :func:`make_view` placed there."""

    path: Path
    placed: Snapshot

    def pack(self, limit_mb: int = MAX_ARTIFACTS_MB) -> bytes | None:
        """What the trial wrote here, as artifacts under `workdir/` (see :func:`pack`)."""
        return pack(None, limit_mb, self.path, written(self.path, self.placed))


@contextlib.contextmanager
def entered(code_dir: str, prefix: str) -> Iterator[View]:
    """The block runs with a fresh view of `code_dir` as the process's working directory; after
    it, the working directory is the one before and the view is gone (a lane's worker runs many
    trials, one after another, and none may inherit another's folder)."""
    before = os.getcwd()
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        view = View(base, make_view(source(code_dir), base))
        os.chdir(base)
        yield view
    finally:
        os.chdir(before)
        shutil.rmtree(base, ignore_errors=True)


def for_function(
    code_dir: str | None, trial: int, rank: int
) -> contextlib.AbstractContextManager[View | None]:
    """Where a function trial runs on this rank: its own view of code_dir, entered; a function
    without code_dir (an installed package's, a notebook's) keeps the worker's directory."""
    if not code_dir:
        return contextlib.nullcontext()
    return entered(code_dir, prefix=f"sweeps-trial{trial}-rank{rank}-")
