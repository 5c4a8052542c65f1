"""Tiny training functions for the benches (shipped to workers via trainer.code_dir)."""

from __future__ import annotations

import sweeps


def tiny(config: dict) -> dict:
    """One report, no training: measures what the service itself costs per trial."""
    sweeps.report({"val_accuracy": float(config["lr"])})
    return {"val_accuracy": float(config["lr"])}
