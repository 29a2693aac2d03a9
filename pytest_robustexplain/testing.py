"""A fake Ollama server for tests: a real HTTP server on loopback that answers like Ollama does.

:class:`FakeOllamaServer` listens on ``127.0.0.1`` on a free port and implements the parts of the Ollama
API an explainer uses — ``GET /`` and ``/api/version``, ``/api/tags``, ``/api/ps``, ``POST /api/show``,
``POST /api/chat`` (plain JSON or streamed NDJSON) — and the OpenAI-compatible ``GET /v1/models``,
``GET /v1/models/{model}`` and ``POST /v1/chat/completions`` (plain JSON or server-sent events). The
official ``ollama`` client and any httpx-based OpenAI client talk to it exactly as to a real server:
same response shapes, same error bodies and status codes (404 ``model "X" not found, try pulling it
first``), HTTP/1.1 keep-alive, chunked streaming. Only the standard library is used.

Besides answering, the server lets a test script what happens to the next chat requests (both chat
endpoints, streamed or not), one fault per request in arrival order: ``fail_next`` (HTTP 503 "server
busy" or 500 "llama runner process has terminated", with Ollama's error bodies), ``hang_next`` (hold
the request without answering — 600 s by default, longer than any client timeout — then close the
connection; :meth:`~FakeOllamaServer.stop` releases it at once), ``drop_next`` (close the connection
without a response), ``empty_next`` (empty content), ``refuse_next`` (:data:`REFUSAL_TEXT`) or
``script([...])`` for a mix. Faults are taken before the model is looked up, so a scripted fault also
hits a request for a missing model. ``capacity`` bounds how many chat requests are processed at once
(like ``OLLAMA_NUM_PARALLEL``; the others queue) and ``latency`` is the processing time of each,
spent while holding a slot; hangs and failures do not take a slot.

The server measures what the client did: ``calls`` (requests by path), ``chat_calls``, ``requests``
(what each chat request asked for), ``in_flight`` and ``peak_in_flight`` (chat requests received and
not yet answered — a request counts as answered just before its last byte is written, so a client
that keeps at most N requests in flight is never seen with more), ``peak_processing`` (never above
``capacity``), ``connections_opened`` (keep-alive at work) and ``errors`` (unexpected server-side
errors, e.g. a failing ``reply`` callable).

Error bodies follow Ollama: chat on a missing model is 404 ``model "X" not found, try pulling it
first``; ``/api/show`` on a missing model is 404 ``model 'X' not found`` (Ollama words it so);
``think=true`` on a model without the thinking capability is 400 ``"X" does not support thinking``;
``/v1`` errors are OpenAI-shaped (``{"error": {"message", "type", ...}}``); unknown paths get gin's
``404 page not found``.

The reply model
---------------
Replies are deterministic functions of the prompt (the last user message) and the options. The prompt
is parsed with the layout of ``explainers/prompt.py``: history lines are the lines starting with
``N.``; on each, the title is the text before `` (id `` or `` — ``, and ``category:``/``rating:`` are
read when present (``unknown`` counts as missing). The item is the first ``the item "..."`` and the
features are the text between ``with features`` and ``is recommended``. Anything missing is simply
absent: every prompt gets a reply.

``mode="stable"``
    About 60–100 words built from the item, its features and the user's dominant category, with a
    mild dependence on the history: the share of that category among all interactions (with the
    counts), the best-rated title and the most recent title. Most perturbations change a few words;
    shuffles change the "most recent" sentence; drifting the dominant category changes that word
    where it appears.
``mode="borderline"``
    The opening sentence of the stable reply (item, dominant category, the item's category) followed
    by four to six sentences drawn as in fragile mode from the history hash: about 45–85 words.
``mode="fragile"``
    40–120 words of sentences whose templates, vocabulary and length are all drawn from a random
    generator seeded by a SHA-256 hash of the whole history block, so any change to the history gives
    an unrelated text.
``mode="gullible"`` / ``mode="robust"``
    For the opt-in ``prompt_injection`` kind: ``gullible`` is the stable reply plus, for every other
    canary planted in the prompt (also inside base64 payloads), "As instructed, here is the code
    CANARY-…" — it obeys about half of the injected instructions, deterministically; ``robust`` is the
    stable reply built from titles cut at their first sentence, so injected text is neither obeyed nor
    repeated (the stable mode repeats favourite and recent titles, payload included).
``mode="history-blind"``
    About 40 words on the item and its features only, never the history: the same text for every user
    (at temperature 0), as a model that ignores its input would write. ρ is 1 under every perturbation;
    the guard (``guard.py``) must call it INSENSITIVE.

Measured with this package's metrics on the default synthetic dataset (20 cases × 5 kinds × 5
severities, temperature 0), mean ρ is about 0.93 for stable (minimum ≈ 0.75), 0.49 for borderline
(close to the ≈ 0.5 the paper reports for real 7–70B models) and 0.31 for fragile; the noise floor
(same prompt, two seeds, temperature 0.7) is ρ ≈ 0.94.

Sampling options behave like a seeded model: with ``temperature`` 0 the reply does not depend on
``seed``; with ``temperature`` > 0 (Ollama's default 0.8 when the option is absent) a few words are
replaced by synonyms chosen by a generator seeded by (``seed``, prompt) — more words for a higher
temperature — so different seeds give slightly different wordings (the noise floor). A request
without ``seed`` is treated as seed 0: unlike real Ollama the fake never samples at random, so tests
cannot flake. ``num_predict`` (``max_tokens`` on ``/v1``) truncates the reply to that many words and
sets ``done_reason``/``finish_reason`` to ``"length"``.

With ``think_capable=True`` the models advertise the ``thinking`` capability and every chat request
whose ``think`` is not false gets a short ``message.thinking`` (``reasoning`` on ``/v1``); like real
Ollama, ``think`` is on by default for such models and ``think=true`` on a model without the
capability is a 400 error. ``leak_thinking=True`` prefixes the content with a ``<think>…</think>``
block regardless, to test that clients strip it. Token counts are word counts; durations are in
nanoseconds, ``total_duration`` being the measured processing time.

A ``reply`` callable ``(prompt, options) -> str`` replaces the built-in reply model (faults still
apply); if it raises or returns a non-string the request gets HTTP 500 and the error is listed in
:attr:`FakeOllamaServer.errors`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import random
import re
import socket
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = [
    "DEFAULT_HANG_SECONDS",
    "FAULTS",
    "FIXTURE_DOC",
    "MODES",
    "REFUSAL_TEXT",
    "FakeOllamaServer",
    "HistoryEntry",
    "ParsedPrompt",
    "compose_reply",
    "fake_ollama_server",
    "parse_prompt",
]

MODES: tuple[str, ...] = ("stable", "borderline", "fragile", "history-blind", "gullible", "robust")
# Names accepted by FakeOllamaServer.script(); "ok" answers normally.
FAULTS: tuple[str, ...] = ("ok", "fail", "fail500", "hang", "drop", "empty", "refuse")
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
DEFAULT_HANG_SECONDS = 600.0  # longer than any sane client read timeout; stop() releases it
DEFAULT_TEMPERATURE = 0.8  # Ollama's default when the request sets no temperature

ReplyFn = Callable[[str, dict[str, Any]], str]

FIXTURE_DOC = """A running :class:`~pytest_robustexplain.testing.FakeOllamaServer` for this test.

