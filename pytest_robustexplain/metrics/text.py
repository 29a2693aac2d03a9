"""Tokenisation and tagging through the libraries' public APIs, built on first use: nltk's ``RegexpTokenizer``
on the package's pattern and TextBlob's English Pattern parser (``textblob.en.parser``).

Importing either costs ~0.7 s (nltk's package imports ``scipy.stats`` through ``nltk.collocations``; the
``textblob`` package imports nltk), paid by a run that scores a text and never by a warm rerun whose scores
are all cached (``tests/test_score_cache.py``). The package once compiled nltk's rule itself and loaded
TextBlob's private ``_text.py`` to skip that second (issue 44); a library release that moved a private file
would have broken scoring, so it uses the libraries as they publish themselves (issue 60,
docs/performance.md says what the import costs a cold run)."""

from __future__ import annotations

import gc
import re
import threading
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .base import APOSTROPHES, PERCEPTRON_INSTALL, TOKEN_FLAGS, TOKEN_PATTERN, WORD_CHAR

_LETTER = re.compile(r"[^\W\d_]")  # a letter
# Latin letters: Basic Latin, Latin-1 Supplement, Extended-A and -B, IPA, Latin Extended Additional.
_LATIN = re.compile("[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02af\u1e00-\u1eff]")
# Scripts written without spaces between words: CJK ideographs (with extensions and compatibility forms),
# hiragana, katakana (half-width too), Thai, Lao, Myanmar, Khmer. Hangul is written with spaces: not here.
_NO_SPACE = re.compile("[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
                       "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\U00020000-\U0003134f]")

TaggerFn = Callable[[list[str]], list[tuple[str, str]]]

_build_lock = threading.Lock()
_parser: Any = None
_tokenizer: Any = None


def get_tokenizer() -> Any:
    """nltk's ``RegexpTokenizer(TOKEN_PATTERN, flags=TOKEN_FLAGS)``, built once (every text's tokens pass
    here, so no lock once it is)."""
    global _tokenizer
    if _tokenizer is not None:
        return _tokenizer
    with _build_lock:
        if _tokenizer is None:
            from nltk.tokenize import RegexpTokenizer  # lazy: ~0.7 s, only when a text is scored

            _tokenizer = RegexpTokenizer(TOKEN_PATTERN, flags=TOKEN_FLAGS)
        return _tokenizer


def all_tokens(text: str) -> list[str]:
    """Every token of ``text`` in its original case, punctuation included; in the scripts written without
    spaces between words, every character (with its combining marks) is a token (:func:`spaced`)."""
    tokens: list[str] = get_tokenizer().tokenize(spaced(text.translate(APOSTROPHES)))
    return tokens


def spaced(text: str) -> str:
    """``text`` with a space around each character of a script written without spaces between words (Chinese,
    Japanese kana, Thai, Lao, Myanmar, Khmer), its combining marks (a Thai vowel or tone mark) kept with it.

    Why characters: such a script's sentence is otherwise one "word" from punctuation to punctuation, so one
    changed character changed a whole phrase token and a faithful paraphrase shared almost none. Characters
    are what SacreBLEU's Chinese tokenizer scores BLEU on too; a dictionary segmenter would depend on a
    dictionary per language, and the measured pairs (benchmarks/bench_languages.py) need none. Other text
    is returned as it is, so English scores do not move."""
    if not _NO_SPACE.search(text):
        return text

    out: list[str] = []
    for ch in text:
        if _NO_SPACE.match(ch):
            if unicodedata.category(ch).startswith("M") and out and out[-1] == " ":
                out.insert(len(out) - 1, ch)  # a combining mark stays with the character before it
            else:
                out.extend((" ", ch, " "))
        else:
            out.append(ch)
    return "".join(out)


def is_word(token: str) -> bool:
    return WORD_CHAR.search(token) is not None


def word_tokens(text: str) -> list[str]:
    """The lower-cased word tokens of ``text`` that every metric counts (punctuation dropped)."""
    return [token.lower() for token in all_tokens(text) if is_word(token)]


