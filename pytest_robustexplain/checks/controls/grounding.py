"""Grounding, measured on the cross-user controls' original explanations (``metrics.mentions`` annotates
each text): the share that refer to the user's history, the share that name a catalog category or title from
neither the history nor the item, their fixed rule and their sentence."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...results import FAIL, PASS, GuardResult, Interval, PairResult
from .cases import (
    UNSUPPORTED_RULE,
    GuardSettings,
    share_lower_bound,
    share_upper_bound,
    stopped_note,
    t_interval,
    user_share,
)
from .copying import copies_prompt

# (user, grounding, swap) of each case read for grounding
Grounded = list[tuple[str, Mapping[str, Any], PairResult]]


def grounded_rows(swaps: Sequence[PairResult]) -> Grounded:
    """(user, grounding, swap) of the cases whose original explanation was read for grounding."""
    return [(s.key.user_id, s.changes["grounding"], s) for s in swaps
            if isinstance(s.changes.get("grounding"), Mapping) and s.original.strip()]


def _refers(grounding: Mapping[str, Any], swap: PairResult) -> float:
    # A hedge, a list of the history or a copy of the prompt mentions the history without referring to it.
    return 1.0 if grounding.get("history") and not grounding.get("hedging") and not grounding.get("listed") \
        and not copies_prompt(swap) else 0.0


def _unsupported(grounding: Mapping[str, Any]) -> float:
    # A catalog category or title from neither the history nor the item (a made-up taste or purchase).
    return 1.0 if grounding.get("unsupported") else 0.0


def grounding_intervals(rows: Grounded, alpha: float) -> tuple[Interval | None, Interval | None]:
    """The grounding rates' intervals over the cases read for grounding (:func:`grounded_rows`)."""
    if not rows:
        return None, None
    users = [u for u, _, _ in rows]
    history = [_refers(g, s) for _, g, s in rows]
    unsupported = [_unsupported(g) for _, g, _ in rows]
    return t_interval(history, users, alpha), t_interval(unsupported, users, alpha)


def grounding_decision(rows: Grounded, settings: GuardSettings) -> str | None:
    """FAIL when the history-reference rate is confidently below ``min_history_reference`` or the
    unsupported-mention rate confidently above ``max_unsupported_rate`` (one-sided exact bounds with users
    as the unit, :func:`user_share`; with both gated each rule takes half the check's alpha, so that
    their union holds it — at alpha each they reached 7.5–11 % with both rates at their limits); None when
    neither is gated or nothing was measured. Under ``decision=sequential`` each rule's own test, when it
    ran, spent its share of that rule's alpha (``GuardSettings.alpha_of``; checks/grounding.py)."""
    gated = [r for r in (settings.min_history_reference, settings.max_unsupported_rate) if r is not None]
    if not rows or not gated:
        return None
    checks = []
    if settings.min_history_reference is not None:
        k, g = user_share([(u, _refers(gr, s)) for u, gr, s in rows])
        alpha = settings.alpha_of("grounding") / len(gated)
        checks.append(share_upper_bound(k, g, alpha) < settings.min_history_reference)
    if settings.max_unsupported_rate is not None:
        k, g = user_share([(u, _unsupported(gr)) for u, gr, _ in rows])
        alpha = settings.alpha_of(UNSUPPORTED_RULE) / len(gated)
        checks.append(share_lower_bound(k, g, alpha) > settings.max_unsupported_rate)
    return FAIL if any(checks) else PASS


def user_history_reference(swaps: Sequence[PairResult]) -> float | None:
    """The share of the user's original explanations that refer to their history (None: none read)."""
    rows = grounded_rows(swaps)
    return math.fsum(_refers(g, s) for _, g, s in rows) / len(rows) if rows else None


def user_unsupported_share(swaps: Sequence[PairResult]) -> float | None:
    """The share of the user's original explanations that name a catalog category or title from neither
    their history nor the item (None: none read)."""
    rows = grounded_rows(swaps)
    return math.fsum(_unsupported(g) for _, g, _ in rows) / len(rows) if rows else None


def grounding_message(g: GuardResult) -> str:
    """The grounding rates in words (and the grounding gate's verdict)."""
    gr = g.grounding
    if gr.history_reference is None:
        return ""
    text = (f"{100 * gr.history_reference.mean:.0f} % of explanations refer to something from the user's "
            f"history (rate {gr.history_reference.fmt(2)}; a hedge naming most categories, a list of the "
            "history or a copied prompt does not count)")
    if gr.unsupported is not None:
        text += f"; {100 * gr.unsupported.mean:.0f} % mention a catalog category or title from neither"
    if gr.outcome == FAIL:
        limits = []
        if gr.min_history_reference is not None:
            limits.append(f"history references needed ≥ {gr.min_history_reference:g}")
        if gr.max_unsupported_rate is not None:
            limits.append(f"unsupported mentions at most {gr.max_unsupported_rate:g}")
        text += f" — confidently outside the limits ({', '.join(limits)})"
    return text + "." + stopped_note(g, "grounding")
