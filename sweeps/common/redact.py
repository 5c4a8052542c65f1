"""Secrets never reach MLflow, reports or the terminal: secret-looking keys are masked."""

from __future__ import annotations

import re
from typing import Any

SECRET_KEY = re.compile(r"(passw|token|secret|api[_-]?key|(^|[_.-])key$|credential|auth)", re.I)
MASK = "***"


def is_secret(name: str) -> bool:
    return bool(SECRET_KEY.search(name))


def redact_mapping(data: Any, prefix: str = "") -> Any:
    """A copy of `data` with every value under a secret-looking key replaced by ***."""
    if isinstance(data, dict):
        return {
            k: (MASK if is_secret(str(k)) and v is not None else redact_mapping(v, f"{prefix}.{k}"))
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [redact_mapping(v, prefix) for v in data]
    return data


_URL_PASSWORD = re.compile(r"(://[^:/@]+):[^@]*@")


def mask_url(url: str) -> str:
    """A store URL with its password masked: `postgresql://u:***@host/db`."""
    return _URL_PASSWORD.sub(r"\1:***@", url)


def redact_text(text: str, secrets: list[str]) -> str:
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, MASK)
    return text


def redacted_spec_yaml(spec: Any) -> str:
    """The spec as YAML with secret-looking fields masked and the storage URL's password
    hidden: what the study and the parent run keep, and what `sweeps resume` reads back."""
    import yaml

    data = redact_mapping(spec.model_dump(mode="json", by_alias=True), "")
    if data.get("storage"):
        data["storage"] = mask_url(data["storage"])
    return yaml.safe_dump(data, sort_keys=False)
