"""Tokenisation and tagging: nltk's ``RegexpTokenizer`` rule and the taggers, built on first use.

Neither needs ``import nltk`` on the default path, which cost 1.1 s (nearly all of it ``scipy.stats``, which
nltk's package imports through ``nltk.collocations``) while the first calls' pairs waited to be scored
(issue 44): the tokenizer is nltk's rule compiled as nltk compiles it (``RegexpTokenizer.tokenize`` is
the compiled pattern's ``findall``), and TextBlob's Pattern tagger is built from its own module without the
``textblob`` package, whose ``__init__`` imports nltk for classes the tagger never uses
(:func:`pattern_parser`). Both are checked token for token and tag for tag against the libraries
(``tests/test_metrics.py``, ``tests/test_languages.py``)."""

from __future__ import annotations

import re
import threading
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
# The name TextBlob's Pattern module is loaded under (never ``textblob._text``: the ``textblob`` package it
# would belong to is not imported), so a test can see whether a run built it.
PATTERN_MODULE = "pytest_robustexplain.metrics.textblob_text"


_tokenizer: RegexpTokens | None = None


class RegexpTokens:
    """nltk's ``RegexpTokenizer(pattern, flags=flags)`` (``gaps=False``): ``tokenize`` is the compiled
    pattern's ``findall``, compiled by the engine the installed nltk compiles with — the ``regex`` engine
    where nltk routes its patterns through ``nltk.redos`` (its ``\\w`` takes a combining mark with its
    letter, as ``re``'s does not), ``re`` for the releases before. nltk's wall-clock limit a match is left
    out: the pattern is linear (``benchmarks/bench_text.py``)."""

    def __init__(self, pattern: str, flags: int) -> None:
        if _nltk_uses_regex():
            import regex

            self._regexp = regex.compile(pattern, flags)
        else:
            self._regexp = re.compile(pattern, flags)

    def tokenize(self, text: str) -> list[str]:
        tokens: list[str] = self._regexp.findall(text)
        return tokens


def _nltk_uses_regex() -> bool:
    """Whether the installed nltk compiles its tokenizers' patterns with ``regex`` (it ships ``redos.py``):
    read from the package's files, without importing it."""
    import os

    return any(os.path.isfile(os.path.join(root, "redos.py")) for root in _package_roots("nltk"))


def _package_roots(name: str) -> list[str]:
    """The folders of the installed package ``name`` (none when it is not installed), found without
    running its ``__init__``."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    return list(spec.submodule_search_locations or ()) if spec is not None else []


def get_tokenizer() -> RegexpTokens:
    global _tokenizer
    if _tokenizer is not None:  # built: every text's tokens pass here, so no lock once it is
        return _tokenizer
    with _build_lock:
        if _tokenizer is None:
            _tokenizer = RegexpTokens(TOKEN_PATTERN, TOKEN_FLAGS)
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
    import unicodedata

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
    """TextBlob's English Pattern parser, built as ``textblob/en/__init__.py`` builds it (the same lexicon
    files, defaults and language) from ``textblob/_text.py``, which imports only the standard library —
    without the ``textblob`` package, whose ``__init__`` imports nltk. A TextBlob laid out otherwise is used
    through ``textblob.en`` itself (slower to import, the same tags)."""
    global _parser
    if _parser is not None:
        return _parser
    with _build_lock:
        if _parser is None:
            _parser = _built_parser()
        return _parser


def _built_parser() -> Any:
    import importlib.util
    import os
    import sys

    roots = _package_roots("textblob")
    source = os.path.join(roots[0], "_text.py") if roots else ""
    en = os.path.join(roots[0], "en") if roots else ""
    files = [os.path.join(en, f"en-{name}.txt") for name in ("lexicon", "morphology", "context", "entities")]
    module_spec = importlib.util.spec_from_file_location(PATTERN_MODULE, source) if source else None
    if module_spec is None or module_spec.loader is None or not all(map(os.path.isfile, [source, *files])):
        from textblob.en import parser

        return parser
    module = sys.modules.get(PATTERN_MODULE)
    if module is None:
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        sys.modules[PATTERN_MODULE] = module
    lexicon = module.Lexicon(path=files[0], morphology=files[1], context=files[2], entities=files[3],
                             language="en")
    return module.Parser(lexicon=lexicon, default=("NN", "NNP", "CD"), language="en")


def _textblob_tagger(tokens: list[str]) -> list[tuple[str, str]]:
    # Looked up at call time so the one place that calls textblob can be observed in tests.
    return pattern_tag(tokens)


def _perceptron_tagger() -> TaggerFn:
    from nltk.tag.perceptron import PerceptronTagger

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
    import gc
    import warnings

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
    import unicodedata
    from collections import Counter

    others = [ch for ch in _LETTER.findall(text) if not _LATIN.match(ch)][:40]
    names = Counter(unicodedata.name(ch, "UNKNOWN").split()[0] for ch in others)
    return names.most_common(1)[0][0] if names else ""
