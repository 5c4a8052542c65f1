"""The base class of an importer: another tool's config file, as that tool reads it, becomes a
native spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar


class Importer:
    """Reads one tool's config and turns it into a spec.

    To add one: a module in `sweeps/importers/` with a subclass that sets `name` and `reads`
    and implements `read` and `to_spec`, and one line in `sweeps.common.names.IMPORTERS`.
    `sweeps import NAME FILE` then prints the spec, with notes on stderr.
    """

    name: ClassVar[str] = ""
    reads: ClassVar[str] = ""  # what kind of file, for `sweeps import --help`

    def read(self, path: Path) -> dict[str, Any]:
        """The config file's contents. Raises SpecError saying what is wrong with it."""
        raise NotImplementedError

    def to_spec(
        self, config: dict[str, Any], *, source: Path, name: str | None = None
    ) -> tuple[dict[str, Any], list[str]]:
        """The native spec as a raw dict, and notes on what was approximated or left out.
        `source` is the config file: paths in it are relative to its folder."""
        raise NotImplementedError
