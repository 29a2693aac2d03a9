"""Deterministic embeddings for the fake server's ``/api/embed`` and ``/v1/embeddings``.

A hashed bag of words: each lower-cased word adds ±1 to one of :data:`EMBED_DIMS` coordinates chosen
(with the sign) by a SHA-256 of the word, and the vector is scaled to length 1, as Ollama's are. Texts
that share most words get a cosine near 1, unrelated texts near 0, so a test can see the embedding metric
tell a stable model from a fragile one. The same text always gets the same vector, in every process.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter

EMBED_DIMS = 256
_WORD = re.compile(r"\w+")


def _slot(word: str) -> tuple[int, float]:
    digest = hashlib.sha256(word.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % EMBED_DIMS, 1.0 if digest[4] & 1 else -1.0


def embed_text(text: str) -> list[float]:
    """The unit vector of ``text`` (all zeros for a text without a word)."""
    vector = [0.0] * EMBED_DIMS
    for word, count in Counter(_WORD.findall(text.lower())).items():
        index, sign = _slot(word)
        vector[index] += sign * count
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else vector
