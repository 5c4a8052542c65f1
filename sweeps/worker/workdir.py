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
logs as the trial's artifacts.
"""

from __future__ import annotations

import os
import shutil
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

Snapshot = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns) as placed


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
