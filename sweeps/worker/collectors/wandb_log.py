"""The W&B adapter: reads a run's transaction log (`run-<id>.wandb`) while wandb writes it.

W&B's own Python reader (`wandb.sdk.internal.datastore`) is gone from the installed releases
(0.31 writes the log from its Go core), so the file is parsed here. Its format is LevelDB's log
(github.com/google/leveldb doc/log_format.md: 32 KiB blocks of chunks, each `crc32 | length |
type | data`) after a 7-byte W&B header (`:W&B`, magic 0xBEE1, version 0), as described in
wandb's `core/pkg/leveldb/record.go`; the checksum is zlib's CRC-32 of the type byte and data.
Each record is a protobuf `wandb_internal.Record`, decoded with the user's own wandb package:
this module is the one place that names its private `wandb.proto` module.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sweeps.common.extras import install_hint

TESTED = "0.31.0"  # the wandb release this reader was tested against
HEADER = b":W&B" + struct.pack("<H", 0xBEE1) + b"\x00"
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# W&B's own keys in a history row: the step, and wall-clock times.
INTERNAL_KEYS = ("_step", "_runtime", "_timestamp", "_wandb")
# wandb's private setting `x_transaction_log_flush_interval` (default 15 s; `WANDB__X` sets
# `x_x`): how often a running run's records reach the file. 1 s lets pruning act on each epoch.
FLUSH_ENV = "WANDB__TRANSACTION_LOG_FLUSH_INTERVAL"
FLUSH_S = 1.0

_record_class: Any = None


class LogFormatError(RuntimeError):
    """The file is not a W&B transaction log this reader knows."""


def record_class() -> Any:
    """wandb's `Record` message; one line when wandb is missing or of an untested major."""
    global _record_class
    if _record_class is None:
        try:
            import wandb
            from wandb.proto import wandb_internal_pb2
        except ImportError as e:
            raise RuntimeError(
                f"the wandb collector needs the wandb package ({e}): {install_hint('wandb')}"
            ) from None
        version = str(getattr(wandb, "__version__", "?"))
        if version.split(".")[0] != TESTED.split(".")[0]:
            raise RuntimeError(
                f"wandb {version}: the wandb collector is tested with wandb {TESTED}; "
                "its transaction log may differ: pin wandb<1"
            )
        _record_class = wandb_internal_pb2.Record
    return _record_class


class LogReader:
    """Whole records of one growing transaction log, from where the last read stopped.

    A chunk not fully written yet (short, or its checksum not matching yet) ends this read; the
    next read starts again at the first chunk of the record it belonged to.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0  # the file offset of the next record's first chunk

    def read(self) -> list[bytes]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()  # only what came since the last whole record
        except OSError:
            return []
        base = self.offset
        if base == 0:
            if len(data) < len(HEADER):
                return []
            if data[: len(HEADER)] != HEADER:
                raise LogFormatError(f"{self.path}: not a W&B transaction log (header)")
            self.offset = len(HEADER)
        out, pos, parts = [], self.offset, []
        while True:
            chunk = _chunk(data, pos, base)
            if chunk is None:
                return out
            kind, payload, pos = chunk
            if kind in (FULL, FIRST):
                parts = [payload]
            elif parts:
                parts.append(payload)
            if kind in (FULL, LAST) and parts:
                out.append(b"".join(parts))
                parts = []
                self.offset = pos


def _chunk(data: bytes, pos: int, base: int) -> tuple[int, bytes, int] | None:
    """(type, payload, next position) of the chunk at file offset `pos` (`data` starts at file
    offset `base`); None when it is not all there yet."""
    left = BLOCK - pos % BLOCK
    if left < CHUNK_HEADER:  # a block's tail too short for a header is zero padding
        pos += left
    at = pos - base
    if at + CHUNK_HEADER > len(data):
        return None
    checksum, length, kind = struct.unpack_from("<IHB", data, at)
    payload = data[at + CHUNK_HEADER : at + CHUNK_HEADER + length]
    if kind == 0 and length == 0 or len(payload) < length:
        return None  # preallocated zeros, or a chunk still being written
    if zlib.crc32(payload, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
        return None
    return kind, payload, pos + CHUNK_HEADER + length


def _value(item: Any) -> Any:
    """A history item's value: its JSON (older writers), else its typed field."""
    if item.value_json:
        try:
            return json.loads(item.value_json)
        except ValueError:
            return None
    which = item.WhichOneof("value") if "value" in type(item).DESCRIPTOR.oneofs_by_name else None
    return getattr(item, which) if which else None


def history_rows(records: list[bytes]) -> Iterator[tuple[int | None, dict[str, Any]]]:
    """(`_step`, {key: value}) of each history record; nested keys joined with "." as W&B's
    UI names them."""
    cls = record_class()
    for blob in records:
        rec = cls()
        try:
            rec.ParseFromString(blob)
        except Exception:  # a record this protobuf cannot decode is not a history row
            continue
        if rec.WhichOneof("record_type") != "history":
            continue
        row: dict[str, Any] = {}
        for item in rec.history.item:
            key = ".".join(item.nested_key) if item.nested_key else item.key
            row[key] = _value(item)
        step = row.get("_step")
        if isinstance(step, bool) or not isinstance(step, int | float):
            step = rec.history.step.num if rec.history.HasField("step") else None
        yield (None if step is None else int(step)), row
