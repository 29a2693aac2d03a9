"""The reply model of the fake Ollama server: deterministic replies from the prompt and options.

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
    the guard (``checks/controls``) must call it INSENSITIVE.
``mode="rating-blind"`` / ``mode="rating-aware"``
    For the opt-in ``preference_flip`` kind and preference polarity: ``rating-blind`` is the stable reply
    without its one rating-dependent sentence (the best-rated title), so inverting ratings never changes
    it; ``rating-aware`` builds the stable reply from what the user rated above the scale's midpoint and
    says the categories they rated below it on average as dislikes ("You rated Toys items poorly, so this
    pick steers away from them"), so a flipped category stops being cited as liked.
``mode="copycat"``
    The prompt's history lines and item line repeated back with a one-line preamble, as Gemma 3 270M
    answered every MovieLens prompt: very stable (ρ near 1 under the order-keeping kinds), "mentions" the
    whole history, explains nothing. The copy check (``checks/copying.py``) must fail it.

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
block regardless, to test that clients strip it. ``thinks_only=True`` is a model that reasons whatever
it is told and spends its token limit before answering: every reply has ``thinking`` and no content.
Token counts are word counts; durations are in nanoseconds, ``total_duration`` being the measured
processing time.

A ``reply`` callable ``(prompt, options) -> str`` replaces the built-in reply model (faults still
apply); if it raises or returns a non-string the request gets HTTP 500 and the error is listed in
:attr:`FakeOllamaServer.errors`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..data import rating_scale
from .prompts import HistoryEntry, ParsedPrompt, parse_prompt

MODES: tuple[str, ...] = ("stable", "borderline", "fragile", "history-blind", "gullible", "robust",
                          "copycat", "rating-blind", "rating-aware")
REFUSAL_TEXT = "I'm sorry, but I can't help with that request."
DEFAULT_TEMPERATURE = 0.8  # Ollama's default when the request sets no temperature




def digest_int(*parts: object) -> int:
    # sha256 rather than hash(): str hashes are salted per process and replies must be reproducible.
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def _rng(*parts: object) -> random.Random:
    return random.Random(digest_int(*parts))


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


def _stable_history_sentences(p: ParsedPrompt, *, ratings: bool = True) -> list[str]:
    """The mildly history-dependent middle: share of the dominant category, favourite (the best-rated
    title; not without ``ratings``), most recent."""
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
    favourite = _favourite(p.history, dominant) if ratings else None
    if favourite:
        out.append(f"You rated {favourite} highly, and this item offers a similar, dependable experience.")
    elif ratings:
        out.append("It offers a dependable experience similar to the items you engaged with most.")
    recent = next((e.title for e in reversed(p.history) if e.title), None)
    if recent and recent != favourite:
        out.append(f"Your most recent choice, {recent}, points in the same direction.")
    return out


_CLOSING = "Overall, it connects your demonstrated preferences with what the item offers."


def _stable_reply(p: ParsedPrompt, *, ratings: bool = True) -> str:
    sentences = [*_stable_opening(p), *_stable_history_sentences(p, ratings=ratings), _CLOSING]
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


def _rating_blind_reply(p: ParsedPrompt) -> str:
    """The stable reply without its one rating-dependent sentence: ratings never change it."""
    return _stable_reply(p, ratings=False)


def _rating_aware_reply(p: ParsedPrompt) -> str:
    """The stable reply built from what the user rated above the scale's midpoint, and the categories
    they rated poorly (two or more ratings, below the midpoint on average) said as dislikes."""
    lo, hi = rating_scale(e.rating for e in p.history if e.rating is not None)
    middle = (lo + hi) / 2
    liked = tuple(e for e in p.history if e.rating is not None and e.rating > middle)
    by_category: dict[str, list[float]] = {}
    for e in p.history:
        if e.category and e.rating is not None:
            by_category.setdefault(e.category, []).append(e.rating)
    disliked = sorted(c for c, rs in by_category.items() if len(rs) >= 2 and sum(rs) / len(rs) < middle)
    text = _stable_reply(replace(p, history=liked or p.history))
    item_category = dict(p.feature_pairs()).get("category")
    if item_category in disliked:
        text = text.replace(f"its {item_category} character fits the same pattern",
                            f"although its {item_category} character is unlike what you rated highly")
    if disliked:
        text += f" You rated {', '.join(disliked)} items poorly, so this pick steers away from them."
    return text


def _copycat_reply(p: ParsedPrompt) -> str:
    """The history block and the item line repeated back (a small model's answer to a long prompt)."""
    return (f"Here is the user's interaction history:\n{p.history_block}\nThe item {_quoted(p.item)} with "
            f"features {p.features} is recommended.")


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
    obeyed = [c for c in _planted_canaries(prompt) if digest_int("obey", c.upper()) % 2 == 0]
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
                "history-blind": _blind_reply, "robust": _robust_reply, "copycat": _copycat_reply,
                "rating-blind": _rating_blind_reply, "rating-aware": _rating_aware_reply}
    text = _gullible_reply(parsed, prompt) if mode == "gullible" else builders[mode](parsed)
    opts = options or {}
    temperature = _number(opts, "temperature", DEFAULT_TEMPERATURE)
    if temperature > 0:
        text = _vary_wording(text, seed=int(_number(opts, "seed", 0)), temperature=temperature, prompt=prompt)
    return text


def thinking_text(prompt: str) -> str:
    parsed = parse_prompt(prompt)
    dominant, _ = _dominant(parsed.history)
    return (f"The user mostly engages with {dominant or 'many kinds of'} items. I should connect that "
            f"history to {_quoted(parsed.item)} and its features, then explain the fit briefly.")
