"""The metrics' names, constants and score records (``PairScores``, ``TextScores``), and the two pure helpers
every layer above shares (``cosine``, ``clamp``); no heavy import."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..results import ALL_METRICS, EMBEDDING, METRICS, Fields

# Four weights (the paper's metrics), or five when the opt-in embedding metric has a weight > 0.
Weights = tuple[float, ...]
Vector = tuple[float, ...]

DEFAULT_WEIGHTS: Weights = (0.25, 0.25, 0.25, 0.25)
WEIGHT_TOLERANCE = 1e-6

KEYWORD_TAGS: frozenset[str] = frozenset({"NN", "NNS", "NNP", "NNPS", "JJ", "JJR", "JJS"})

BLEU_MAX_ORDER = 4
BLEU_SMOOTH_METHOD = "exp"

TOKENIZER_NAME = "nltk-regexp+chars"
# Order matters: the first alternative that matches at a position wins.
TOKEN_PATTERN = r"""
    \d+(?:[.,]\d+)+           # numbers with decimals or thousands separators: 4.5, 1,000
  | \w+(?:-\w+)*(?!'t\b)      # words, hyphenated compounds kept whole (sci-fi); in "don't" the
                              # look-ahead backs off to "do", leaving "n't" as in the Treebank
  | n't\b                     # the negation clitic
  | '(?:s|re|ve|ll|d|m)\b     # the other clitics: 's 're 've 'll 'd 'm
  | \w+                       # a word the alternatives above refused (the "o" of "o't")
  | [^\w\s]                   # any other character is one punctuation token (not a word)
"""
TOKEN_FLAGS = re.UNICODE | re.MULTILINE | re.DOTALL | re.IGNORECASE | re.VERBOSE
WORD_CHAR = re.compile(r"[^\W_]")  # a letter or digit: what makes a token a word
APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "ʼ": "'"})

DEFAULT_TAGGER = "textblob"
# User-facing tagger name -> name in the signature.
TAGGERS: dict[str, str] = {"textblob": "textblob-pattern", "nltk-perceptron": "nltk-perceptron"}
# The distribution whose version pins each tagger's behaviour (lexicon, rules, model).
TAGGER_DISTRIBUTION = {"textblob": "textblob", "nltk-perceptron": "nltk"}
PERCEPTRON_INSTALL = "python -m nltk.downloader averaged_perceptron_tagger_eng"

# An entry (mostly the n-gram counts) takes ~40 KB for an 80-word text, so the default bounds the cache
# near 40 MB. LRU keeps an original cached while its ~25 perturbed partners and control repeats are
# scored, even with hundreds of users' pairs interleaved.
DEFAULT_CACHE_SIZE = 1024


@dataclass(frozen=True)
class PairScores(Fields):
    """The four metrics and ρ for one (e, e′) pair, each in [0, 1].

    ``generation_failure``: e or e′ was empty, whitespace-only or had no word; every score is 0.0.
    ``keyword_empty``: neither text had a noun or adjective, so keyword stability is 0.0 by convention
    and the pair should be reviewed (False for a generation failure, where nothing was tagged).
    """

    semantic: float
    keyword: float
    structural: float
    length: float
    combined: float
    generation_failure: bool = False
    keyword_empty: bool = False
    embedding: float | None = None  # only when the pair was scored with embedding vectors

    def metric(self, name: str) -> float:
        """A metric by name (one of ``METRICS``, ``"embedding"`` when scored, or ``"combined"``)."""
        if name not in (*ALL_METRICS, "combined") or getattr(self, name) is None:
            known = (*METRICS, *([EMBEDDING] if self.embedding is not None else []), "combined")
            raise KeyError(f"unknown metric {name!r}; expected one of {', '.join(known)}")
        return float(getattr(self, name))


class TextScores(NamedTuple):
    """The four metrics of one (e, e′) pair before any weighting: a pure function of the two texts and of
    :func:`text_signature` (the weights only combine them into ρ, see :func:`combine`), which is what
    makes them cacheable across runs. ``failed``: e or e′ had no word (every metric 0.0)."""

    semantic: float
    keyword: float
    structural: float
    length: float
    keyword_empty: bool = False
    failed: bool = False


FAILED_TEXT = TextScores(0.0, 0.0, 0.0, 0.0, keyword_empty=False, failed=True)


class CacheInfo(NamedTuple):
    """Statistics of a :class:`Scorer`'s per-text cache."""

    hits: int
    misses: int
    size: int
    maxsize: int


FAILED = PairScores(0.0, 0.0, 0.0, 0.0, 0.0, generation_failure=True, keyword_empty=False)


def clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine of two embedding vectors, clipped to [0, 1] like every score; 0.0 for a zero or missing
    (empty: the text failed and was not embedded) vector."""
    if not a or not b:
        return 0.0
    if len(a) != len(b):
        raise ValueError(f"embedding vectors differ in length ({len(a)} and {len(b)})")
    norm = math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))
    if not 0 < norm < math.inf and any(a) and any(b):
        # Squares past the float range (±1e200) or below it (1e-200): the cosine does not depend on the
        # vectors' scale, so each is divided by its largest number first (not done otherwise: the usual
        # vectors' last digit stays as it was).
        a, b = [x / max(map(abs, a)) for x in a], [y / max(map(abs, b)) for y in b]
        norm = math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))
    return clamp(math.fsum(x * y for x, y in zip(a, b, strict=True)) / norm) if norm > 0 else 0.0
