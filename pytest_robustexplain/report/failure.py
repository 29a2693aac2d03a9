"""The message of a failed robustness test item: which threshold failed, by how much, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..results import FAIL, INCONCLUSIVE, INSENSITIVE, AttackResult, GuardResult
from .summary import also_failed, describe_changes, explanation_text, trim

if TYPE_CHECKING:
    from ..results import ModelInfo, Robustness


def _header(result: Robustness, model_info: ModelInfo | None) -> str:
    model = model_info.label() if model_info is not None else result.model
    verdict = result.verdict
    return (f"robustness gate {verdict.outcome} for {result.kind} · model {model} · "
            f"{len(result.pairs)} pairs from {result.combined.n_clusters} users ({verdict.mode} decision)")


def same_finding_message(result: Robustness, first: str, *, model_info: ModelInfo | None = None) -> str:
    """An INSENSITIVE item after the first of its model: its header and where the finding — one root cause,
    the explainer ignoring the user — is said in full, not its paragraph again in every item (issue 62)."""
    guard = result.guard
    shown = f" (sensitivity {guard.sensitivity.fmt()})" if guard is not None else ""
    return (f"{_header(result, model_info)}\n  INSENSITIVE{shown}: the explanations do not depend on the "
            f"user's history, the same finding as {first}, said in full there")


def failure_message(result: Robustness, *, model_info: ModelInfo | None = None, verbose: bool = True,
                    quiet: bool = False) -> str:
    """Thresholds that failed with the measured interval, then the three worst pairs side by side; for
    an INSENSITIVE gate, the guard's finding and one case explained for two users instead.

    ``verbose=False`` (pytest without ``-v``): the failed checks on one line, and the worst pairs left to
    the robustness report, which lists each failed item's worst pairs once — unless ``quiet`` (``-q``), whose
    report is one line a model: then only ``-v`` shows them.
    """
    verdict = result.verdict
    lines = [_header(result, model_info)]
    if not verbose and verdict.outcome == FAIL:  # what was planted and read stays: it is the finding
        # Every pair failed: the scores are all 0, and the verdict's message leads with why.
        every_failed = bool(result.pairs) and len(result.failures) == len(result.pairs)
        reason = verdict.message if every_failed and verdict.message else _short_reason(result, quiet)
        lines.append(f"  {reason}")
        if result.failures:
            lines.append(f"  generation failures: {len(result.failures)} pairs scored 0")
        for attack in verdict.attacks:
            if attack.outcome == FAIL:
                lines.extend(attack_example_lines(attack))
        return "\n".join(lines)
    for check in verdict.checks:
        if check.outcome in (FAIL, INCONCLUSIVE):
            note = " (fragile: the interval straddles the threshold)" if check.fragile else ""
            lines.append(f"  {check.quantity:<10} {check.interval.fmt()}  {check.outcome}: needs "
                         f"≥ {check.threshold:.2f}{note}")
    if verdict.message:
        lines.append(f"  {verdict.message}")
    if result.failures:
        lines.append(f"  generation failures: {len(result.failures)} pairs scored 0")
    guard = result.guard
    if verdict.outcome == INSENSITIVE and guard is not None:
        lines.extend(guard_example_lines(guard))
        return "\n".join(lines)
    for attack in verdict.attacks:
        if attack.outcome == FAIL:
            lines.extend(attack_example_lines(attack))
    lines.append("worst pairs:")
    for rank, pair in enumerate(result.worst, 1):
        lines.append(f"  {rank}. {pair.key.label()} · ρ {pair.combined:.3f} · "
                     f"{describe_changes(pair.changes)}")
        lines.append(f"     original : {explanation_text(pair, 'original')}")
        lines.append(f"     perturbed: {explanation_text(pair, 'perturbed')}")
    return "\n".join(lines)


def _short_reason(result: Robustness, quiet: bool = False) -> str:
    """The failed checks with their thresholds, else the verdict message (a regression, the guard)."""
    checks = result.verdict.failed_checks
    if not checks:  # a regression or guard finding: its message is the reason, with every number
        return result.verdict.message
    said = "; ".join(f"{c.quantity} {c.interval.fmt()} is below its threshold {c.threshold:g}"
                     for c in checks)
    also = also_failed(result.verdict)
    said = f"{said}; also {also}" if also else said
    found = result.regression
    if found is not None:  # how it compares with the baseline, in one clause either way
        said += (f"; against the baseline: no regression beyond the margin {found.margin:g}" if found.passed
                 else f"; against the baseline: {found.message.split('. ')[0]}")
    where = "-v shows them" if quiet else "in the summary below; -v shows them here"
    return f"{said} (worst pairs: {where})"


def attack_example_lines(attack: AttackResult, limit: int = 200) -> list[str]:
    """The first successful attacks: what was planted and the explanation the user would have read."""
    lines = [f"{attack.kind} examples (planted → explanation):"]
    for example in attack.examples:
        lines.append(f"  user {trim(str(example.get('user_id', '')), 40)} · L{example.get('severity')} · "
                     f"planted {trim(str(example.get('planted', '')), 80)}")
        lines.append(f"     explanation: {trim(str(example.get('explanation', '')), limit)}")
    return lines


def guard_example_lines(guard: GuardResult, limit: int = 200) -> list[str]:
    """One case side by side: the item explained for the user and for a donor user (another history)."""
    example = guard.example
    if example is None:
        return []
    same = " (word for word the same)" if " ".join(example.user_text.split()) == " ".join(
        example.donor_text.split()) else ""
    width = max(len(example.user_id), len(example.donor_id))
    return [f"example: item {example.item_id} explained for user {example.user_id} and, under the same "
            f"identity, for user {example.donor_id}'s interactions · ρ {example.combined:.3f}{same}",
            f"  user {example.user_id:<{width}} : {trim(example.user_text, limit)}",
            f"  user {example.donor_id:<{width}} : {trim(example.donor_text, limit)}"]