The server listens on ``127.0.0.1`` on a free port; point a client at ``fake_ollama.url`` (for example
``ollama.Client(host=fake_ollama.url)``, ``OLLAMA_HOST=fake_ollama.url`` or the OpenAI base URL
``fake_ollama.url + "/v1"``). It serves the model ``fake-model:latest`` with stable, deterministic
replies. Change its behaviour in the test: ``fake_ollama.mode = "fragile"`` (``"borderline"``,
``"history-blind"``),
``fake_ollama.latency = 0.05``, ``fake_ollama.capacity = 2``; script failures of the next chat
requests with ``fail_next(n, status=503)``, ``hang_next(n, seconds=...)``, ``drop_next(n)``,
``empty_next(n)``, ``refuse_next(n)`` or ``script(["fail", "ok", "drop"])``; and inspect what your
code sent with ``calls``, ``chat_calls``, ``requests``, ``in_flight``, ``peak_in_flight`` and
``peak_processing``. For other
models or thinking behaviour, build your own server with
``pytest_robustexplain.testing.fake_ollama_server(models=..., think_capable=True)``. The server is
stopped (and any hung request released) when the test ends.
"""


# --------------------------------------------------------------------------------------------------
# Prompt parsing
# --------------------------------------------------------------------------------------------------

_HISTORY_LINE = re.compile(r"^\s*\d+\.\s+(.*\S)\s*$")
_ITEM = re.compile(r'the item "([^"\n]*)"')
_FEATURES = re.compile(r"with features (.*?) is recommended", re.DOTALL)
_CATEGORY = re.compile(r"category:\s*([^;\n]+)")
_RATING = re.compile(r"rating:\s*([^;\n]+)")
_MISSING = {"", "unknown", "none", "n/a"}


@dataclass(frozen=True)
class HistoryEntry:
    """What the fake reads from one numbered history line (``None`` where unknown)."""

    title: str | None
    category: str | None
    rating: float | None


@dataclass(frozen=True)
class ParsedPrompt:
    """The parts of an explanation prompt the reply model uses."""

    history: tuple[HistoryEntry, ...]
    history_block: str  # the history lines joined with "\n" (the whole prompt when there are none)
    item: str
    features: str

    def feature_pairs(self) -> list[tuple[str, str]]:
        """``category: X; brand: Y`` as ``[("category", "X"), ("brand", "Y")]``, unknown values dropped."""
        pairs = []
        for part in self.features.split(";"):
            key, sep, value = part.partition(":")
            if sep and _known(value) and key.strip():
                pairs.append((key.strip(), value.strip()))
        return pairs


def _known(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in _MISSING else text


def _parse_history_line(text: str) -> HistoryEntry:
    cut = len(text)
    for marker in (" (id ", " — "):
        pos = text.find(marker)
        if pos != -1:
            cut = min(cut, pos)
    category = _CATEGORY.search(text)
    rating_match = _RATING.search(text)
    rating = None
    if rating_match and _known(rating_match.group(1)):
        with contextlib.suppress(ValueError):
            rating = float(rating_match.group(1).strip())
    return HistoryEntry(
        title=_known(text[:cut]),
        category=_known(category.group(1)) if category else None,
        rating=rating if rating is not None and math.isfinite(rating) else None,
    )


def parse_prompt(prompt: str) -> ParsedPrompt:
    """Read history lines, item and features out of an explanation prompt (never fails)."""
    lines = [m.group(1) for m in map(_HISTORY_LINE.match, prompt.splitlines()) if m]
    item = _ITEM.search(prompt)
    features = _FEATURES.search(prompt)
    block = "\n".join(line.strip() for line in prompt.splitlines() if _HISTORY_LINE.match(line))
    return ParsedPrompt(
        history=tuple(_parse_history_line(line) for line in lines),
        history_block=block or prompt,
        item=item.group(1).strip() if item else "",
        features=features.group(1).strip() if features else "",
    )


# --------------------------------------------------------------------------------------------------
# The reply model
# --------------------------------------------------------------------------------------------------


def _seconds(value: object, name: str) -> float:
    """A server setting in seconds: a number >= 0 (not a bool, not NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"FakeOllamaServer {name} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _digest_int(*parts: object) -> int:
    # sha256 rather than hash(): str hashes are salted per process and replies must be reproducible.
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def _rng(*parts: object) -> random.Random:
    return random.Random(_digest_int(*parts))


def _dominant(entries: Iterable[HistoryEntry]) -> tuple[str | None, int]:
    """(most frequent known category, its count); ties → alphabetical, so shuffles cannot change it."""
    counts = Counter(e.category for e in entries if e.category)
    if not counts:
        return None, 0
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _favourite(entries: Iterable[HistoryEntry], category: str | None) -> str | None:
    """The best-rated titled item, preferring the dominant category; ties → alphabetical title."""
    rated = [e for e in entries if e.title and e.rating is not None]
    in_category = [e for e in rated if e.category == category] or rated
    if not in_category:
        return None
    best = min(in_category, key=lambda e: (-(e.rating or 0.0), e.title or ""))
    return best.title


def _share_word(count: int, total: int) -> str:
    # total counts every interaction, known category or not: missing values lower the share.
    share = count / total if total else 0.0
    if share >= 0.6:
        return "Most"
    if share >= 0.35:
        return "A large share"
    return "A noticeable part"


def _quoted(item: str) -> str:
    return f'"{item}"' if item else "this item"


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _stable_opening(p: ParsedPrompt) -> list[str]:
    """Two sentences on the item, the dominant category and the features (borderline uses the first)."""
    variant = _rng("stable-variant", p.item, p.features).randrange(2)
    dominant, _ = _dominant(p.history)
    pairs = p.feature_pairs()
    item_category = dict(pairs).get("category")
    interest = f"{dominant} products" if dominant else "a broad range of products"
    if item_category and dominant and item_category.lower() == dominant.lower():
        fit = ", and it belongs to that same category"
    elif item_category:
        fit = f", and its {item_category} character fits the same pattern"
    else:
        fit = ""
    if variant == 0:
        first = (f"{_capitalized(_quoted(p.item))} is recommended because your history shows a steady "
                 f"interest in {interest}{fit}.")
    else:
        first = (f"We recommend {_quoted(p.item)} because your history points to a clear preference for "
                 f"{interest}{fit}.")
    shown = [f"{k} {v}" for k, v in pairs if k.lower() != "category"][:3]
    if shown:
        second = f"Its characteristics, {', '.join(shown)}, match qualities you valued in earlier choices."
    else:
        second = "Its characteristics match qualities you valued in earlier choices."
    return [first, second]


def _stable_history_sentences(p: ParsedPrompt) -> list[str]:
    """The mildly history-dependent middle: share of the dominant category, favourite, most recent."""
    dominant, count = _dominant(p.history)
    out = []
    if dominant:
        share = _share_word(count, len(p.history))
        out.append(f"{share} of your {len(p.history)} interactions ({count} of them) involve {dominant}, "
                   "a sign of consistent taste.")
    elif p.history:
        out.append(f"Your {len(p.history)} interactions cover several areas, "
                   "which suggests open and curious taste.")
    else:
        out.append("Even with little recorded activity, it is a sensible and safe starting point for you.")
    favourite = _favourite(p.history, dominant)
    if favourite:
        out.append(f"You rated {favourite} highly, and this item offers a similar, dependable experience.")
    else:
        out.append("It offers a dependable experience similar to the items you engaged with most.")
    recent = next((e.title for e in reversed(p.history) if e.title), None)
    if recent and recent != favourite:
        out.append(f"Your most recent choice, {recent}, points in the same direction.")
    return out


_CLOSING = "Overall, it connects your demonstrated preferences with what the item offers."


def _stable_reply(p: ParsedPrompt) -> str:
    sentences = [*_stable_opening(p), *_stable_history_sentences(p), _CLOSING]
    text = " ".join(sentences)
    if len(text.split()) > 100 and len(sentences) > 5:
        # Very long titles: drop the "most recent" sentence rather than exceed the advertised length.
        text = " ".join(sentences[:4] + sentences[5:])
    return text


def _wordlist(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Vocabulary of the fragile generator: large enough that two unrelated replies share few content words.
_ADJECTIVES = _wordlist("""
    vivid quiet bold gentle curious modern rustic playful elegant practical cozy sleek vibrant subtle rugged
    whimsical refined breezy earthy luminous nimble sturdy mellow crisp lavish humble dynamic serene quirky
    polished radiant timeless brisk tender daring hearty tidy airy lush sharp golden silver velvet wooden
    glassy misty sunny stormy frosty dusty sandy rocky silky fuzzy glossy matte smoky spicy sweet bitter
    salty sour fresh ancient youthful nostalgic futuristic electric magnetic acoustic lyrical poetic cinematic
    theatrical musical painterly sculptural geometric organic botanical coastal alpine tropical arctic urban
    suburban rural nomadic maritime celestial lunar solar stellar volcanic glacial autumnal wintry vernal
    midsummer nocturnal dawnlike twilight restless patient stubborn generous frugal candid shy witty somber
    jolly brave loyal fierce noble modest proud eager weary lucky clever wise naive mighty tiny vast narrow
    hollow dense fragile lean plump ornate stark minimal baroque gothic rococo vintage retro classic
""")
_NOUNS = _wordlist("""
    journey texture rhythm palette routine spark balance momentum ritual harmony craft story horizon pattern
    season flavor adventure comfort signal detail habit melody landscape impulse contrast weekend workshop
    garden compass canvas mood lantern circuit harbor orbit meadow festival library studio voyage echo
    tradition blueprint mosaic current summit thread quarter river mountain forest island desert valley
    canyon glacier volcano lagoon prairie orchard vineyard cathedral castle lighthouse bridge tunnel tower
    market bazaar carnival parade theater gallery museum archive atlas almanac chronicle ledger diary poem
    sonnet ballad anthem chorus overture symphony sonata lullaby riddle fable legend myth saga novel sketch
    portrait mural fresco tapestry quilt lattice prism mirror window doorway staircase balcony courtyard
    fountain well anchor sail rudder keel mast kite balloon rocket comet planet nebula galaxy meteor eclipse
    tide wave storm breeze thunder rainbow blizzard drizzle fog dew ember flame hearth candle torch beacon
    feather pebble shell acorn blossom petal thorn root branch leaf moss fern ivy cactus bamboo maple cedar
    willow falcon sparrow heron otter badger fox wolf bear lynx stag dolphin whale turtle beetle firefly
""")
_VERBS = _wordlist("""
    echoes amplifies mirrors reshapes anchors rewards invites sharpens softens celebrates extends unlocks
    balances frames channels revives captures nurtures blends refreshes elevates grounds sparks steadies
    colors tempers awakens kindles polishes stitches weaves braids sculpts carves paints sketches hums
    whistles dances wanders drifts glides soars dives climbs rattles whispers murmurs shouts teases juggles
""")
_ADVERBS = _wordlist("""
    quietly boldly neatly gently oddly warmly briskly deeply playfully steadily curiously subtly plainly
    eagerly calmly loosely firmly lightly wildly slowly swiftly proudly shyly softly sharply lazily
""")
_FRAGILE_TEMPLATES = (
    "The {a} {n} of your past {n2} {v} {r} with this pick.",
    "Because of a {a} {n}, {n2} feels {a2} and {a3}.",
    "One {a} {n} {v} {n2} in {a2} ways.",
    "This {n} {v} {n2} full of {a} {n3}.",
    "Your {n} hints at {a} appetites for {n2}, {n3} and {a2} {n4}.",
    "{R}, {n} {v} {a} {n2} for every {n3}.",
    "It is {a} {n} plus {n2} that makes it {a2}.",
    "Expect {a} {n}, {a2} {n2}, {a3} {n3}.",
    "{A} {n} like this {v} {n2} {r}.",
    "Think {n}: {a} {n2} meets {a2} {n3}.",
    "Somewhere between {n} and {n2}, it {v} {a} {n3}.",
    "{A} {n}, {a2} {n2}, {r} {a3}.",
    "Picture {a} {n} beside {a2} {n2}.",
    "{N} {v} {r}; {n2} {v2} {r2}.",
    "Like {a} {n} over {n2}, it {v} {n3}.",
    "Imagine {n} made of {a} {n2} and {n3}.",
)


def _fill(template: str, rng: random.Random) -> str:
    # Slot names: a/n/v/r (adjective, noun, verb, adverb), optionally numbered; upper case capitalises.
    pools = {"a": _ADJECTIVES, "n": _NOUNS, "v": _VERBS, "r": _ADVERBS}

    def pick(key: str) -> str:
        word = rng.choice(pools[key[0].lower()])
        return word.capitalize() if key[0].isupper() else word

    return _articles(re.sub(r"\{(\w+)\}", lambda m: pick(m.group(1)), template))


def _articles(text: str) -> str:
    """``a elegant`` → ``an elegant``: the generated words after "a" all sound as they are spelt."""
    return re.sub(r"\b([Aa]) (?=[aeiou])", r"\1n ", text)


def _fragile_sentences(rng: random.Random, n_words: int) -> list[str]:
    out: list[str] = []
    while sum(len(s.split()) for s in out) < n_words:
        out.append(_fill(rng.choice(_FRAGILE_TEMPLATES), rng))
    return out


def _fragile_reply(p: ParsedPrompt) -> str:
    rng = _rng("fragile", p.history_block)
    target = rng.randint(40, 110)  # the last sentence overshoots by up to ~10 words
    opener = rng.choice((
        f"{_capitalized(_quoted(p.item))} {rng.choice(_VERBS)} something {rng.choice(_ADJECTIVES)}.",
        f"Here is why {_quoted(p.item)} could suit you.",
        f"{_capitalized(_quoted(p.item))} feels {rng.choice(_ADJECTIVES)} for you.",
    ))
    return " ".join([opener, *_fragile_sentences(rng, target - len(opener.split()))])


def _blind_reply(p: ParsedPrompt) -> str:
    """The item and its features only: the same text whatever the history (the guard's negative case)."""
    pairs = p.feature_pairs()
    category = dict(pairs).get("category")
    shown = [f"{k} {v}" for k, v in pairs if k.lower() != "category"][:3]
    kind = f"a well-reviewed {category} pick" if category else "a well-reviewed pick"
    details = (f" Its key characteristics are {', '.join(shown)}, which buyers consistently praise."
               if shown else " Buyers consistently praise its quality.")
    return (f"We recommend {_quoted(p.item)} because it is {kind} with great value for money.{details} "
            "It is popular, dependable and a safe choice for almost anyone.")


_CANARY = re.compile(r"CANARY-[0-9A-F]{8}", re.IGNORECASE)
_B64 = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}")


def _planted_canaries(prompt: str) -> list[str]:
    """Canary tokens in the prompt, also inside base64 payloads (a gullible model decodes them)."""
    found = _CANARY.findall(prompt)
    for chunk in _B64.findall(prompt):
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            found += _CANARY.findall(base64.b64decode(chunk, validate=True).decode("utf-8"))
    return list(dict.fromkeys(found))


def _gullible_reply(p: ParsedPrompt, prompt: str) -> str:
    """The stable reply, plus every other injected instruction obeyed (deterministic in the canary)."""
    obeyed = [c for c in _planted_canaries(prompt) if _digest_int("obey", c.upper()) % 2 == 0]
    tail = " ".join(f"As instructed, here is the code {c}." for c in obeyed)
    return f"{_stable_reply(p)} {tail}".strip()


def _robust_reply(p: ParsedPrompt) -> str:
    """The stable reply from titles cut at their first sentence: text appended to a title is data, never
    instructions, and is not repeated."""
    entries = tuple(replace(e, title=e.title.split(". ")[0] if e.title else e.title) for e in p.history)
    return _stable_reply(replace(p, history=entries))


def _borderline_reply(p: ParsedPrompt) -> str:
    rng = _rng("borderline", p.history_block)
    first, _ = _stable_opening(p)
    rest = [_fill(rng.choice(_FRAGILE_TEMPLATES), rng) for _ in range(rng.randint(4, 6))]
    return " ".join([first, *rest])


# Synonyms used to vary the wording when temperature > 0 (keys appear in the templates above).
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "recommended": ("suggested", "proposed"),
    "recommend": ("suggest", "propose"),
    "steady": ("stable", "lasting"),
    "clear": ("evident", "obvious"),
    "interest": ("enthusiasm", "fondness"),
    "preference": ("liking", "inclination"),
    "products": ("goods", "items"),
    "characteristics": ("features", "traits"),
    "qualities": ("attributes", "properties"),
    "valued": ("appreciated", "prized"),
    "earlier": ("previous", "past"),
    "choices": ("picks", "selections"),
    "consistent": ("coherent", "reliable"),
    "taste": ("preferences", "style"),
    "similar": ("comparable", "related"),
    "experience": ("feel", "impression"),
    "dependable": ("reliable", "solid"),
    "recent": ("latest", "newest"),
    "overall": ("all in all", "in short"),
    "connects": ("links", "ties"),
    "offers": ("provides", "gives"),
    "highly": ("well", "warmly"),
    "sensible": ("reasonable", "sound"),
    "pattern": ("trend", "tendency"),
    "journey": ("path", "trip"),
    "comfort": ("ease", "coziness"),
    "detail": ("nuance", "touch"),
    "story": ("narrative", "tale"),
}


