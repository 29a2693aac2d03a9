"""The :class:`Scorer`: each text tokenised, tagged and counted once (LRU cache), the four metrics of a
pair from those counts."""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .base import (
    BLEU_MAX_ORDER,
    BLEU_SMOOTH_METHOD,
    DEFAULT_CACHE_SIZE,
    DEFAULT_TAGGER,
    FAILED_TEXT,
    KEYWORD_TAGS,
    CacheInfo,
    PairScores,
    TextScores,
    Vector,
    Weights,
    clamp,
)
from .text import TaggerFn, all_tokens, get_tokenizer, is_word, make_tagger
from .weights import check_embedding, check_tagger, combine, metric_signature, validate_weights


@dataclass(frozen=True)
class _TextStats:
    """Everything the metrics need from one text, computed once per distinct text."""

    words: tuple[str, ...]  # lower-cased word tokens
    tf: Counter[str]
    tf_sq_norm: int  # Σ tf², kept integral so identical texts give a cosine of exactly 1.0
    keywords: frozenset[str]
    ngrams: tuple[Counter[tuple[str, ...]], ...]  # n-gram counts for n = 1..BLEU_MAX_ORDER
    repeated: tuple[frozenset[tuple[str, ...]], ...]  # per order, the n-grams that occur more than once

    @property
    def failed(self) -> bool:
        return not self.words


_EMPTY_STATS = _TextStats((), Counter(), 0, frozenset(), (), ())


class Scorer:
    """Scores explanation pairs; build one per run and reuse it.

    Holds the tokenizer, the tagger, one sacrebleu ``BLEU`` object and the weights, and caches what
    each distinct text yields (tokens, term frequencies, keywords) in an LRU cache of ``cache_size``
    texts: an original explanation is compared with ~25 perturbed ones and is tokenised and tagged
    only once. Thread-safe; scoring is CPU-bound, so threads do not speed it up.
    """

    def __init__(self, *, weights: Mapping[str, Any] | Sequence[Any] | None = None,
                 tagger: str = DEFAULT_TAGGER, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self._weights = validate_weights(weights)
        self._tagger_name = check_tagger(tagger)
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ConfigError(f"cache_size must be an integer ≥ 1, got {cache_size!r}")
        self._signature = metric_signature(self._weights, self._tagger_name)
        get_tokenizer()
        self._tag: TaggerFn = make_tagger(self._tagger_name)
        from sacrebleu.metrics import BLEU  # lazy: loads sacrebleu, lxml

        # Built once: sacrebleu resolves its tokenizer and settings in the constructor.
        self._bleu = BLEU(tokenize="none", smooth_method=BLEU_SMOOTH_METHOD, effective_order=True,
                          max_ngram_order=BLEU_MAX_ORDER)
        self._cache: OrderedDict[str, _TextStats] = OrderedDict()
        self._cache_size = cache_size
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()

    @property
    def weights(self) -> Weights:
        return self._weights

    @property
    def tagger(self) -> str:
        return self._tagger_name

    @property
    def signature(self) -> str:
        """See :func:`metric_signature`."""
        return self._signature

    def cache_info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._cache), self._cache_size)

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._hits = self._misses = 0

    # -- public scoring ----------------------------------------------------------------------------

    def score(self, e: str, e_prime: str, *, vectors: tuple[Vector, Vector] | None = None) -> PairScores:
        """All four metrics and ρ (with this scorer's weights) for original ``e``, perturbed ``e_prime``;
        with ``vectors`` (the two texts' embeddings) the fifth metric ``embedding`` too."""
        return self._score(e, e_prime, self._weights, vectors)

    def score_with(self, e: str, e_prime: str, weights: Mapping[str, Any] | Sequence[Any] | None, *,
                   vectors: tuple[Vector, Vector] | None = None) -> PairScores:
        """Like :meth:`score` with other weights (validated; None means the default 0.25 each)."""
        return self._score(e, e_prime, validate_weights(weights), vectors)

    def _score(self, e: str, e_prime: str, values: Weights,
               vectors: tuple[Vector, Vector] | None) -> PairScores:
        check_embedding(values, vectors)
        return combine(self.text_scores(e, e_prime), values, vectors)

    def text_scores(self, e: str, e_prime: str) -> TextScores:
        """The four metrics of the pair, unweighted (:data:`FAILED_TEXT` when e or e′ has no word)."""
        original, perturbed = self._stats(e, "e"), self._stats(e_prime, "e_prime")
        if original.failed or perturbed.failed:
            return FAILED_TEXT
        keyword, keyword_empty = _keyword(original, perturbed)
        return TextScores(_semantic(original, perturbed), keyword, self._structural(original, perturbed),
                          _length(original, perturbed), keyword_empty=keyword_empty)

    def semantic(self, e: str, e_prime: str) -> float:
        """Cosine of the term-frequency vectors of the two texts' lower-cased word tokens."""
        original, perturbed = self._stats(e, "e"), self._stats(e_prime, "e_prime")
        return 0.0 if original.failed or perturbed.failed else _semantic(original, perturbed)

    def keyword(self, e: str, e_prime: str) -> float:
        """Jaccard of the two texts' noun/adjective sets (0.0 when both are empty)."""
        original, perturbed = self._stats(e, "e"), self._stats(e_prime, "e_prime")
        return 0.0 if original.failed or perturbed.failed else _keyword(original, perturbed)[0]

    def structural(self, e: str, e_prime: str) -> float:
        """Sentence BLEU-4 of ``e_prime`` against the reference ``e``, in [0, 1] (exp smoothing)."""
        original, perturbed = self._stats(e, "e"), self._stats(e_prime, "e_prime")
        return 0.0 if original.failed or perturbed.failed else self._structural(original, perturbed)

    def length(self, e: str, e_prime: str) -> float:
        """1 − |len(e) − len(e′)| / max(len(e), len(e′)) over word tokens."""
        original, perturbed = self._stats(e, "e"), self._stats(e_prime, "e_prime")
        return 0.0 if original.failed or perturbed.failed else _length(original, perturbed)

    def keywords(self, text: str) -> frozenset[str]:
        """The lower-cased nouns and adjectives of ``text`` that keyword stability compares."""
        return self._stats(text, "text").keywords

    # -- internals ---------------------------------------------------------------------------------

    def _structural(self, original: _TextStats, perturbed: _TextStats) -> float:
        # The match statistics sacrebleu's sentence_score() would gather (clipped n-gram matches, n-gram
        # totals, lengths) from n-grams cached per text — the original's are reused for all ~25 of its
        # pairs — then sacrebleu's own compute_bleu() applies the smoothing, effective order and
        # brevity penalty. Equal to BLEU.sentence_score(e′, [e]) (a test checks it).
        correct = [_clipped_matches(perturbed, original, order) for order in range(BLEU_MAX_ORDER)]
        total = [max(0, len(perturbed.words) - order) for order in range(BLEU_MAX_ORDER)]
        bleu = self._bleu.compute_bleu(
            correct, total, len(perturbed.words), len(original.words),
            smooth_method=self._bleu.smooth_method, smooth_value=self._bleu.smooth_value,
            effective_order=self._bleu.effective_order, max_ngram_order=self._bleu.max_ngram_order)
        return clamp(bleu.score / 100.0)

    def _stats(self, text: str, name: str) -> _TextStats:
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a str (an explanation text), got {type(text).__name__}")
        if not text.strip():
            return _EMPTY_STATS
        # One lock around lookup *and* analysis: each distinct text is tagged exactly once, and the
        # Pattern tagger's lazy lexicon loading is never raced.
        with self._lock:
            stats = self._cache.get(text)
            if stats is not None:
                self._hits += 1
                self._cache.move_to_end(text)
                return stats
            self._misses += 1
            stats = self._analyse(text)
            self._cache[text] = stats
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return stats

    def _analyse(self, text: str) -> _TextStats:
        tokens = all_tokens(text)
        words = tuple(token.lower() for token in tokens if is_word(token))
        if not words:
            return _EMPTY_STATS
        tf = Counter(words)
        keywords = frozenset(word.lower() for word, tag in self._tag(tokens)
                             if tag in KEYWORD_TAGS and is_word(word))
        ngrams = tuple(Counter(zip(*(words[i:] for i in range(n)), strict=False))
                       for n in range(1, BLEU_MAX_ORDER + 1))
        repeated = tuple(frozenset(gram for gram, count in counts.items() if count > 1) for counts in ngrams)
        return _TextStats(words, tf, sum(c * c for c in tf.values()), keywords, ngrams, repeated)


