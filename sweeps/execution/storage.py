"""Where lanes persist checkpoints: a local folder or gs://bucket/prefix, as Ray Train sees it.

Ray Train resolves storage through pyarrow, which knows nothing of the GCS emulator that tests
and on-premises setups use; both the lane's RunConfig and a resumed trial's checkpoint go
through here so a `gs://` URI means the same bucket everywhere.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any


def filesystem(uri: str, env: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """(pyarrow filesystem or None, path within it) for a storage URI.

    `env`: the lane's environment. The lane's RunConfig is built in the lane host, a process
    that may predate this sweep (a service's, or a Ray started before the variable was set):
    its own environment would send gs:// to the real GCS, where pyarrow retries for 15 min."""
    emulator = (env or {}).get("STORAGE_EMULATOR_HOST") or os.environ.get("STORAGE_EMULATOR_HOST")
    if uri.startswith("gs://") and emulator:
        from pyarrow.fs import GcsFileSystem

        scheme, _, hostport = emulator.rpartition("://")
        fs = GcsFileSystem(anonymous=True, endpoint_override=hostport, scheme=scheme or "http")
        return fs, uri.removeprefix("gs://")
    return None, uri


def scheme(root: str) -> str:
    """The prefix that turns a path in the storage filesystem back into a URI."""
    return "gs://" if root.startswith("gs://") else ""


def checkpoint_at(uri: str) -> Any:
    """A ray.train.Checkpoint for a persisted checkpoint URI (recorded by an earlier attempt)."""
    import ray.train

    fs, path = filesystem(uri)
    if fs is None and uri.startswith("gs://"):
        from pyarrow.fs import FileSystem

        fs, path = FileSystem.from_uri(uri)
    if fs is None:
        return ray.train.Checkpoint(path)
    return ray.train.Checkpoint(path, filesystem=fs)


def _fs_of(uri: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path) for a gs:// URI, the emulator's where one is set."""
    fs, path = filesystem(uri)
    if fs is None:
        from pyarrow.fs import FileSystem

        fs, path = FileSystem.from_uri(uri)
    return fs, path


def delete_tree(uri: str) -> None:
    """Delete a persisted checkpoint's folder; one already gone is fine (Ray or an earlier
    pass may have deleted it)."""
    if not uri.startswith("gs://"):
        if os.path.exists(uri):
            shutil.rmtree(uri)
        return
    from pyarrow.fs import FileSelector, FileType

    # Object by object: pyarrow's delete_dir also deletes a `path/` marker object, and fails
    # with NOT_FOUND where none was written (Ray Train writes none).
    fs, path = _fs_of(uri)
    for info in fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True)):
        if info.type is FileType.File:
            fs.delete_file(info.path)


def tree_bytes(uri: str) -> int:
    """The bytes of the files under a checkpoint's folder (0 when it is gone)."""
    if not uri.startswith("gs://"):
        total = 0
        for folder, _, files in os.walk(uri):
            total += sum(os.path.getsize(os.path.join(folder, f)) for f in files)
        return total
    from pyarrow.fs import FileSelector, FileType

    fs, path = _fs_of(uri)
    infos = fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
    return sum(i.size or 0 for i in infos if i.type is FileType.File)