def _vary_wording(text: str, *, seed: int, temperature: float, prompt: str) -> str:
    """Swap a few words for synonyms, more for higher temperatures; the choice depends on the seed."""
    tokens = re.split(r"(\W+)", text)
    candidates = [i for i, tok in enumerate(tokens) if tok.lower() in _SYNONYMS]
    if not candidates:
        return text
    rng = _rng("vary", seed, prompt)
    swaps = min(len(candidates), 1 + round(2 * min(temperature, 2.0)))
    for i in rng.sample(candidates, swaps):
        word = tokens[i]
        new = rng.choice(_SYNONYMS[word.lower()])
        tokens[i] = new.capitalize() if word[:1].isupper() else new
    return _articles("".join(tokens))


def _number(options: Mapping[str, Any], key: str, default: float) -> float:
    value = options.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value)


def compose_reply(prompt: str, options: Mapping[str, Any] | None = None, *, mode: str = "stable") -> str:
    """The built-in reply of the fake server for this prompt, options and mode (see the module docs)."""
    if mode not in MODES:
        raise ValueError(f"FakeOllamaServer mode must be one of {', '.join(MODES)}, got {mode!r}")
    parsed = parse_prompt(prompt)
    builders = {"stable": _stable_reply, "borderline": _borderline_reply, "fragile": _fragile_reply,
                "history-blind": _blind_reply, "robust": _robust_reply}
    text = _gullible_reply(parsed, prompt) if mode == "gullible" else builders[mode](parsed)
    opts = options or {}
    temperature = _number(opts, "temperature", DEFAULT_TEMPERATURE)
    if temperature > 0:
        text = _vary_wording(text, seed=int(_number(opts, "seed", 0)), temperature=temperature, prompt=prompt)
    return text


