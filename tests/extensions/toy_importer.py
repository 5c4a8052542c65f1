"""An importer as a newcomer writes one: a tiny INI-style format, `key = low..high` per line."""

from pathlib import Path
from typing import Any

from sweeps.common.errors import SpecError
from sweeps.importers.base import Importer


class RangesImporter(Importer):
    name = "ranges"
    reads = "a file of `param = low..high` lines"

    def read(self, path: Path) -> dict[str, Any]:
        out = {}
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            key, sep, rng = line.partition("=")
            low, dots, high = rng.strip().partition("..")
            if not sep or not dots:
                raise SpecError(f"{path.name}:{n}: expected `param = low..high`")
            out[key.strip()] = (float(low), float(high))
        return out

    def to_spec(
        self, config: dict[str, Any], *, source: Path, name: str | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        space = {k: {"type": "float", "low": lo, "high": hi} for k, (lo, hi) in config.items()}
        return {"name": name or source.stem, "search_space": space}, ["built-in trainer used"]
