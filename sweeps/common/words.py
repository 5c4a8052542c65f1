"""Counted nouns in messages a person reads: "1 worker", "2 workers"."""

from __future__ import annotations


def plural(n: float, word: str, many: str | None = None) -> str:
    """`n` and the noun, singular for exactly one: plural(1, "worker") == "1 worker".
    `many`: the plural where it is not `word` + "s" ("GPU-hours" stays as given)."""
    noun = word if n == 1 else (many or word + "s")
    shown = int(n) if isinstance(n, float) and n.is_integer() else n
    return f"{shown} {noun}"
