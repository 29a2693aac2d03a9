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
are straightened first, so ``user’s`` and ``user's`` tokenise alike. In the scripts written without spaces
between words (Chinese, Japanese kana, Thai, Lao, Myanmar, Khmer) every character is a token, with its
combining marks (``text.spaced``; the ``+chars`` of the tokenizer's name). BLEU runs on the same lower-cased
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

Importing this module is cheap (no textblob, regex or sacrebleu); they are imported when the first
:class:`Scorer` is built (about 0.3 s: TextBlob's tagger module and lexicon, sacrebleu — nltk itself is
imported only by the opt-in ``nltk-perceptron`` tagger, see ``text.py``), so validation of weights and
signatures can run at plugin start-up.

The package face only hands names on, so ``from pytest_robustexplain.metrics import X`` works as it did
when this was one module. From the bottom up: ``base`` (names, constants, the score records), ``weights``
(weights, the signature, combining into ρ), ``text`` (tokeniser and taggers), ``scoring`` (the
:class:`Scorer`) and ``api`` (the module-level functions on one shared Scorer).
"""

from __future__ import annotations

from ..results import METRICS as METRICS
from .api import (
    compute_keyword_stability,
    compute_length_stability,
    compute_semantic_sim,
    compute_structural_consistency,
    default_scorer,
    score_pair,
)
from .base import (
    BLEU_MAX_ORDER,
    BLEU_SMOOTH_METHOD,
    DEFAULT_CACHE_SIZE,
    DEFAULT_TAGGER,
    DEFAULT_WEIGHTS,
    FAILED_TEXT,
    KEYWORD_TAGS,
    TAGGERS,
    TOKEN_PATTERN,
    TOKENIZER_NAME,
    CacheInfo,
    PairScores,
    TextScores,
    cosine,
)
from .base import WEIGHT_TOLERANCE as WEIGHT_TOLERANCE
from .base import Vector as Vector
from .base import Weights as Weights
from .scoring import Scorer
from .text import TaggerFn as TaggerFn
from .text import all_tokens as all_tokens
from .text import latin_share, script_of, spaced, tagger_reads, word_tokens
from .text import pattern_tag as pattern_tag
from .weights import (
    check_embedding,
    check_user_weights,
    check_weights,
    combine,
    embedding_weighted,
    metric_signature,
    text_signature,
    validate_weights,
    weight_items,
)

# ``METRICS`` and the underscored names are handed on too (``X as X``): tests reach the tokeniser and
# the tagger through this face.
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
    "check_user_weights",
    "check_weights",
    "combine",
    "compute_keyword_stability",
    "compute_length_stability",
    "compute_semantic_sim",
    "compute_structural_consistency",
    "cosine",
    "default_scorer",
    "embedding_weighted",
    "latin_share",
    "metric_signature",
    "score_pair",
    "script_of",
    "spaced",
    "tagger_reads",
    "text_signature",
    "validate_weights",
    "weight_items",
    "word_tokens",
]
