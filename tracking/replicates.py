"""Replicated winners (`evaluate`) in the learning log: a replicate's run, nested under the run
of the trial whose params it reruns, and the report's table of mean ± 95% interval per
configuration, read from the study (names.replicates_of_trial)."""

from __future__ import annotations

from typing import Any

from sweeps.common import names


def replicate_run(
    tags: dict[str, str], sweep: str, replicate: tuple[int, int, int]
) -> tuple[dict[str, str], str]:
    """Pure: a replicate run's tags and name. It carries no trial number: a lookup of trial N's
    run (find_trial_run) must never find one of its replicates."""
    source, i, n = replicate
    out = {k: v for k, v in tags.items() if k != names.TRIAL_NUMBER}
    out[names.ROLE] = "replicate"
    out[names.REPLICATE_OF] = str(source)
    out[names.REPLICATE] = f"{i}/{n}"
    return out, f"{sweep}-trial-{source:04d}-rep{i}"


def collect(attrs: dict[str, Any], maximize: bool) -> list[dict[str, Any]]:
    """Pure: the replicated configurations recorded on the study, best mean first (those
    without a mean last)."""
    rows = []
    for key, rec in attrs.items():
        if key.startswith(names.REPLICATES_OF_TRIAL_PREFIX) and isinstance(rec, dict):
            number = int(key.removeprefix(names.REPLICATES_OF_TRIAL_PREFIX))
            rows.append({"number": number, **rec})
    sign = -1.0 if maximize else 1.0
    rows.sort(key=lambda r: (r.get("mean") is None, sign * (r.get("mean") or 0.0), r["number"]))
    return rows


def interval_text(r: dict[str, Any], nd: int = 4) -> str:
    """Pure: '0.9512 ± 0.0081 [0.9431, 0.9593]', or what is missing."""
    mean, low, high = r.get("mean"), r.get("ci95_low"), r.get("ci95_high")
    if mean is None:
        return "no replicate completed"
    if low is None or high is None:
        return f"{mean:.{nd}f} (no interval: one value)"
    return f"{mean:.{nd}f} ± {(high - low) / 2:.{nd}f} [{low:.{nd}f}, {high:.{nd}f}]"


def render(rows: list[dict[str, Any]], objective: str) -> list[str]:
    """Pure: the report's section (Markdown lines); none without replicates."""
    if not rows:
        return []
    out = [
        "",
        "## Replicated configurations",
        "",
        "Each configuration rerun with new seeds after the search (its trial's own value left "
        "out); ranked by the mean, with its 95% interval (Student t).",
        "",
        f"| trial | {objective} mean ± 95% CI | n | failed | values |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        values = ", ".join(f"{v:.4g}" for v in r.get("values") or [])
        out.append(
            f"| {r['number']} | {interval_text(r)} | {r.get('n', 0)} | {r.get('failed', 0)} "
            f"| {values} |"
        )
    return out