def pattern_tag(tokens: list[str]) -> list[tuple[str, str]]:
    """TextBlob's Pattern tagger on NLTK's tokens.

    ``textblob.en.tag(" ".join(tokens), tokenize=False)`` splits the string on spaces, calls
    ``parser.find_tags`` on the tokens, formats the result as a ``word/TAG`` string and parses that back;
    calling ``find_tags`` directly gives the same tags (a test checks it) at a third of the cost, which
    matters because tagging is the largest part of scoring a pair.
    """
    return [(word, tag) for word, tag in pattern_parser().find_tags(list(tokens), map=_as_is)]


def _as_is(token: str, tag: str) -> tuple[str, str]:
    return token, tag  # the Penn tags as they are: what textblob.en's parser maps with by default


def pattern_parser() -> Any:
    """TextBlob's English Pattern parser, ``textblob.en.parser`` (imported here: it imports nltk)."""
    global _parser
    if _parser is not None:
        return _parser
    with _build_lock:
        if _parser is None:
            from textblob.en import parser  # lazy: loads numpy, scipy, nltk, textblob

            _parser = parser
        return _parser


def _textblob_tagger(tokens: list[str]) -> list[tuple[str, str]]:
    # Looked up at call time so the one place that calls textblob can be observed in tests.
    return pattern_tag(tokens)


def _perceptron_tagger() -> TaggerFn:
    from nltk.tag.perceptron import PerceptronTagger  # lazy: loads numpy, scipy, nltk

    try:
        model = PerceptronTagger(lang="eng")
    except LookupError:
        raise ConfigError(
            "keyword tagger 'nltk-perceptron' needs NLTK's averaged perceptron tagger data, which is "
            f"not installed; install it with `{PERCEPTRON_INSTALL}` (or use the default tagger "
            "'textblob', which needs no download)") from None

    def tag(tokens: list[str]) -> list[tuple[str, str]]:
        tagged: list[tuple[str, str]] = model.tag(tokens)
        return tagged

    return tag


def make_tagger(tagger: str) -> TaggerFn:
    if tagger == "nltk-perceptron":
        return _perceptron_tagger()

    # Built now so a broken install fails here, not mid-run. TextBlob loads its lexicon lazily and leaves
    # the files open; load it now, with the ResourceWarning silenced and the files collected, so it is not
    # charged to a user's test (nor fails under -W error). The files are freed by reference counting as the
    # loader finishes (a full collection finds nothing left), so a young-generation collection is the
    # guard: a full one walked the whole heap (40-80 ms).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        pattern_parser().find_tags(["warm", "up"], map=_as_is)
        gc.collect(1)
    return _textblob_tagger


def latin_share(text: str) -> float:
    """The share of ``text``'s letters that are Latin script (1.0 for a text without letters)."""
    if text.isascii():  # every ASCII letter is Latin; a constant-time flag of the string, so most texts
        return 1.0      # skip two regex passes (a warm rerun's summary looks at a thousand of them)
    letters = len(_LETTER.findall(text))
    return len(_LATIN.findall(text)) / letters if letters else 1.0


def tagger_reads(text: str) -> bool:
    """Whether the keyword tagger, made for English, can read ``text``: at least half its letters are
    Latin script. A text it cannot read (Chinese, Japanese, Thai, Arabic, Russian, …) still gets a keyword
    score — the tagger calls every word it does not know a noun, so the score counts shared words or
    characters, not shared nouns and adjectives — and the reports say how many pairs that was. Latin-script
    languages other than English are read as English with unknown nouns (measured for German in
    benchmarks/bench_languages.py); a script test, not a language guess, keeps this cheap and certain."""
    return latin_share(text) >= 0.5


def script_of(text: str) -> str:
    """The name of the script most of ``text``'s non-Latin letters are in ("CJK", "HIRAGANA", "THAI",
    "ARABIC", "CYRILLIC", …, as Unicode names them), from its first 40 such letters; "" when it has none."""
    others = [ch for ch in _LETTER.findall(text) if not _LATIN.match(ch)][:40]
    names = Counter(unicodedata.name(ch, "UNKNOWN").split()[0] for ch in others)
    return names.most_common(1)[0][0] if names else ""
