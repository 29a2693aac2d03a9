"""Preference polarity: does an explanation give a reason the user *disliked* as a reason to like the item?

Explanations routinely conflate what the user liked and disliked ("Disentangling Likes and Dislikes in
Personalized Generative Explainable Recommendation", arXiv 2410.13248). From the text and the ratings alone
(no model call), for each original explanation:

1. **The rating scale** (:func:`~pytest_robustexplain.data.rating_scale`): 1–5, widened to the
   history's own lowest and highest ratings (MovieLens rates from 0.5).
2. **Disliked** (:func:`disliked`): an interaction rated in the lowest quarter of the scale (≤ 2 on 1–5,
   ≤ 1.625 on 0.5–5), or 1.5 or more below the user's own mean rating (with at least three rated
   interactions); a category is disliked when at least two of the user's rated interactions are in it and
   their mean rating is disliked by the same rule. What counts as a disliked *term*: the category's name and
   the titles of disliked interactions, as the grounding vocabulary matches them (``metrics/mentions.py``:
   titles of two or more words, categories with or without a final "s"); terms of the recommended item
   itself — its title, category, genres, brand and attributes — are left out (naming them describes the item).
3. **Cited as a reason to like** (:func:`misattributed`): a sentence that names a disliked term and carries
   no dislike cue (:data:`DISLIKE_CUES`: "disliked", "did not enjoy", "rated … poorly", "low rating",
   "avoid", "unlike", "rather than", "instead of", …). A lexicon rule rather than a sentiment score: the
   sentiment analyser TextBlob bundles scores "Heat and Alien point to your taste" at −0.25, which would read
   a plain citation as a criticism.

The **misattributed-preference rate** is the share, among the original explanations whose history has a
disliked term, of those that cite one as a reason to like; it is reported with its one-sided exact bounds,
and the optional gate ``max-misattributed-rate`` fails when the rate is confidently above it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from ...data import Item, UserHistory, rating_scale
from ...metrics.mentions import Key, Vocabulary, category_forms, words
from ...results import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    FlipResult,
    MisattributionCase,
    PairResult,
    PolarityResult,
)

DISLIKED_SHARE = 0.25  # the lowest quarter of the scale
BELOW_OWN_MEAN = 1.5  # or this far below the user's own mean rating
MIN_RATED_FOR_MEAN = 3  # ratings a user needs before "below their own mean" means anything
MIN_CATEGORY_RATINGS = 2  # rated interactions a category needs to be disliked as a whole
MAX_EXAMPLES = 3
DISLIKE_CUES = re.compile(
    r"\b(?:dislik\w*|hat(?:e|ed|es)|did ?n[o']t (?:like|enjoy|love|care)|do ?n[o']t (?:like|enjoy|love|care)|"
    r"not (?:a fan|keen|for you)|never (?:liked|enjoyed)|poor(?:ly)?|bad(?:ly)?|low(?:ly)?[- ]rated|"
    r"rated \w+(?: \w+)? (?:low|poorly|badly)|low(?:er)? (?:rating|score|marks)s?|avoid\w*|unlike|"
    r"steer\w* (?:away|clear)|away from|less (?:keen|interested|enthusiastic)|rather than|instead of|"
    r"but not|except|no longer|disappoint\w*|(?:did|was|were) not)\b", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def _threshold(ratings: Sequence[float]) -> float:
    """The rating at or below which a rating is disliked, for this user."""
    lo, hi = rating_scale(ratings)
    low = lo + DISLIKED_SHARE * (hi - lo)
    if len(ratings) < MIN_RATED_FOR_MEAN:
        return low
    return max(low, math.fsum(ratings) / len(ratings) - BELOW_OWN_MEAN)


def disliked(history: UserHistory) -> tuple[set[str], set[str]]:
    """(titles, categories) the user disliked (the module's rule); empty without ratings."""
    rated = [i for i in history if i.rating is not None and math.isfinite(i.rating)]
    if not rated:
        return set(), set()
    limit = _threshold([float(i.rating) for i in rated if i.rating is not None])
    titles = {i.title for i in rated if i.title and float(i.rating or 0.0) <= limit}
    by_category: dict[str, list[float]] = {}
    for i in rated:
        if i.category:
            by_category.setdefault(i.category, []).append(float(i.rating or 0.0))
    categories = {c for c, rs in by_category.items()
                  if len(rs) >= MIN_CATEGORY_RATINGS and math.fsum(rs) / len(rs) <= limit}
    return titles, categories


def _keys(vocabulary: Vocabulary, names: Iterable[str]) -> set[Key]:
    return {k for name in names for k in vocabulary.mentions(name)}


def misattributed(text: str, history: UserHistory, item: Item, vocabulary: Vocabulary
                  ) -> tuple[bool, tuple[str, ...], str]:
    """(whether the history has a disliked term, the disliked terms cited as reasons to like, the first
    sentence citing one) for one explanation."""
    titles, categories = disliked(history)
    terms = _keys(vocabulary, titles) | _keys(vocabulary, categories)
    terms -= vocabulary.item_terms(item)
    if not terms:
        return False, (), ""
    cited: list[str] = []
    first = ""
    for sentence in _SENTENCE.split(text):
        named = [k for k in vocabulary.mentions(sentence) if k in terms]
        if named and not DISLIKE_CUES.search(sentence):
            cited += [" ".join(k) for k in named]
            first = first or sentence.strip()
    return True, tuple(dict.fromkeys(cited)), first


def case_of(user_id: str, item_id: str, repeat: int, text: str, history: UserHistory, item: Item,
            vocabulary: Vocabulary) -> MisattributionCase:
    eligible, cited, sentence = misattributed(text, history, item, vocabulary)
    return MisattributionCase(user_id, item_id, repeat, eligible, cited, sentence[:300])


def summarise_polarity(cases: Sequence[MisattributionCase], *, max_rate: float | None, alpha: float
                       ) -> PolarityResult | None:
    """The misattributed-preference rate over the eligible explanations, and its gate; None when no
    explanation's history has a disliked term (nothing to measure: a dataset without ratings)."""
    from ...stats import user_share_bounds  # lazy: loads numpy, when bounds are asked for

    eligible = [c for c in cases if c.eligible]
    if not eligible:
        return None
    k = sum(1 for c in eligible if c.cited)
    n = len(eligible)
    low, high = user_share_bounds([(c.user_id, bool(c.cited)) for c in eligible], alpha)  # users: the unit
    rate = (f"{k} of {n} explanations whose history has a disliked item or category cite one as a reason to "
            f"like the item (bounds [{low:.2f}, {high:.2f}])")
    outcome = None
    if max_rate is not None:
        outcome = FAIL if low > max_rate else PASS
        rate += (f", confidently above max-misattributed-rate {max_rate:g}" if outcome == FAIL
                 else f"; max-misattributed-rate {max_rate:g}")
    examples = tuple(c for c in eligible if c.cited)[:MAX_EXAMPLES]
    return PolarityResult(eligible=n, misattributed=k, low=low, high=high, max_rate=max_rate, outcome=outcome,
                          message=rate, cases=tuple(cases), examples=examples)



# ---------------------------------------------------------------------------- the counterfactual flip
# The opt-in kind preference_flip (perturbations/flip.py) inverts the ratings of the user's most-engaged
# category; a faithful explainer should move, and once most of the category is flipped stop citing it as a
# reason to like. The smallest move that counts is the guard's (``flip.DEFAULT_MIN_FLIP_SENSITIVITY``).
MAX_STILL_LIKED = 0.5  # share of majority-flipped explanations that may still cite the category as liked


def cites_as_liked(text: str, category: str) -> bool:
    """Whether a sentence of ``text`` names ``category`` without a dislike cue (:data:`DISLIKE_CUES`)."""
    forms = {words(form) for form in category_forms(category)}  # the grounding vocabulary's forms
    for sentence in _SENTENCE.split(text):
        tokens = words(sentence)
        named = any(tokens[i:i + len(f)] == f for f in forms for i in range(len(tokens) - len(f) + 1))
        if named and not DISLIKE_CUES.search(sentence):
            return True
    return False


def evaluate_flip(flips: Sequence[PairResult], *, floor: float, robust: Sequence[PairResult],
                  min_sensitivity: float, decision: str, alpha: float) -> FlipResult:
    """The flip gate: the explanation moves (S_flip = ρ_floor − ρ_flip at least ``min_sensitivity``) and,
    from severity 3 on, stops citing the flipped category as liked (at most :data:`MAX_STILL_LIKED` of
    those explanations). ``decision`` "mean" compares the means (the method's rule); otherwise both must
    hold confidently (one-sided bounds at alpha) to pass, and fail confidently to fail."""
    from ...perturbations.flip import MAJORITY_SEVERITY  # lazy: loads numpy
    from ...stats import (
        cluster_interval,
        user_share_bounds,  # numpy: imported when bounds are asked for
    )

    users = [p.key.user_id for p in flips]
    rho = cluster_interval([p.combined for p in flips], users, confidence=1 - 2 * alpha)
    sensitivity = cluster_interval([floor - p.combined for p in flips], users, confidence=1 - 2 * alpha,
                                   bounds=(-1.0, 1.0))
    majority = [p for p in flips if p.key.severity >= MAJORITY_SEVERITY and p.failure is None
                and isinstance(p.changes.get("category"), str)]
    liked = [(p.key.user_id, cites_as_liked(p.perturbed, str(p.changes["category"]))) for p in majority]
    still = sum(flag for _, flag in liked)
    robust_rho = cluster_interval([p.combined for p in robust], [p.key.user_id for p in robust],
                                  confidence=1 - 2 * alpha) if robust else None
    share = still / len(majority) if majority else 0.0
    if decision == "mean":
        moved, stopped = sensitivity.mean >= min_sensitivity, share <= MAX_STILL_LIKED
        outcome = PASS if moved and stopped else FAIL
    else:
        moved_low, moved_high = sensitivity.low >= min_sensitivity, sensitivity.high < min_sensitivity
        low, high = user_share_bounds(liked, alpha)  # a user's severities 3-5 go together: users as the unit
        liked_low, liked_high = low > MAX_STILL_LIKED, high <= MAX_STILL_LIKED
        outcome = (FAIL if moved_high or liked_low else PASS if moved_low and liked_high else INCONCLUSIVE)
    beside = f" (the robustness kinds: ρ {robust_rho.mean:.3f})" if robust_rho is not None else ""
    message = (f"inverting the ratings of the user's most-engaged category moved the explanation by "
               f"{sensitivity.mean:.3f} (ρ_floor − ρ_flip; needs ≥ {min_sensitivity:g}; ρ_flip "
               f"{rho.mean:.3f}{beside}); {still} of {len(majority)} explanations with most of the category "
               f"flipped still cite it as a reason to like (at most {MAX_STILL_LIKED:.0%})")
    return FlipResult(n_pairs=len(flips), rho=rho, sensitivity=sensitivity, min_sensitivity=min_sensitivity,
                      still_liked=still, majority_pairs=len(majority), max_still_liked=MAX_STILL_LIKED,
                      outcome=outcome, message=message, robust_rho=robust_rho)
