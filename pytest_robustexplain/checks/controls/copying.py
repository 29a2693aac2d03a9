"""Copying, measured on the cross-user controls' original explanations: the share that copy their prompt
back (``metrics.copies``) or list the user's history back (``metrics.mentions``' ``listed``), with users as
the unit, and its sentence."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ...results import GuardResult, PairResult
from .cases import share_lower_bound, share_upper_bound, stopped_note, user_share


def _copy_read(swaps: Sequence[PairResult]) -> list[PairResult]:
    """The cross-user controls whose original explanation was read for copying."""
    return [s for s in swaps if s.failure is None and isinstance(s.changes.get("copied"), (int, float))]


def copies_prompt(swap: PairResult) -> bool:
    """Whether the original explanation copies its prompt back, or lists the user's history back (grounding's
    ``listed``: as many history titles as make a list) — a copy of the prompt's history in other words."""
    from ...metrics.copies import is_copy  # lazy: kept off the plugin's import

    share, grounding = swap.changes.get("copied"), swap.changes.get("grounding")
    listed = isinstance(grounding, Mapping) and bool(grounding.get("listed"))
    return (isinstance(share, (int, float)) and is_copy(float(share))) or listed


def user_copy_share(swaps: Sequence[PairResult]) -> float | None:
    """The share of the user's original explanations that copy their prompt back (None: none measured)."""
    rows = _copy_read(swaps)
    return math.fsum(copies_prompt(s) for s in rows) / len(rows) if rows else None


def copy_rate(swaps: Sequence[PairResult], alpha: float) -> tuple[int, int, float, float]:
    """(copies, explanations, one-sided lower bound, one-sided upper bound) of the copy rate; the bounds
    take users as the unit (:func:`user_share`)."""
    rows = [(s.key.user_id, copies_prompt(s)) for s in _copy_read(swaps)]
    k, g = user_share(rows)
    low, high = share_lower_bound(k, g, alpha), share_upper_bound(k, g, alpha)
    return sum(copied for _, copied in rows), len(rows), low, high


def copy_message(g: GuardResult) -> str:
    """The copy rate in words."""
    from ...metrics.copies import COPY_NGRAM, COPY_SHARE  # lazy: kept off the plugin's import
    from ...metrics.mentions import LISTED_TITLES  # lazy: kept off the plugin's import

    c = g.copying
    if not c.explained:
        return ""
    return (f"{c.copies} of {c.explained} explanations copy their prompt back (at least "
            f"{100 * COPY_SHARE:g} % of their words in runs of {COPY_NGRAM} or more words from the prompt, "
            f"or {LISTED_TITLES} or more titles of the history listed; "
            f"rate {c.copies / c.explained:.2f}, one-sided bounds [{c.low:.2f}, {c.high:.2f}], "
            f"limit {c.limit:g}).{stopped_note(g, 'copying')}")
