"""The four similarity metrics between an original explanation ``e`` and a perturbed one ``e′``.

=============  ================================================================================
semantic       cosine of the term-frequency vectors of the lower-cased word tokens
keyword        Jaccard of the sets of lower-cased nouns (NN, NNS, NNP, NNPS) and adjectives
               (JJ, JJR, JJS) found by part-of-speech tagging; both sets empty → 0.0, flagged
structural     sentence BLEU-4 (sacrebleu, ``smooth_method="exp"``, ``effective_order=True``) with
               ``e`` as the reference and ``e′`` as the hypothesis, divided by 100
length         1 − |len(e) − len(e′)| / max(len(e), len(e′)), lengths counted in word tokens
embedding      opt-in, off by default: cosine of the two texts' embedding vectors (an embedding
               model on Ollama ``/api/embed`` or an OpenAI-compatible ``/v1/embeddings``), clipped
               to [0, 1]; its weight in ρ is 0 unless the weights name it
combined (ρ)   Σ αᵢ·metricᵢ, default αᵢ = 0.25 (order: semantic, keyword, structural, length)
=============  ================================================================================

Tokens. One tokenisation feeds every metric: NLTK's ``RegexpTokenizer`` with :data:`TOKEN_PATTERN`
(no downloaded NLTK data needed). It splits words, keeps hyphenated compounds (``sci-fi``) and
decimals (``4.5``) whole, splits clitics the Penn-Treebank way (``user's`` → ``user 's``,
``don't`` → ``do n't``) because that is what the taggers were trained on, and emits every punctuation
mark as its own token. Punctuation is not a word: it is only shown to the tagger (so it sees sentence
ends); the metrics use *word* tokens (those with a letter or digit), lower-cased. Curly apostrophes
are straightened first, so ``user’s`` and ``user's`` tokenise alike. BLEU runs on the same lower-cased
word tokens (sacrebleu ``tokenize="none"``), so a change of case or punctuation alone is not a
structural change.

BLEU smoothing. ``exp`` is sacrebleu's default and mteval-v13a's (Chen & Cherry 2014, method 3): the
k-th n-gram order with no match gets precision 1 / (2^k · n-gram count) instead of 0, so a paraphrase
with no shared 4-gram still scores above 0. ``effective_order`` drops the orders a short text has no
n-grams of (a 2-word text is scored on 1- and 2-grams), so identical texts always score 1.0.

Tagging. The default tagger is TextBlob's bundled Pattern tagger (a lexicon plus Brill rules shipped
inside the ``textblob`` wheel): offline and deterministic on a fresh install. Tagging sees the tokens
in their original case (capitalisation is how it finds proper nouns); keywords are lower-cased after.
NLTK's averaged perceptron tagger is available as ``tagger="nltk-perceptron"``; it needs NLTK data,
and when that is missing a :class:`~pytest_robustexplain.errors.ConfigError` says how to install it —
there is no silent fallback to another tagger, because the two give different keyword scores.

Failures. An empty or whitespace-only ``e`` or ``e′`` — or one with no word at all, such as ``"..."``
— is a generation failure: every metric and ρ are 0.0 and ``generation_failure`` is True.

Every score comes with a signature (see :func:`metric_signature`), in the spirit of sacrebleu's, that
names the tokenizer, the tagger and its version, the BLEU settings, the weights and this package's
version: two reports whose signatures differ do not have comparable numbers.

Importing this module is cheap (no nltk, textblob or sacrebleu); they are imported when the first
:class:`Scorer` is built (about 1.5 s, nearly all of it ``import nltk``), so validation of weights and
signatures can run at plugin start-up.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from typing import Any, NamedTuple

from . import __version__
from .errors import ConfigError
from .results import ALL_METRICS, EMBEDDING, METRICS

__all__ = [
    "BLEU_MAX_ORDER",
    "BLEU_SMOOTH_METHOD",
    "DEFAULT_CACHE_SIZE",
    "DEFAULT_TAGGER",
    "DEFAULT_WEIGHTS",
    "FAILED_TEXT",
    "KEYWORD_TAGS",
    "TAGGERS",
    "TOKENIZER_NAME",
    "TOKEN_PATTERN",
    "CacheInfo",
    "PairScores",
    "Scorer",
    "TextScores",
    "check_embedding",
    "check_weights",
    "combine",
    "compute_keyword_stability",
    "compute_length_stability",
    "compute_semantic_sim",
    "compute_structural_consistency",
    "cosine",
    "default_scorer",
    "embedding_weighted",
    "metric_signature",
    "score_pair",
    "text_signature",
    "validate_weights",
    "word_tokens",
]

# Four weights (the paper's metrics), or five when the opt-in embedding metric has a weight > 0.
Weights = tuple[float, ...]
Vector = tuple[float, ...]

DEFAULT_WEIGHTS: Weights = (0.25, 0.25, 0.25, 0.25)
WEIGHT_TOLERANCE = 1e-6

KEYWORD_TAGS: frozenset[str] = frozenset({"NN", "NNS", "NNP", "NNPS", "JJ", "JJR", "JJS"})

BLEU_MAX_ORDER = 4
BLEU_SMOOTH_METHOD = "exp"

TOKENIZER_NAME = "nltk-regexp"
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
_TOKEN_FLAGS = re.UNICODE | re.MULTILINE | re.DOTALL | re.IGNORECASE | re.VERBOSE
_WORD_CHAR = re.compile(r"[^\W_]")  # a letter or digit: what makes a token a word
_APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "ʼ": "'"})

DEFAULT_TAGGER = "textblob"
# User-facing tagger name -> name in the signature.
TAGGERS: dict[str, str] = {"textblob": "textblob-pattern", "nltk-perceptron": "nltk-perceptron"}
# The distribution whose version pins each tagger's behaviour (lexicon, rules, model).
_TAGGER_DISTRIBUTION = {"textblob": "textblob", "nltk-perceptron": "nltk"}
_PERCEPTRON_INSTALL = "python -m nltk.downloader averaged_perceptron_tagger_eng"

# An entry (mostly the n-gram counts) takes ~40 KB for an 80-word text, so the default bounds the cache
# near 40 MB. LRU keeps an original cached while its ~25 perturbed partners and control repeats are
# scored, even with hundreds of users' pairs interleaved.
DEFAULT_CACHE_SIZE = 1024


@dataclass(frozen=True)
class PairScores:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


_FAILED = PairScores(0.0, 0.0, 0.0, 0.0, 0.0, generation_failure=True, keyword_empty=False)


# --------------------------------------------------------------------------------------------------
# Weights and signature (cheap: no heavy imports)


def validate_weights(weights: Mapping[str, Any] | Sequence[Any] | None, *,
                     origin: str = "weights") -> Weights:
    """Check metric weights and return them in metric order: (semantic, keyword, structural, length),
    plus the ``embedding`` weight when it is above 0.

    ``weights`` is None (the default 0.25 each), a mapping with the four metric names as keys (and
    optionally ``embedding``), or a sequence of four (or five, the last for ``embedding``) numbers. Each
    weight must be a finite number ≥ 0 and together they must sum to 1 within 1e-6. ``origin`` names
    where the weights came from (an option, an ini key) and starts every error message, a
    :class:`ConfigError` naming the bad value. This is the one check of weights (settings, markers and
    the scorer all call it).
    """
    try:
        return check_weights(weights)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {exc}") from None


def check_weights(weights: Mapping[str, Any] | Sequence[Any] | None) -> Weights:
    """:func:`validate_weights` without the origin: a ValueError with the problem only."""
    if weights is None:
        return DEFAULT_WEIGHTS
    if isinstance(weights, Mapping):
        values = _weights_from_mapping(weights)
    elif isinstance(weights, Sequence) and not isinstance(weights, (str, bytes)):
        if len(weights) not in (len(METRICS), len(ALL_METRICS)):
            raise ValueError(f"expected {len(METRICS)} weights ({', '.join(METRICS)}), got {len(weights)}: "
                             f"{list(weights)!r} (or {len(ALL_METRICS)}, the last for {EMBEDDING})")
        values = [_weight_value(name, value) for name, value in zip(ALL_METRICS, weights, strict=False)]
    else:
        raise ValueError(f"expected a mapping of metric name to weight or a sequence of "
                         f"{len(METRICS)} numbers, got {type(weights).__name__}: {weights!r}")
    total = math.fsum(values)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        listed = ", ".join(f"{name}={value:g}" for name, value in zip(ALL_METRICS, values, strict=False))
        raise ValueError(f"weights must sum to 1 (within {WEIGHT_TOLERANCE:g}), got {total:.9g} ({listed})")
    # An embedding weight of 0 is no embedding weight: such weights are the paper's four, signature and all.
    return tuple(values[:len(METRICS)] if len(values) > len(METRICS) and values[-1] == 0 else values)


def _weights_from_mapping(weights: Mapping[str, Any]) -> list[float]:
    unknown = [key for key in weights if key not in ALL_METRICS]
    if unknown:
        raise ValueError(f"unknown metric name(s) {', '.join(map(repr, unknown))}; "
                         f"expected {', '.join(METRICS)} (and optionally {EMBEDDING})")
    missing = [name for name in METRICS if name not in weights]
    if missing:
        raise ValueError(f"missing weight(s) for {', '.join(missing)}; give all of "
                         f"{', '.join(METRICS)} (use 0 to leave a metric out)")
    names = ALL_METRICS if EMBEDDING in weights else METRICS
    return [_weight_value(name, weights[name]) for name in names]


def _weight_value(name: str, value: Any) -> float:
    # bool is an int subclass; True as a weight is almost certainly a mistake.
    if isinstance(value, bool):
        raise ValueError(f"weight for {name!r} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"weight for {name!r} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"weight for {name!r} must be a finite number ≥ 0, got {value!r}")
    return number


def embedding_weighted(weights: Weights) -> bool:
    """Whether these (validated) weights give the embedding metric a share of ρ."""
    return len(weights) == len(ALL_METRICS)


def _check_tagger(tagger: str) -> str:
    if tagger not in TAGGERS:
        raise ConfigError(f"unknown keyword tagger {tagger!r}; expected one of {', '.join(TAGGERS)}")
    return tagger


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        raise ConfigError(f"the {name!r} package is required for the metrics but is not installed "
                          f"(pip install {name})") from None


def _format_weight(weight: float) -> str:
    text = f"{weight:.6g}"
    # sacrebleu-style compactness: .25 rather than 0.25.
    return text[1:] if text.startswith("0.") else text


def metric_signature(weights: Mapping[str, Any] | Sequence[Any] | None = None,
                     tagger: str = DEFAULT_TAGGER, *, embedding: str | None = None) -> str:
    """The reproducibility signature of the metrics, e.g.

    ``tok:nltk-regexp|tag:textblob-pattern@0.20.1|bleu:4,smooth:exp,eff:yes,sacrebleu@2.6.0|``
    ``w:.25/.25/.25/.25|v:0.1.0``

    With the opt-in embedding metric (``embedding`` = the embedding model) an ``emb:cos,MODEL`` part
    follows the BLEU part, and the weights list a fifth number when it has a share of ρ. Scores from two
    runs are comparable only when their signatures are equal. Cheap: versions come from the installed
    distributions' metadata, nothing heavy is imported.
    """
    values = validate_weights(weights)
    tagger = _check_tagger(tagger)
    tag_part = f"{TAGGERS[tagger]}@{_distribution_version(_TAGGER_DISTRIBUTION[tagger])}"
    bleu_part = (f"{BLEU_MAX_ORDER},smooth:{BLEU_SMOOTH_METHOD},eff:yes,"
                 f"sacrebleu@{_distribution_version('sacrebleu')}")
    emb_part = f"|emb:cos,{embedding}" if embedding else ""
    weight_part = "/".join(_format_weight(w) for w in values)
    return f"tok:{TOKENIZER_NAME}|tag:{tag_part}|bleu:{bleu_part}{emb_part}|w:{weight_part}|v:{__version__}"


def text_signature(tagger: str = DEFAULT_TAGGER) -> str:
    """What the four metric values (:class:`TextScores`) depend on besides the two texts: the
    :func:`metric_signature` without its weights (they only combine the metrics) and without the embedding
    part (that metric is a cosine of vectors that come with the explanations), e.g.
    ``tok:nltk-regexp|tag:textblob-pattern@0.20.1|bleu:4,smooth:exp,eff:yes,sacrebleu@2.6.0|v:0.1.0``.
    Cheap, like :func:`metric_signature`."""
    parts = metric_signature(None, tagger).split("|")
    return "|".join(part for part in parts if not part.startswith("w:"))


def check_embedding(weights: Weights, vectors: tuple[Vector, Vector] | None) -> None:
    """A ConfigError when the weights give the embedding metric a share of ρ but the pair has no vectors."""
    if embedding_weighted(weights) and vectors is None:
        raise ConfigError(f"weights give {EMBEDDING!r} a share of ρ, but the pair has no embeddings "
                          "(set an embedding model: --robustexplain-embed-model)")


def combine(text: TextScores, weights: Weights, vectors: tuple[Vector, Vector] | None = None) -> PairScores:
    """The pair's scores from its four metrics: ρ = Σ αᵢ·metricᵢ under (validated) ``weights``, with the
    embedding cosine of ``vectors`` as the fifth metric when given. The one place ρ is formed, whether
    the metrics were just computed or read from the score cache."""
    if text.failed:
        return _FAILED if vectors is None else replace(_FAILED, embedding=0.0)
    metrics = [text.semantic, text.keyword, text.structural, text.length]
    embedding = None if vectors is None else cosine(*vectors)
    if embedding is not None:
        metrics.append(embedding)
    combined = _clamp(math.fsum(w * m for w, m in zip(weights, metrics, strict=False)))
    return PairScores(text.semantic, text.keyword, text.structural, text.length, combined=combined,
                      generation_failure=False, keyword_empty=text.keyword_empty, embedding=embedding)


# --------------------------------------------------------------------------------------------------
# Tokenisation and tagging (heavy modules imported on first use)

TaggerFn = Callable[[list[str]], list[tuple[str, str]]]

_tokenizer_lock = threading.Lock()
_tokenizer: Any = None


def _get_tokenizer() -> Any:
    global _tokenizer
    with _tokenizer_lock:
        if _tokenizer is None:
            from nltk.tokenize import RegexpTokenizer

            _tokenizer = RegexpTokenizer(TOKEN_PATTERN, flags=_TOKEN_FLAGS)
        return _tokenizer


def _all_tokens(text: str) -> list[str]:
    """Every token of ``text`` in its original case, punctuation included."""
    tokens: list[str] = _get_tokenizer().tokenize(text.translate(_APOSTROPHES))
    return tokens


def _is_word(token: str) -> bool:
    return _WORD_CHAR.search(token) is not None


def word_tokens(text: str) -> list[str]:
    """The lower-cased word tokens of ``text`` that every metric counts (punctuation dropped)."""
    return [token.lower() for token in _all_tokens(text) if _is_word(token)]


def _pattern_tag(tokens: list[str]) -> list[tuple[str, str]]:
    """TextBlob's Pattern tagger on NLTK's tokens.

    ``textblob.en.tag(" ".join(tokens), tokenize=False)`` splits the string on spaces, calls
    ``parser.find_tags`` on the tokens, formats the result as a ``word/TAG`` string and parses that back;
    calling ``find_tags`` directly gives the same tags (a test checks it) at a third of the cost, which
    matters because tagging is the largest part of scoring a pair.
    """
    from textblob.en import parser

    return [(word, tag) for word, tag in parser.find_tags(list(tokens))]


def _textblob_tagger(tokens: list[str]) -> list[tuple[str, str]]:
    # Looked up at call time so the one place that calls textblob can be observed in tests.
    return _pattern_tag(tokens)


def _perceptron_tagger() -> TaggerFn:
    from nltk.tag.perceptron import PerceptronTagger

    try:
        model = PerceptronTagger(lang="eng")
    except LookupError:
        raise ConfigError(
            "keyword tagger 'nltk-perceptron' needs NLTK's averaged perceptron tagger data, which is "
            f"not installed; install it with `{_PERCEPTRON_INSTALL}` (or use the default tagger "
            "'textblob', which needs no download)") from None

    def tag(tokens: list[str]) -> list[tuple[str, str]]:
        tagged: list[tuple[str, str]] = model.tag(tokens)
        return tagged

    return tag


def _make_tagger(tagger: str) -> TaggerFn:
    if tagger == "nltk-perceptron":
        return _perceptron_tagger()
    import gc
    import warnings

    import textblob.en  # imported now so a broken install fails here, not mid-run

    # TextBlob loads its lexicon lazily and leaves the files open; load it now, with the ResourceWarning
    # silenced and the files collected, so it is not charged to a user's test (nor fails under -W error).
    # The files are freed by reference counting as the loader finishes (a full collection finds nothing
    # left), so a young-generation collection is the guard: a full one walked the whole heap (40-80 ms).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        textblob.en.parser.find_tags(["warm", "up"])
        gc.collect(1)
    return _textblob_tagger


# --------------------------------------------------------------------------------------------------
# Scoring


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
        self._tagger_name = _check_tagger(tagger)
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ConfigError(f"cache_size must be an integer ≥ 1, got {cache_size!r}")
        self._signature = metric_signature(self._weights, self._tagger_name)
        _get_tokenizer()
        self._tag: TaggerFn = _make_tagger(self._tagger_name)
        from sacrebleu.metrics import BLEU

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
        return _clamp(bleu.score / 100.0)

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
        tokens = _all_tokens(text)
        words = tuple(token.lower() for token in tokens if _is_word(token))
        if not words:
            return _EMPTY_STATS
        tf = Counter(words)
        keywords = frozenset(word.lower() for word, tag in self._tag(tokens)
                             if tag in KEYWORD_TAGS and _is_word(word))
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


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _semantic(original: _TextStats, perturbed: _TextStats) -> float:
    a, b = original.tf, perturbed.tf
    dot = sum(a[word] * b[word] for word in a.keys() & b.keys())
    return _clamp(dot / math.sqrt(original.tf_sq_norm * perturbed.tf_sq_norm))


def _keyword(original: _TextStats, perturbed: _TextStats) -> tuple[float, bool]:
    union = len(original.keywords | perturbed.keywords)
    if union == 0:
        return 0.0, True
    return len(original.keywords & perturbed.keywords) / union, False


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine of two embedding vectors, clipped to [0, 1] like every score; 0.0 for a zero or missing
    (empty: the text failed and was not embedded) vector."""
    if not a or not b:
        return 0.0
    if len(a) != len(b):
        raise ValueError(f"embedding vectors differ in length ({len(a)} and {len(b)})")
    norm = math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))
    return _clamp(math.fsum(x * y for x, y in zip(a, b, strict=True)) / norm) if norm > 0 else 0.0


def _length(original: _TextStats, perturbed: _TextStats) -> float:
    a, b = len(original.words), len(perturbed.words)
    return 1.0 - abs(a - b) / max(a, b)


# --------------------------------------------------------------------------------------------------
# Module-level convenience API (one shared default Scorer, built on first use)

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
