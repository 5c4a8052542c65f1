"""Copy a `gs://bucket/prefix` once per node into a local cache, shared by the node's workers.

Files whose size and etag already match the manifest are not fetched again; a file lock keeps
concurrent workers from downloading the same prefix twice, and each file lands atomically.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from sweeps.common.errors import one_line


def client():  # noqa: ANN202 - google's client type is heavy to import at module level
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="test", credentials=AnonymousCredentials())
    return storage.Client()


def split_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// URI: {uri}")
    bucket, _, prefix = uri[5:].partition("/")
    return bucket, prefix.strip("/")


def cache_dir(uri: str, cache_root: str | None = None) -> Path:
    bucket, prefix = split_uri(uri)
    root = cache_root or os.environ.get("SWEEPS_DATA_CACHE") or "~/.cache/sweeps/data"
    return Path(root).expanduser() / bucket / prefix


def sync_prefix(uri: str, cache_root: str | None = None) -> str:
    """Mirror the prefix locally; returns the local folder. Raises DatasetNotFound if empty."""
    from trainer.errors import DatasetNotFound

    bucket_name, prefix = split_uri(uri)
    local = cache_dir(uri, cache_root)
    local.mkdir(parents=True, exist_ok=True)
    manifest_path = local / ".sweeps-manifest.json"
    with open(local / ".sweeps-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one downloader per node; the others wait and reuse
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
        try:
            blobs = list(client().list_blobs(bucket_name, prefix=prefix + "/" if prefix else ""))
        except Exception as e:
            raise DatasetNotFound(f"cannot list {uri}: {one_line(e, 200)}") from None
        if not blobs:
            raise DatasetNotFound(f"no files under {uri}; sweeps never downloads public data")
        for blob in blobs:
            rel = blob.name[len(prefix) :].lstrip("/") if prefix else blob.name
            if not rel or rel.endswith("/"):
                continue
            dest = local / rel
            seen = manifest.get(rel)
            if seen and seen == [blob.size, blob.etag] and dest.exists():
                if dest.stat().st_size == blob.size:
                    continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".part")
            blob.download_to_filename(str(tmp))
            os.replace(tmp, dest)
            manifest[rel] = [blob.size, blob.etag]
        manifest_path.write_text(json.dumps(manifest))
    return str(local)