def _clipped_matches(hyp: _TextStats, ref: _TextStats, order: int) -> int:
    """Σ over n-grams of min(count in hyp, count in ref), for n = order + 1 (BLEU's clipped matches)."""
    hyp_counts, ref_counts = hyp.ngrams[order], ref.ngrams[order]
    # Most n-grams occur once in each text, so a C-level key intersection counts nearly every match;
    # only n-grams repeated in one of the texts can add more than 1 and are visited in Python.
    matches = len(hyp_counts.keys() & ref_counts.keys())
    for gram in hyp.repeated[order] | ref.repeated[order]:
        if gram in hyp_counts and gram in ref_counts:
            matches += min(hyp_counts[gram], ref_counts[gram]) - 1
    return matches


def _semantic(original: _TextStats, perturbed: _TextStats) -> float:
    a, b = original.tf, perturbed.tf
    dot = sum(a[word] * b[word] for word in a.keys() & b.keys())
    return clamp(dot / math.sqrt(original.tf_sq_norm * perturbed.tf_sq_norm))


def _keyword(original: _TextStats, perturbed: _TextStats) -> tuple[float, bool]:
    union = len(original.keywords | perturbed.keywords)
    if union == 0:
        return 0.0, True
    return len(original.keywords & perturbed.keywords) / union, False


def _length(original: _TextStats, perturbed: _TextStats) -> float:
    a, b = len(original.words), len(perturbed.words)
    return 1.0 - abs(a - b) / max(a, b)
