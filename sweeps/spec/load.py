"""Reading a spec: YAML file or dict, `--set key.path=value` overrides, one-line errors."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from sweeps.common import names
from sweeps.common.errors import SpecError, one_line
from sweeps.spec.models import Spec, TrainerSpec


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


# Other tools' words for a field (Katib's metrics collector `source`/`kind`, Ray Tune's and
# W&B's `mode`/`goal`, Optuna's `n_trials`): no spelling is close, the meaning is.
SYNONYMS = {
    "source": "collector",
    "kind": "collector",
    "mode": "direction",
    "goal": "direction",
    "n_trials": "trials",
    "max_trials": "trials",
}


def _step(ann: Any, key: Any) -> Any:
    """The type one step down a validation error's location: a model's field, a list's or a
    dict's value, or the member of a tagged union (`search_space.lr.float`) that `key` names."""
    while get_origin(ann) is Annotated:
        ann = get_args(ann)[0]
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        for fname, f in ann.model_fields.items():
            if key in (fname, f.alias):
                return f.annotation
        return None
    if get_origin(ann) in (list, dict):
        return get_args(ann)[-1]
    members = [a for a in get_args(ann) if a is not type(None)]
    if len(members) == 1:  # X | None
        return _step(members[0], key)
    for m in members:
        is_model = isinstance(m, type) and issubclass(m, BaseModel)
        tag = m.model_fields.get("type") if is_model else None
        if tag is not None and get_args(tag.annotation) == (key,):
            return m
    return None


def field_hint(loc: tuple[Any, ...]) -> str:
    """For an unknown field: `; did you mean 'x'?` when one known field is close, else the
    fields that are known there."""
    ann: Any = Spec
    for key in loc[:-1]:
        ann = _step(ann, key)
    while get_origin(ann) is Annotated or get_origin(ann) in (Union, UnionType):
        args = [a for a in get_args(ann) if a is not type(None)]
        ann = args[0] if len(args) == 1 or get_origin(ann) is Annotated else None
    if not (isinstance(ann, type) and issubclass(ann, BaseModel)) or not loc:
        return ""
    known = [f.alias or fname for fname, f in ann.model_fields.items()]
    word = str(loc[-1])
    close = [SYNONYMS[word]] if SYNONYMS.get(word) in known else []
    close = close or difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else f"; known fields: {', '.join(known)}"


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
            msg = "unknown field" + field_hint(e["loc"])
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
    return spec.model_copy(update={"trainer": _resolved(spec.trainer, p.parent)})


def _resolved(trainer: TrainerSpec, folder: Path) -> TrainerSpec:
    """A spec ships next to its code: its relative folders are read from the spec file's
    folder, not the shell's (code_dir, and an AI Platform job's package_path, which is its
    code_dir on the workers)."""
    update: dict[str, Any] = {}
    if trainer.code_dir and not Path(trainer.code_dir).is_absolute():
        update["code_dir"] = str((folder / trainer.code_dir).resolve())
    package = trainer.params.get("package_path")
    if (
        trainer.entrypoint == names.AIPLATFORM_ENTRYPOINT
        and isinstance(package, str)
        and package
        and not Path(package).is_absolute()
    ):
        update["params"] = {**trainer.params, "package_path": str((folder / package).resolve())}
    return trainer.model_copy(update=update) if update else trainer