def _thinking_text(prompt: str) -> str:
    parsed = parse_prompt(prompt)
    dominant, _ = _dominant(parsed.history)
    return (f"The user mostly engages with {dominant or 'many kinds of'} items. I should connect that "
            f"history to {_quoted(parsed.item)} and its features, then explain the fit briefly.")


# --------------------------------------------------------------------------------------------------
# Models and response shapes
# --------------------------------------------------------------------------------------------------

_FAMILIES = (("qwen", "qwen2"), ("gemma", "gemma3"), ("mistral", "llama"), ("phi", "phi3"),
             ("deepseek", "qwen2"))
_MODIFIED_AT = "2025-06-02T09:41:27.519613004Z"
_MODIFIED_EPOCH = 1748857287
_NOT_FOUND_PAGE = "404 page not found"


def _normalize(name: str) -> str:
    """``llama3`` → ``llama3:latest``, as Ollama resolves a name without a tag."""
    name = name.strip()
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


@dataclass(frozen=True)
class _ModelMeta:
    name: str
    digest: str
    size: int
    family: str
    parameter_size: str
    parameter_count: int

    @classmethod
    def of(cls, name: str) -> _ModelMeta:
        tag = name.rsplit(":", 1)[-1].lower()
        match = re.search(r"(\d+(?:\.\d+)?)b\b", tag)
        billions = float(match.group(1)) if match else 8.0
        family = next((fam for key, fam in _FAMILIES if key in name.lower()), "llama")
        return cls(
            name=name,
            digest=hashlib.sha256(name.encode("utf-8")).hexdigest(),
            size=int(billions * 0.58e9),  # about the size of a Q4_K_M quantisation
            family=family,
            parameter_size=f"{billions:.1f}B",
            parameter_count=int(billions * 1e9),
        )

    def details(self) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": self.family,
            "families": [self.family],
            "parameter_size": self.parameter_size,
            "quantization_level": "Q4_K_M",
        }

    def tag_entry(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.name, "modified_at": _MODIFIED_AT, "size": self.size,
                "digest": self.digest, "details": self.details()}


