"""The message of a failed robustness test item: which threshold failed, by how much, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..results import FAIL, INCONCLUSIVE
from .summary import describe_changes, explanation_text

if TYPE_CHECKING:
    from ..explainers.base import ModelInfo
    from ..runner import Robustness


def failure_message(result: Robustness, *, model_info: ModelInfo | None = None) -> str:
    """Thresholds that failed with the measured interval, then the three worst pairs side by side."""
    model = model_info.label() if model_info is not None else result.model
    verdict = result.verdict
    lines = [f"robustness gate {verdict.outcome} for {result.kind} · model {model} · "
             f"{len(result.pairs)} pairs from {result.combined.n_clusters} users ({verdict.mode} decision)"]
    for check in verdict.checks:
        if check.outcome in (FAIL, INCONCLUSIVE):
            note = " (fragile: the interval straddles the threshold)" if check.fragile else ""
            lines.append(f"  {check.quantity:<10} {check.interval.fmt()}  {check.outcome}: needs "
                         f"≥ {check.threshold:.2f}{note}")
    if verdict.message:
        lines.append(f"  {verdict.message}")
    if result.failures:
        lines.append(f"  generation failures: {len(result.failures)} pairs scored 0")
    lines.append("worst pairs:")
    for rank, pair in enumerate(result.worst, 1):
        lines.append(f"  {rank}. {pair.key.label()} · ρ {pair.combined:.3f} · "
                     f"{describe_changes(pair.changes)}")
        lines.append(f"     original : {explanation_text(pair, 'original')}")
        lines.append(f"     perturbed: {explanation_text(pair, 'perturbed')}")
    return "\n".join(lines)
