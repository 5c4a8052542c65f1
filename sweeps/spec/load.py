"""Reading a spec: YAML file or dict, `--set key.path=value` overrides, one-line errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sweeps.common.errors import SpecError, one_line
from sweeps.spec.models import Spec


def _set_path(raw: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node: Any = raw
    for k in keys[:-1]:
        if not isinstance(node, dict):
            raise SpecError(f"--set {path}: '{k}' is not a mapping")
        node = node.setdefault(k, {})
        if node is None:
            node = {}
    if not isinstance(node, dict):
        raise SpecError(f"--set {path}: parent is not a mapping")
    node[keys[-1]] = value


def parse_overrides(items: list[str]) -> list[tuple[str, Any]]:
    """`key.path=value` strings to (path, YAML-parsed value) pairs."""
    out = []
    for item in items:
        if "=" not in item:
            raise SpecError(f"--set {item}: expected key.path=value")
        key, _, text = item.partition("=")
        if not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key.strip()):
            raise SpecError(f"--set {item}: bad key path '{key}'")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            value = text
        out.append((key.strip(), value))
    return out


def format_validation_error(err: ValidationError) -> str:
    """One line: `field.path: problem` for each error, joined by '; '."""
    parts = []
    for e in err.errors()[:5]:
        loc = ".".join(
            str(x)
            for x in e["loc"]
            if not (isinstance(x, str) and x in ("float", "int", "categorical"))
        )
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "literal_error":
            msg = f"unknown value {e.get('input')!r}; {msg.lower()}"
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = len(err.errors()) - 5
    line = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    return " ".join(line.split())


def spec_from_dict(raw: Any, overrides: list[str] | None = None) -> Spec:
    if not isinstance(raw, dict):
        raise SpecError("spec: the top level must be a mapping of fields")
    raw = dict(raw)
    for path, value in parse_overrides(overrides or []):
        _set_path(raw, path, value)
    try:
        return Spec.model_validate(raw)
    except ValidationError as err:
        raise SpecError(f"invalid spec: {format_validation_error(err)}") from None
    except (TypeError, ValueError, RecursionError) as err:
        raise SpecError(f"invalid spec: {one_line(err, 2000)}") from None


def read_yaml(p: Path, what: str) -> Any:
    """A YAML file's content; a missing file, bad YAML or an unreadable file is a one-line
    :class:`SpecError` naming the file (and the line and column of a syntax error)."""
    if not p.is_file():
        raise SpecError(f"{what} not found: {p}")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise SpecError(f"{p}: YAML error{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{p}: cannot read: {err}") from None


def read_mapping(path: str | Path, what: str, expected: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping (a W&B or AI Platform config)."""
    p = Path(path)
    data = read_yaml(p, what)
    if not isinstance(data, dict):
        raise SpecError(f"{p}: expected {expected}")
    return data


def load_spec(
    path: str | Path, overrides: list[str] | None = None, name: str | None = None
) -> Spec:
    """Read, override and validate a spec file; every problem is a one-line :class:`SpecError`."""
    p = Path(path)
    raw = read_yaml(p, "spec file")
    if raw is None:
        raise SpecError(f"{p}: the spec is empty")
    if name is not None and isinstance(raw, dict):
        raw = {**raw, "name": name}
    spec = spec_from_dict(raw, overrides)
    code_dir = spec.trainer.code_dir
    if code_dir and not Path(code_dir).is_absolute():
        # A spec ships next to its code: resolve code_dir from the spec file, not the shell.
        resolved = str((p.parent / code_dir).resolve())
        spec = spec.model_copy(
            update={"trainer": spec.trainer.model_copy(update={"code_dir": resolved})}
        )
    return spec
