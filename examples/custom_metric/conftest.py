"""Your own metric in one registration: character trigram overlap, beside the paper's four.

Word-level metrics call "sci-fi" and "scifi", or "recommend" and "recommended", different words; a
character n-gram overlap does not. Registered with a version (it enters the run's signature and the score
cache's key — change it when the function changes), the metric is measured for every pair of the tests in
this directory, reported in every writer beside semantic/keyword/structural/length, gated by the test
that names it in ``min_metric`` and part of ρ only where a test's ``weights`` give it a share. A warm rerun
reads its values from the score cache and calls it for nothing.
"""

from __future__ import annotations

from collections import Counter


def trigrams(text):
    squeezed = " ".join(text.lower().split())
    return Counter(squeezed[i:i + 3] for i in range(len(squeezed) - 2))


def char_trigram_overlap(e, e_prime):
    """Multiset Jaccard of the two texts' character trigrams: 1.0 for identical texts, 0.0 for nothing in
    common (or an empty text)."""
    a, b = trigrams(e), trigrams(e_prime)
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 0.0


def pytest_robustexplain_register_checks(register_metric):
    register_metric("chars3", char_trigram_overlap, version="1",
                    description="character trigram overlap of the two explanations")
