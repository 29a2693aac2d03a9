"""Tokenisation and tagging: nltk's ``RegexpTokenizer`` and the taggers, imported on first use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .base import APOSTROPHES, PERCEPTRON_INSTALL, TOKEN_FLAGS, TOKEN_PATTERN, WORD_CHAR

TaggerFn = Callable[[list[str]], list[tuple[str, str]]]

_tokenizer_lock = threading.Lock()
_tokenizer: Any = None


def get_tokenizer() -> Any:
    global _tokenizer
    with _tokenizer_lock:
        if _tokenizer is None:
            from nltk.tokenize import RegexpTokenizer

            _tokenizer = RegexpTokenizer(TOKEN_PATTERN, flags=TOKEN_FLAGS)
        return _tokenizer


def all_tokens(text: str) -> list[str]:
    """Every token of ``text`` in its original case, punctuation included."""
    tokens: list[str] = get_tokenizer().tokenize(text.translate(APOSTROPHES))
    return tokens


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
    from textblob.en import parser

    return [(word, tag) for word, tag in parser.find_tags(list(tokens))]


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
