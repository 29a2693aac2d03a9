"""Copying is not explaining: how much of an explanation is the prompt repeated back.

Small models often answer a recommendation prompt by repeating it: the item's line ("the item "Heat
(1995)" with features category: Crime; genres: Action, Crime, Thriller …"), or the whole numbered
history. Such a text is stable under every perturbation that leaves most lines alone (Gemma 3 270M copied
its whole prompt back and scored ρ 0.984, the most robust model of the comparison), and it "mentions the
history" on every line. What it does not do is explain.

An explanation **copies the prompt** when at least :data:`COPY_SHARE` of its words lie inside runs of
:data:`COPY_NGRAM` or more consecutive words that also stand, in that order, in the prompt's material
(the numbered history lines and the item's line, as the default prompt writes them). Words are compared
as in ``mentions.py``: lowercase letters and digits, punctuation separates. Eight words is longer than
nearly every title (so naming a film, even "The Lord of the Rings: The Fellowship of the Ring", copies
nothing on its own: ten words of which a trailing "(2001)" makes the eleventh — that one title is under
half of any sentence around it) and shorter than one history line (a line is 12–20 words with its id,
category, rating and date), so a line repeated back is always found.

A copy is not counted as a history reference, and neither is a text that names most of the history's
titles (``mentions.py``: a list of the history, however reworded the rest is).

What this cannot see: a history reworded so that no eight-word run survives and fewer than five titles
are named (eight or more make it a list; documented as a known limit in docs/guard.md, with its numbers).
"""

from __future__ import annotations

from collections.abc import Sequence

from .mentions import words

COPY_NGRAM = 8  # consecutive words shared with the prompt that count as copied
COPY_SHARE = 0.5  # share of an explanation's words inside copied runs that makes it a copy


def copied_share(text: str, source: str, *, n: int = COPY_NGRAM) -> float:
    """The share of ``text``'s words that lie inside a run of ``n`` or more consecutive words also found,
    in order, in ``source``; 0 for a text shorter than ``n`` words."""
    tokens = words(text)
    if len(tokens) < n:
        return 0.0
    grams = _ngrams(words(source), n)
    covered = [False] * len(tokens)
    for i in range(len(tokens) - n + 1):
        if tokens[i:i + n] in grams:
            covered[i:i + n] = [True] * n
    return sum(covered) / len(tokens)


def _ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def is_copy(share: float) -> bool:
    """Whether an explanation with this copied share counts as a copy of the prompt."""
    return share >= COPY_SHARE
