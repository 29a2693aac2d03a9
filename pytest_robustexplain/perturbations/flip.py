"""The counterfactual preference flip: an opt-in kind where a faithful explainer *should* change.

``preference_flip`` (alias ``flip``) inverts the ratings of the user's most-engaged category — the most
frequent category among their rated interactions, ties alphabetical — on ``s·20 %`` of its rated
interactions (at least one, all of them at severity 5), the best-rated first (ties in the pair's seeded
order), so that what the user liked most becomes what they dislike. A rating ``r``
becomes ``lo + hi − r`` on the rating scale (:func:`~pytest_robustexplain.data.rating_scale`: 1–5, or
0.5–5 for MovieLens), so a 5 becomes a 1 and the scale's midpoint stays. Nothing else changes: the same
items, in the same order, at the same times. A history without a rated, categorised interaction is left
unchanged (the pair is skipped as trivial).

Registered like the other kinds but **not** in the default five: the paper's protocol is unchanged. Its
gate is the opposite of robustness (``engine/decide.py``, ``with_flip``): the explanation must move
(``min-flip-sensitivity``) and, once most of the category is flipped (severity 3 and up), must stop citing
it as a reason to like. Changes: ``{"category": …, "flipped": [{"position", "item_id", "rating",
"flipped_to"}], "share": flipped / rated in the category}``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ..data import Catalog, Interaction, UserHistory, rating_scale
from .registry import register_builtin

FLIP = "preference_flip"
FLIP_SHARE_PER_LEVEL = 0.2  # of the category's rated interactions, per severity level
MAJORITY_SEVERITY = 3  # from here on most of the category is flipped: it is no longer a liked category


def flipped_category(history: UserHistory) -> str | None:
    """The category the flip inverts: the most frequent among rated interactions (ties alphabetical)."""
    counts = Counter(i.category for i in history if i.category and i.rating is not None)
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0] if counts else None


def preference_flip(history: UserHistory, severity: int, catalog: Catalog,
                    rng: np.random.Generator) -> tuple[UserHistory, dict[str, Any]]:
    """Invert the ratings of part of the user's most-engaged category (the module docstring)."""
    category = flipped_category(history)
    if category is None:
        return history, {"category": None, "flipped": [], "share": 0.0}
    positions = [p for p, i in enumerate(history.interactions)
                 if i.category == category and i.rating is not None]
    count = min(len(positions), max(1, round(FLIP_SHARE_PER_LEVEL * severity * len(positions))))
    # The best-rated first (ties in the pair's seeded order): the flip turns what the user liked most into
    # what they dislike, rather than also turning their dislikes into likes.
    order = {p: rank for rank, p in enumerate(int(q) for q in rng.permutation(positions))}
    best = sorted(positions, key=lambda p: (-float(history.interactions[p].rating or 0.0), order[p]))
    picks = sorted(best[:count])
    lo, hi = rating_scale(float(i.rating) for i in history if i.rating is not None)
    out = list(history.interactions)
    flipped = []
    for p in picks:
        old = out[p]
        assert old.rating is not None
        new_rating = lo + hi - float(old.rating)
        out[p] = Interaction(old.item_id, old.category, old.timestamp, new_rating, old.title,
                             dict(old.features))
        flipped.append({"position": p, "item_id": old.item_id, "rating": old.rating,
                        "flipped_to": new_rating})
    return (UserHistory(history.user_id, tuple(out)),
            {"category": category, "flipped": flipped, "share": round(len(picks) / len(positions), 4)})


register_builtin(FLIP, preference_flip, ("flip",))