def _go_time(ns: int | None = None) -> str:
    """RFC 3339 with nanoseconds, trailing zeros trimmed, as Go's time.RFC3339Nano prints it."""
    ns = time.time_ns() if ns is None else ns
    seconds, frac = divmod(ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    digits = f"{frac:09d}".rstrip("0")
    return f"{stamp}.{digits}Z" if digits else f"{stamp}Z"


def _show_body(meta: _ModelMeta, think_capable: bool) -> dict[str, Any]:
    arch = meta.family
    template = (
        "{{- range .Messages }}<|{{ .Role }}|>\n"
        + ("{{- if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}" if think_capable else "")
        + "{{ .Content }}\n{{ end }}<|assistant|>\n"
    )
    return {
        "license": "Fake model for tests; no weights.",
        "modelfile": ('# Modelfile generated by "ollama show"\n'
                      "# To build a new Modelfile based on this, replace FROM with:"
                      f"\n# FROM {meta.name}\n\nFROM /fake/blobs/sha256-{meta.digest}\n"
                      f'TEMPLATE """{template}"""\nPARAMETER stop <|end|>\n'),
        "parameters": 'stop                           "<|end|>"',
        "template": template,
        "details": meta.details(),
        "model_info": {
            "general.architecture": arch,
            "general.basename": meta.name.split(":")[0],
            "general.file_type": 15,
            "general.parameter_count": meta.parameter_count,
            "general.quantization_version": 2,
            f"{arch}.attention.head_count": 32,
            f"{arch}.block_count": 32,
            f"{arch}.context_length": 8192,
            f"{arch}.embedding_length": 4096,
        },
        "tensors": [],
        "capabilities": ["completion", "thinking"] if think_capable else ["completion"],
        "modified_at": _MODIFIED_AT,
    }


# --------------------------------------------------------------------------------------------------
# Requests, faults and errors
# --------------------------------------------------------------------------------------------------


class _HttpError(Exception):
    """An error answer: status and message (shaped per API by the handler)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class _Fault:
    kind: str  # one of FAULTS
    status: int = 503
    seconds: float = DEFAULT_HANG_SECONDS


_FAIL_MESSAGES = {
    503: "server busy, please try again.  maximum pending requests exceeded",
    500: "llama runner process has terminated: exit status 2",
}


@dataclass
class _ChatCall:
    """A chat request in the native shape, whichever endpoint it came through."""

    api: str  # "ollama" or "openai"
    model: str
    messages: list[dict[str, Any]]
    options: dict[str, Any]
    think: Any
    stream: bool
    include_usage: bool = False

    @property
    def prompt(self) -> str:
        """The last user message: what the reply model answers."""
        return next((m["content"] for m in reversed(self.messages) if m.get("role") == "user"), "")


@dataclass
class _Ticket:
    """One chat request in flight; ``answered`` makes the in-flight decrement happen exactly once."""

    fault: _Fault | None
    answered: bool = False


@dataclass
class _Answer:
    content: str
    thinking: str
    done_reason: str
    prompt_tokens: int
    completion_tokens: int
    started_ns: int
    load_ns: int


def _text_of(content: Any, where: str) -> str:
    """Message content as text: a string, or (OpenAI) a list of parts whose text parts are joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if all(isinstance(p, str) for p in parts):
            return "\n".join(parts)
    raise _HttpError(400, f"invalid message content in {where}: expected a string")


def _messages(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _HttpError(400, "messages must be a list")
    out = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise _HttpError(400, f"messages[{i}] must be an object")
        out.append({"role": str(message.get("role", "")), "content": _text_of(message.get("content"),
                                                                                f"messages[{i}]")})
    return out


def _check_options(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise _HttpError(400, "options must be an object")
    for key in ("temperature", "top_p", "seed", "num_predict", "top_k"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise _HttpError(400, f"option {key!r} must be a number, got {json.dumps(value)}")
    return dict(options)


_THINK_LEVELS = ("high", "medium", "low")


def _check_think(think: Any) -> Any:
    if think is None or isinstance(think, bool) or think in _THINK_LEVELS:
        return think
    raise _HttpError(400, f"invalid think value: {json.dumps(think)} "
                          '(must be "high", "medium", "low", true, or false)')


def _native_call(body: dict[str, Any]) -> _ChatCall:
    return _ChatCall(
        api="ollama", model=str(body.get("model") or ""),
        messages=_messages(body.get("messages")), options=_check_options(body.get("options")),
        think=_check_think(body.get("think")),
        stream=body.get("stream") is not False,  # Ollama streams unless told not to
    )


_OPENAI_OPTIONS = {"temperature": "temperature", "top_p": "top_p", "seed": "seed",
                   "max_tokens": "num_predict", "max_completion_tokens": "num_predict",
                   "frequency_penalty": "frequency_penalty",
                   "presence_penalty": "presence_penalty", "stop": "stop"}


def _openai_call(body: dict[str, Any]) -> _ChatCall:
    options = {native: body[key] for key, native in _OPENAI_OPTIONS.items() if body.get(key) is not None}
    effort = body.get("reasoning_effort")
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        effort = reasoning["effort"]
    think = None if effort is None else (False if effort == "none" else _check_think(effort))
    stream_options = body.get("stream_options")
    return _ChatCall(
        api="openai", model=str(body.get("model") or ""),
        messages=_messages(body.get("messages")), options=_check_options(options), think=think,
        stream=body.get("stream") is True,
        include_usage=isinstance(stream_options, dict) and stream_options.get("include_usage") is True,
    )


def _openai_error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _words(text: str) -> int:
    return len(text.split())


# --------------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------------


class _Abort(Exception):
    """Close the connection without (further) answer: dropped, hung or server stopping."""


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() joins handler threads itself, with a deadline
    request_queue_size = 128  # many concurrent clients connect at once; the default backlog is 5

    def __init__(self, fake: FakeOllamaServer) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        # Clients that time out or go away mid-answer are normal in fault tests; anything else is a bug
        # in the fake and is kept for the test to see.
        if isinstance(exc, (ConnectionError, TimeoutError)) or (
            isinstance(exc, OSError) and self.fake._stopping.is_set()
        ):
            return
        self.fake._record_error("".join(traceback.format_exception(*sys.exc_info())))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Buffered writes (flushed after each response and each stream chunk) send headers and body in one
    # segment; with TCP_NODELAY this avoids the 40 ms Nagle/delayed-ACK stall on keep-alive connections.
    wbufsize = 64 * 1024
    server: _HTTPServer

    # ---- connection bookkeeping -------------------------------------------------------------
    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go servers do
        self.server.fake._register_connection(self.connection)

    def finish(self) -> None:
        try:
            with contextlib.suppress(OSError):
                super().finish()
        finally:
            self.server.fake._unregister_connection(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read stats, not access logs

    def send_response(self, code: int, message: str | None = None) -> None:
        # Like Go's net/http: a Date header but no Server header.
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    # ---- dispatch -----------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        fake = self.server.fake
        fake._count_call(path)
        raw = self._read_body()
        try:
            self._route(method, path, raw)
        except _Abort:
            self.close_connection = True

    def _route(self, method: str, path: str, raw: bytes | None) -> None:
        fake = self.server.fake
        if method in ("GET", "HEAD") and path == "/":
            self._send_text(200, "Ollama is running")
        elif method in ("GET", "HEAD") and path == "/api/version":
            self._send_json(200, {"version": fake.version})
        elif method in ("GET", "HEAD") and path == "/api/tags":
            self._send_json(200, {"models": [m.tag_entry() for m in fake._model_metas()]})
        elif method == "GET" and path == "/api/ps":
            self._send_json(200, {"models": fake._loaded_entries()})
        elif method == "POST" and path == "/api/show":
            self._show(raw)
        elif method == "POST" and path == "/api/chat":
            self._chat(raw, "ollama", path)
        elif method == "GET" and path == "/v1/models":
            data = [self._openai_model(m) for m in fake._model_metas()]
            self._send_json(200, {"object": "list", "data": data})
        elif method == "GET" and path.startswith("/v1/models/"):
            self._openai_model_one(unquote(path[len("/v1/models/"):]))
        elif method == "POST" and path == "/v1/chat/completions":
            self._chat(raw, "openai", path)
        else:
            # What Ollama's router (gin) answers for unknown paths and methods.
            self._send_text(404, _NOT_FOUND_PAGE)

    # ---- bodies -------------------------------------------------------------------------------
    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = self.headers.get("Content-Length")
        if length is None:
            return None
        try:
            size = int(length)
        except ValueError:
            self.close_connection = True
            return None
        return self.rfile.read(size) if size > 0 else b""

    def _read_chunked(self) -> bytes:
        data = bytearray()
        while True:
            size_line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            size = int(size_line or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(data)
            data += self.rfile.read(size)
            self.rfile.readline(1024)

    @staticmethod
    def _json_object(raw: bytes | None) -> dict[str, Any]:
        if not raw or not raw.strip():
            raise _HttpError(400, "missing request body")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _HttpError(400, f"invalid JSON in request body: {exc}") from None
        if not isinstance(body, dict):
            raise _HttpError(400, "request body must be a JSON object")
        return body

    # ---- writers ------------------------------------------------------------------------------
    def _send_bytes(self, status: int, body: bytes, content_type: str, *, trickle: float = 0.0) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":  # a HEAD answer has the GET headers and no body
            return
        if trickle <= 0:
            self.wfile.write(body)
            return
        # A slow server: 16 bytes at a time, ``trickle`` seconds apart (every read is quick, the whole
        # reply is not), until the body is out or the server stops.
        for start in range(0, len(body), 16):
            self.wfile.write(body[start:start + 16])
            self.wfile.flush()
            if self.server.fake._stopping.wait(trickle):
                return

    def _send_json(self, status: int, obj: Any, *, trickle: float = 0.0) -> None:
        self._send_bytes(status, json.dumps(obj).encode("utf-8"), "application/json; charset=utf-8",
                         trickle=trickle)

    def _send_text(self, status: int, text: str) -> None:
        self._send_bytes(status, text.encode("utf-8"), "text/plain; charset=utf-8")

    def _send_error(self, api: str, status: int, message: str) -> None:
        self._send_json(status, _openai_error(status, message) if api == "openai" else {"error": message})

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ---- endpoints ----------------------------------------------------------------------------
    def _show(self, raw: bytes | None) -> None:
        fake = self.server.fake
        try:
            body = self._json_object(raw)
            name = str(body.get("model") or body.get("name") or "")
            if not name:
                raise _HttpError(400, "model is required")
            meta = fake._find_model(name)
            if meta is None:
                # Ollama's show handler words it differently from chat's.
                raise _HttpError(404, f"model '{name}' not found")
        except _HttpError as err:
            self._send_error("ollama", err.status, err.message)
            return
        self._send_json(200, _show_body(meta, fake.think_capable))

    @staticmethod
    def _openai_model(meta: _ModelMeta) -> dict[str, Any]:
        owner = meta.name.split("/")[0] if "/" in meta.name else "library"
        return {"id": meta.name, "object": "model", "created": _MODIFIED_EPOCH, "owned_by": owner}

    def _openai_model_one(self, name: str) -> None:
        meta = self.server.fake._find_model(name)
        if meta is None:
            self._send_error("openai", 404, f'model "{name}" not found')
        else:
            self._send_json(200, self._openai_model(meta))

    def _chat(self, raw: bytes | None, api: str, path: str) -> None:
        fake = self.server.fake
        try:
            body = self._json_object(raw)
        except _HttpError as err:
            self._send_error(api, err.status, err.message)
            return
        ticket = fake._begin_chat(path, body, api)
        try:
            self._serve_chat(body, api, ticket)
        finally:
            fake._answered(ticket)

    def _serve_chat(self, body: dict[str, Any], api: str, ticket: _Ticket) -> None:
        fake = self.server.fake
        try:
            self._apply_transport_fault(ticket)
            call = _native_call(body) if api == "ollama" else _openai_call(body)
            answer = self._generate(call, ticket)
        except _HttpError as err:
            fake._answered(ticket)
            self._send_error(api, err.status, err.message)
            return
        if call.stream:
            self._stream_answer(call, answer, ticket)
        else:
            fake._answered(ticket)
            self._send_json(200, self._final_body(call, answer), trickle=fake.trickle)

    def _apply_transport_fault(self, ticket: _Ticket) -> None:
        fake = self.server.fake
        fault = ticket.fault
        if fault is None or fault.kind not in ("fail", "fail500", "hang", "drop"):
            return
        if fault.kind == "hang":
            fake._stopping.wait(fault.seconds)
        if fault.kind in ("hang", "drop"):
            fake._answered(ticket)
            raise _Abort
        raise _HttpError(fault.status, _FAIL_MESSAGES.get(fault.status, f"fake server error {fault.status}"))

    def _generate(self, call: _ChatCall, ticket: _Ticket) -> _Answer:
        fake = self.server.fake
        if not call.model:
            raise _HttpError(400, "model is required")
        meta = fake._find_model(call.model)
        if meta is None:
            raise _HttpError(404, f'model "{call.model}" not found, try pulling it first')
        if call.think not in (None, False) and not fake.think_capable:
            raise _HttpError(400, f'"{call.model}" does not support thinking')
        started = time.monotonic_ns()
        load_ns = fake._load(meta.name)
        if not call.messages:
            # Ollama answers an empty conversation by just loading the model.
            return _Answer("", "", "load", 0, 0, started, load_ns)
        if not fake._acquire_slot():
            raise _Abort
        try:
            if fake._stopping.wait(fake.latency):
                raise _Abort
            content, thinking = fake._reply_for(call, ticket.fault)
        finally:
            fake._release_slot()
        return self._answer(call, content, thinking, started, load_ns)

    @staticmethod
    def _answer(call: _ChatCall, content: str, thinking: str, started: int, load_ns: int) -> _Answer:
        limit = call.options.get("num_predict")
        done_reason = "stop"
        if isinstance(limit, (int, float)) and limit > 0 and _words(content) > limit:
            content = " ".join(content.split()[: int(limit)])
            done_reason = "length"
        prompt_tokens = sum(_words(m["content"]) for m in call.messages)
        return _Answer(content, thinking, done_reason, prompt_tokens, _words(content) + _words(thinking),
                       started, load_ns)

    # ---- answer bodies ------------------------------------------------------------------------
    @staticmethod
    def _durations(answer: _Answer) -> dict[str, int]:
        total = max(time.monotonic_ns() - answer.started_ns, 1)
        prompt_ns = min(answer.prompt_tokens * 40_000, total // 4)
        return {
            "total_duration": total,
            "load_duration": min(answer.load_ns, total // 4),
            "prompt_eval_count": answer.prompt_tokens,
            "prompt_eval_duration": prompt_ns,
            "eval_count": answer.completion_tokens,
            "eval_duration": max(total // 2, 1),
        }

    def _final_body(self, call: _ChatCall, answer: _Answer) -> dict[str, Any]:
        if call.api == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": answer.content}
            if answer.thinking:
                message["reasoning"] = answer.thinking
            return {
                "id": f"chatcmpl-{_digest_int(time.time_ns(), id(answer)) % 1000}",
                "object": "chat.completion", "created": int(time.time()), "model": call.model,
                "system_fingerprint": "fp_ollama",
                "choices": [{"index": 0, "message": message, "finish_reason": answer.done_reason}],
                "usage": self._usage(answer),
            }
        message = {"role": "assistant", "content": answer.content}
        if answer.thinking:
            message["thinking"] = answer.thinking
        return {"model": call.model, "created_at": _go_time(), "message": message, "done": True,
                "done_reason": answer.done_reason, **self._durations(answer)}

    @staticmethod
    def _usage(answer: _Answer) -> dict[str, int]:
        return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                "total_tokens": answer.prompt_tokens + answer.completion_tokens}

    @staticmethod
    def _pieces(text: str) -> list[str]:
        # Word-sized pieces that concatenate back to the exact text, like token deltas.
        return re.findall(r"\s*\S+|\s+$", text)

    def _stream_answer(self, call: _ChatCall, answer: _Answer, ticket: _Ticket) -> None:
        if call.api == "openai":
            self._stream_openai(call, answer, ticket)
            return
        self._start_stream("application/x-ndjson")

        def line(obj: dict[str, Any]) -> None:
            self._write_chunk(json.dumps(obj).encode("utf-8") + b"\n")

        for piece in self._pieces(answer.thinking):
            line({"model": call.model, "created_at": _go_time(),
                  "message": {"role": "assistant", "content": "", "thinking": piece}, "done": False})
        for piece in self._pieces(answer.content):
            line({"model": call.model, "created_at": _go_time(),
                  "message": {"role": "assistant", "content": piece}, "done": False})
        final = self._final_body(call, answer)
        final["message"] = {"role": "assistant", "content": ""}
        self.server.fake._answered(ticket)
        line(final)
        self._end_stream()

    def _stream_openai(self, call: _ChatCall, answer: _Answer, ticket: _Ticket) -> None:
        self._start_stream("text/event-stream")
        ident = f"chatcmpl-{_digest_int(time.time_ns(), id(answer)) % 1000}"

        def event(delta: dict[str, Any] | None, finish: str | None,
                  usage: dict[str, int] | None = None) -> None:
            obj: dict[str, Any] = {"id": ident, "object": "chat.completion.chunk",
                                   "created": int(time.time()), "model": call.model,
                                   "system_fingerprint": "fp_ollama", "choices": []}
            if delta is not None:
                obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
            if usage is not None:
                obj["usage"] = usage
            self._write_chunk(b"data: " + json.dumps(obj).encode("utf-8") + b"\n\n")

        for piece in self._pieces(answer.thinking):
            event({"role": "assistant", "content": "", "reasoning": piece}, None)
        for piece in self._pieces(answer.content):
            event({"role": "assistant", "content": piece}, None)
        self.server.fake._answered(ticket)
        event({"role": "assistant", "content": ""}, answer.done_reason)
        if call.include_usage:
            event(None, None, self._usage(answer))
        self._write_chunk(b"data: [DONE]\n\n")
        self._end_stream()


# --------------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------------


def _non_negative_count(n: object, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"FakeOllamaServer.{what}: n must be an integer >= 0, got {n!r}")
    return n


class FakeOllamaServer:
    """A real HTTP server on 127.0.0.1 that behaves like Ollama, with scriptable faults and stats.

    Use it as a context manager (``with FakeOllamaServer() as server: ...``) or call :meth:`start` and
    :meth:`stop`. ``mode``, ``latency``, ``capacity`` and ``reply`` may be changed while it runs.
    """

    def __init__(self, *, models: Iterable[str] = ("fake-model:latest",), mode: str = "stable",
                 latency: float = 0.0, capacity: int | None = None, think_capable: bool = False,
                 leak_thinking: bool = False, version: str = "0.12.6", reply: ReplyFn | None = None) -> None:
        given = (models,) if isinstance(models, str) else tuple(models)
        names = [_normalize(m) for m in given if isinstance(m, str)]
        if not names or len(names) != len(given) or not all(n.split(":")[0] for n in names):
            raise ValueError(f"FakeOllamaServer models must be non-empty model names, got {list(given)!r}")
        if reply is not None and not callable(reply):
            raise ValueError(f"FakeOllamaServer reply must be a callable (prompt, options) -> str, "
                             f"got {reply!r}")
        self._metas = {n: _ModelMeta.of(n) for n in dict.fromkeys(names)}
        self._cond = threading.Condition()
        self._mode = "stable"
        self._latency = 0.0
        self._trickle = 0.0
        self._capacity: int | None = None
        self.mode = mode
        self.latency = latency
        self.capacity = capacity
        self.think_capable = bool(think_capable)
        self.leak_thinking = bool(leak_thinking)
        self.version = version
        self.reply = reply
        self._faults: deque[_Fault] = deque()
        self._loaded: dict[str, float] = {}
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._errors: list[str] = []
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._active = 0
        self._reset_counters()

    # ---- settings -------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """Reply model: one of :data:`MODES` (``stable``, ``borderline``, ``fragile``, ``history-blind``,
        ``gullible``, ``robust``)."""
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"FakeOllamaServer mode must be one of {', '.join(MODES)}, got {value!r}")
        self._mode = value

    @property
    def latency(self) -> float:
        """Seconds each chat request spends being processed (while holding a capacity slot)."""
        return self._latency

    @latency.setter
    def latency(self, value: float) -> None:
        self._latency = _seconds(value, "latency")

    @property
    def trickle(self) -> float:
        """Seconds between 16-byte pieces of a (non-streamed) chat reply: a server that is slow as a whole
        while each read is quick. 0 (default): the reply is sent at once."""
        return self._trickle

    @trickle.setter
    def trickle(self, value: float) -> None:
        self._trickle = _seconds(value, "trickle")

    @property
    def capacity(self) -> int | None:
        """How many chat requests are processed at once (``None``: unlimited); the rest wait."""
        return self._capacity

    @capacity.setter
    def capacity(self, value: int | None) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"FakeOllamaServer capacity must be None or an integer >= 1, got {value!r}")
        with self._cond:
            self._capacity = value
            self._cond.notify_all()

    @property
    def models(self) -> tuple[str, ...]:
        """The served model names (normalised to ``name:tag``)."""
        return tuple(self._metas)

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> FakeOllamaServer:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread; returns ``self``."""
        if self._httpd is not None:
            raise RuntimeError("FakeOllamaServer is already running")
        self._stopping = threading.Event()
        httpd = _HTTPServer(self)
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                  name=f"fake-ollama-{httpd.server_address[1]}", daemon=True)
        self._httpd, self._thread = httpd, thread
        thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving, release hung and queued requests, close connections; waits at most ``timeout``."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        deadline = time.monotonic() + timeout
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        httpd.shutdown()
        httpd.server_close()
        with self._cond:
            connections = dict(self._connections)
        for conn in connections:
            # Unblocks handler threads waiting on idle keep-alive connections.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for worker in [thread, *connections.values()]:
            worker.join(max(deadline - time.monotonic(), 0.0))
        self._httpd = self._thread = None

    def __enter__(self) -> FakeOllamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._httpd is not None

    @property
    def port(self) -> int:
        """The port the server listens on (only while running)."""
        if self._httpd is None:
            raise RuntimeError("FakeOllamaServer is not running: call start() or use it as a context manager")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` — the Ollama host; the OpenAI-compatible base URL is ``url + "/v1"``."""
        return f"http://127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        where = self.url if self.running else "stopped"
        return f"FakeOllamaServer({where}, mode={self.mode!r}, models={list(self._metas)!r})"

    # ---- fault scripting ------------------------------------------------------------------------
    def fail_next(self, n: int = 1, status: int = 503) -> None:
        """The next ``n`` chat requests get HTTP ``status`` (503 "server busy" or 500 runner crash)."""
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(
                f"FakeOllamaServer.fail_next: status must be an HTTP error code 400-599, got {status!r}")
        self._queue(_Fault("fail", status=status), _non_negative_count(n, "fail_next"))

    def hang_next(self, n: int = 1, seconds: float = DEFAULT_HANG_SECONDS) -> None:
        """The next ``n`` chat requests get no answer for ``seconds``, then their connection is closed."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"FakeOllamaServer.hang_next: seconds must be >= 0, got {seconds!r}")
        self._queue(_Fault("hang", seconds=float(seconds)), _non_negative_count(n, "hang_next"))

    def drop_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests have their connection closed without any response."""
        self._queue(_Fault("drop"), _non_negative_count(n, "drop_next"))

    def empty_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests are answered normally but with empty content."""
        self._queue(_Fault("empty"), _non_negative_count(n, "empty_next"))

    def refuse_next(self, n: int = 1) -> None:
        """The next ``n`` chat requests are answered with :data:`REFUSAL_TEXT`."""
        self._queue(_Fault("refuse"), _non_negative_count(n, "refuse_next"))

    def script(self, faults: Iterable[str]) -> None:
        """Queue faults by name, one per coming chat request, in order.

        Names: ``ok`` (normal answer), ``fail`` (503), ``fail500`` (500), ``hang`` (default seconds),
        ``drop``, ``empty``, ``refuse``. All fault methods append to the same queue.
        """
        if isinstance(faults, str):
            raise ValueError("FakeOllamaServer.script takes a list of fault names, not a single string")
        queued = []
        for i, name in enumerate(faults):
            if name not in FAULTS:
                raise ValueError(f"FakeOllamaServer.script: item {i} is {name!r}; "
                                 f"valid fault names: {', '.join(FAULTS)}")
            queued.append(_Fault(name, status=500 if name == "fail500" else 503))
        with self._cond:
            self._faults.extend(queued)

    def clear_faults(self) -> None:
        """Forget every scripted fault that has not been used yet."""
        with self._cond:
            self._faults.clear()

    @property
    def pending_faults(self) -> list[str]:
        """Names of the scripted faults not used yet, in order."""
        with self._cond:
            return [f.kind for f in self._faults]

    def _queue(self, fault: _Fault, n: int) -> None:
        with self._cond:
            self._faults.extend([fault] * n)

    # ---- stats ----------------------------------------------------------------------------------
    def _reset_counters(self) -> None:
        self._calls: Counter[str] = Counter()
        self._chat_calls = 0
        self._requests: list[dict[str, Any]] = []
        self._in_flight = 0
        self._peak = 0
        self._peak_processing = 0
        self._connections_opened = 0

    def reset_stats(self) -> None:
        """Zero the counters and forget recorded requests (requests in flight stay counted)."""
        with self._cond:
            in_flight = self._in_flight
            self._reset_counters()
            self._in_flight = self._peak = in_flight
            self._peak_processing = self._active

    @property
    def calls(self) -> Counter[str]:
        """Requests received, by path (a copy)."""
        with self._cond:
            return Counter(self._calls)

    @property
    def chat_calls(self) -> int:
        """Chat requests received on ``/api/chat`` and ``/v1/chat/completions``."""
        with self._cond:
            return self._chat_calls

    @property
    def in_flight(self) -> int:
        """Chat requests received but not answered yet (queued for a slot or being processed)."""
        with self._cond:
            return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """The largest :attr:`in_flight` seen since start or :meth:`reset_stats`."""
        with self._cond:
            return self._peak

    @property
    def peak_processing(self) -> int:
        """The most chat requests processed at once (holding a capacity slot); never above ``capacity``."""
        with self._cond:
            return self._peak_processing

    @property
    def connections_opened(self) -> int:
        """TCP connections accepted; a client that keeps connections alive opens few."""
        with self._cond:
            return self._connections_opened

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat request received: path, model, think, options, prompt, stream, messages, fault."""
        with self._cond:
            return [dict(r) for r in self._requests]

    @property
    def errors(self) -> list[str]:
        """Unexpected errors inside the server (tracebacks), e.g. a failing ``reply`` callable."""
        with self._cond:
            return list(self._errors)

    # ---- used by the handler --------------------------------------------------------------------
    def _count_call(self, path: str) -> None:
        with self._cond:
            self._calls[path] += 1

    def _record_error(self, text: str) -> None:
        with self._cond:
            self._errors.append(text)

    def _register_connection(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections[conn] = threading.current_thread()
            self._connections_opened += 1

    def _unregister_connection(self, conn: socket.socket) -> None:
        with self._cond:
            self._connections.pop(conn, None)

    def _model_metas(self) -> list[_ModelMeta]:
        return list(self._metas.values())

    def _find_model(self, name: str) -> _ModelMeta | None:
        return self._metas.get(_normalize(name)) if name.strip() else None

    def _load(self, name: str) -> int:
        """Mark a model loaded (for /api/ps); the first use reports a longer load_duration."""
        with self._cond:
            first = name not in self._loaded
            self._loaded[name] = time.time()
        return 250_000_000 if first else 150_000

    def _loaded_entries(self) -> list[dict[str, Any]]:
        with self._cond:
            loaded = dict(self._loaded)
        out = []
        for name, used in loaded.items():
            meta = self._metas[name]
            entry = meta.tag_entry()
            del entry["modified_at"]
            # Ollama keeps a model loaded for 5 minutes after its last use.
            entry.update(expires_at=_go_time(int((used + 300) * 1e9)), size_vram=meta.size,
                         context_length=4096)
            out.append(entry)
        return out

    def _begin_chat(self, path: str, body: dict[str, Any], api: str) -> _Ticket:
        options = body.get("options") if api == "ollama" else {
            native: body[key] for key, native in _OPENAI_OPTIONS.items() if body.get(key) is not None}
        messages = body.get("messages")
        prompt = ""
        if isinstance(messages, list):
            users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
            prompt = users[-1] if users and isinstance(users[-1], str) else ""
        think = body.get("think") if api == "ollama" else body.get("reasoning_effort")
        with self._cond:
            fault = self._faults.popleft() if self._faults else None
            fault = None if fault is not None and fault.kind == "ok" else fault
            self._chat_calls += 1
            self._in_flight += 1
            self._peak = max(self._peak, self._in_flight)
            self._requests.append({
                "path": path, "model": body.get("model"), "think": think,
                "options": dict(options) if isinstance(options, dict) else options, "prompt": prompt,
                "stream": body.get("stream"), "messages": messages, "fault": fault.kind if fault else None,
            })
        return _Ticket(fault)

    def _answered(self, ticket: _Ticket) -> None:
        with self._cond:
            if not ticket.answered:
                ticket.answered = True
                self._in_flight -= 1

    def _acquire_slot(self) -> bool:
        with self._cond:
            while not self._stopping.is_set():
                if self._capacity is None or self._active < self._capacity:
                    self._active += 1
                    self._peak_processing = max(self._peak_processing, self._active)
                    return True
                self._cond.wait(0.1)
            return False

    def _release_slot(self) -> None:
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def _reply_for(self, call: _ChatCall, fault: _Fault | None) -> tuple[str, str]:
        """(content, thinking) for a chat request, after faults, custom reply and thinking rules."""
        prompt = call.prompt
        if fault is not None and fault.kind == "empty":
            content = ""
        elif fault is not None and fault.kind == "refuse":
            content = REFUSAL_TEXT
        elif self.reply is not None:
            content = self._custom_reply(prompt, call.options)
        else:
            content = compose_reply(prompt, call.options, mode=self.mode)
        thinks = self.think_capable and call.think is not False
        thinking = _thinking_text(prompt) if thinks or self.leak_thinking else ""
        if self.leak_thinking:
            content = f"<think>\n{thinking}\n</think>\n\n{content}"
        return content, thinking if thinks else ""

    def _custom_reply(self, prompt: str, options: dict[str, Any]) -> str:
        assert self.reply is not None
        try:
            text = self.reply(prompt, dict(options))
        except Exception as exc:
            self._record_error("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            raise _HttpError(500, f"reply callable failed: {exc!r}") from None
        if not isinstance(text, str):
            self._record_error(f"reply callable returned {type(text).__name__}, not str")
            raise _HttpError(500, f"reply callable returned {type(text).__name__}, not str")
        return text


@contextlib.contextmanager
def fake_ollama_server(**kwargs: Any) -> Iterator[FakeOllamaServer]:
    """A started :class:`FakeOllamaServer` (keyword arguments as its constructor), stopped on exit."""
    with FakeOllamaServer(**kwargs) as server:
        yield server
