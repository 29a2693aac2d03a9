"""The module-level convenience API: one shared default :class:`Scorer`, built on first use."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from .base import PairScores
from .scoring import Scorer

_default: Scorer | None = None
_default_lock = threading.Lock()


def default_scorer() -> Scorer:
    """The shared Scorer (default tagger and weights) behind the module-level functions."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Scorer()
        return _default


def score_pair(e: str, e_prime: str, *,
               weights: Mapping[str, Any] | Sequence[Any] | None = None) -> PairScores:
    """All four metrics and ρ for original ``e`` and perturbed ``e_prime`` (default tagger).

    ``weights`` as in :func:`validate_weights` (None: 0.25 each). For many pairs build a
    :class:`Scorer` once and call :meth:`Scorer.score`.
    """
    return default_scorer().score_with(e, e_prime, weights)


def compute_semantic_sim(e: str, e_prime: str) -> float:
    """Semantic similarity: cosine of term-frequency vectors over lower-cased word tokens, in [0, 1]."""
    return default_scorer().semantic(e, e_prime)


def compute_keyword_stability(e: str, e_prime: str) -> float:
    """Keyword stability: Jaccard of noun/adjective sets (TextBlob Pattern tagger); 0.0 if both empty."""
    return default_scorer().keyword(e, e_prime)


def compute_structural_consistency(e: str, e_prime: str) -> float:
    """Structural consistency: sentence BLEU-4 (exp smoothing, effective order) of e′ against e, / 100."""
    return default_scorer().structural(e, e_prime)


def compute_length_stability(e: str, e_prime: str) -> float:
    """Length stability: 1 − |len(e) − len(e′)| / max(len(e), len(e′)) over word tokens."""
    return default_scorer().length(e, e_prime)
