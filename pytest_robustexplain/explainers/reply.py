"""Turning a raw model reply into an :class:`Explanation`: strip reasoning blocks, detect refusals.

Shared by every backend so that "empty" and "refusal" mean the same thing whichever server produced
the text. A failed generation never becomes text: it is an Explanation with ``failure`` set.
"""

from __future__ import annotations

import bisect
import math
import re
from typing import Any

from ..errors import RobustExplainWarning, warn
from ..sanitize import visible
from ..wording import count_noun
from .base import ANSWERED_AS, FAILURE_EMPTY, FAILURE_REFUSAL, Explanation, ModelInfo

# The most bytes a server's reply may take: an explanation is a few kilobytes (num_predict tokens, a JSON
# envelope), so a reply beyond this is no explanation, and reading it whole would cost memory and time that
# grow with whatever the server sends (a 20 MB reply took 2.7 GB and two minutes before). It is refused
# unread: the call fails ("error") with this said.
MAX_REPLY_BYTES = 8 * 1024 * 1024


class ReplyTooLarge(ValueError):
    """A reply longer than :data:`MAX_REPLY_BYTES` (not retried: the server would send it again)."""

    def __init__(self, size: int | None = None) -> None:
        said = f" ({size:,} bytes announced)" if size is not None else ""
        limit = MAX_REPLY_BYTES // (1024 * 1024)
        super().__init__(f"the server's reply is longer than {limit} MiB{said}: no explanation is that "
                         "long, so it was refused unread")


class MalformedReply(ValueError):
    """A reply that is not what the protocol promises (no HTTP status line, a chat reply that is no JSON
    object): one sentence saying what was wrong, instead of the parser's own exception text."""


def _json_kind(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "list", dict: "object",
            type(None): "null"}.get(type(value), type(value).__name__)


def reply_text(value: Any) -> str | None:
    """A reply's content as the protocols promise it: text, nothing, or a list of text parts (OpenAI's
    content parts, or plain strings) joined as they come; anything else is a MalformedReply saying what came
    (a number, an object…) — never a TypeError deep in the reading of it."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise MalformedReply(f"the reply's content is a JSON {_json_kind(value)}, not text")
    parts = []
    for item in value:
        text = item.get("text") if isinstance(item, dict) and item.get("type", "text") == "text" else item
        if not isinstance(text, str):
            raise MalformedReply(f"the reply's content is a list holding a JSON {_json_kind(item)}, not text "
                                 "parts")
        parts.append(text)
    return "".join(parts)


def token_count(value: Any) -> int | None:
    """A token count as a server reports it, when it is one: a finite, non-negative whole number (``12`` or
    ``12.0``); None for anything else — absent, negative, fractional, infinite, a string, a boolean."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


_THINK_TAG = re.compile(r"<(/?)(think|thinking)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"^\s*<(think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking)>", re.IGNORECASE)

# Refusals are recognised only at the very start of a reply, and only in short replies: a genuine
# refusal is a sentence or two, while an explanation that merely opens with "As an AI, I don't have
# preferences, but ..." and then explains is a (poor) answer, not a refusal.
REFUSAL_MAX_WORDS = 80
REFUSAL_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        # "I'm sorry, but I can't ...", "I am afraid I cannot ..."
        r"^\W*(i'?m|i am)\s+(sorry|afraid)\b[^.!?]{0,60}?\b(can'?t|cannot|can not|unable|not able|won'?t)\b",
        # "I cannot help with ...", "I can't assist with that", "I won't provide ..."
        r"^\W*i\s+(can'?t|cannot|can not|won'?t|will not|am unable to|'m unable to|am not able to)\s+"
        r"(help|assist|provide|comply|fulfil|fulfill|do that|answer|explain|generate|create)\b",
        # "As an AI (language model), I cannot / don't have access / am unable ..."
        r"^\W*as an ai\b[^.!?]{0,60}?\b(can'?t|cannot|unable|not able|don'?t|do not)\b",
        # "Unfortunately, I can't ..."
        r"^\W*unfortunately,?\s+i\s+(can'?t|cannot|am unable|'m unable|am not able)\b",
    )
)


def strip_think(text: str) -> str:
    """Remove ``<think>…</think>`` blocks; an unterminated leading ``<think>`` leaves nothing.

    An unterminated block means the token budget ran out while the model was still reasoning, so no
    answer was produced at all. A lone ``</think>`` (chat templates that open the block inside the
    prompt) drops everything before it.
    """
    text = _without_blocks(text)
    if _THINK_OPEN.match(text):
        return ""
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    return text.strip()


def _without_blocks(text: str) -> str:
    r"""``text`` without its ``<think>…</think>`` / ``<thinking>…</thinking>`` blocks: each opening tag to the
    first closing tag of its name after it, left to right — what ``<(think|thinking)>.*?</\1>`` removes, in
    linear time. (That regex scans to the end of the reply from every unclosed opening tag: a reply of
    15,000 ``<think>`` took seconds, a long one hours.)"""
    tags = [(m.start(), m.end(), bool(m.group(1)), m.group(2).lower()) for m in _THINK_TAG.finditer(text)]
    if not tags:
        return text
    closes: dict[str, list[tuple[int, int]]] = {}
    for start, end, closing, name in tags:
        if closing:
            closes.setdefault(name, []).append((start, end))
    kept, pos = [], 0
    for start, end, closing, name in tags:
        if closing or start < pos:
            continue
        mine = closes.get(name, [])
        i = bisect.bisect_left(mine, (end, -1))
        if i < len(mine):  # an unclosed opening tag removes nothing (the caller looks at a leading one)
            kept.append(text[pos:start])
            pos = mine[i][1]
    kept.append(text[pos:])
    return "".join(kept)


def refusal_reason(text: str) -> str | None:
    """The matched refusal phrase when ``text`` is a refusal, else None."""
    if len(text.split()) > REFUSAL_MAX_WORDS:
        return None
    for pattern in REFUSAL_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(0).strip()
    return None


THOUGHT_ONLY = "the model answered only in its reasoning (thinking), with no content"


def finish_reply(
    raw: str | None,
    *,
    model: str,
    latency_s: float,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    stop_reason: str | None = None,
    thought: bool = False,
    reused_tokens: int | None = None,
) -> Explanation:
    """Classify a reply: stripped text, or an "empty" / "refusal" failure carrying what was seen
    (``thought``: the reply carried reasoning beside its content)."""
    text = strip_think(raw or "")
    failure: str | None = None
    detail = ""
    if not text:
        failure = FAILURE_EMPTY
        detail = (THOUGHT_ONLY if thought else "the reply was empty" if not (raw or "").strip()
                  else "the reply held only a <think> block")
    elif refusal_reason(text) is not None:
        # The refused text goes into detail, never into text: a refusal must not be scored as prose.
        failure, detail, text = FAILURE_REFUSAL, text[:300], ""
    return Explanation(text=text, model=model, latency_s=latency_s, prompt_tokens=prompt_tokens,
                       completion_tokens=completion_tokens, reused_tokens=reused_tokens, failure=failure,
                       detail=detail,
                       stop_reason=stop_reason if isinstance(stop_reason, str) else None)


# A provider's dated snapshot of the model asked ("gpt-4o" answers as "gpt-4o-2024-08-06", "gpt-4" as
# "gpt-4-0613", "claude-3-5-sonnet" as "claude-3-5-sonnet-20241022"): the same model, named precisely.
_SNAPSHOT = re.compile(r"\d{4}(?:-?\d{2}-?\d{2})?")


def model_key(name: str) -> str:
    """A model name as servers vary it without naming another model (case, Ollama's ``:latest``)."""
    return name.strip().lower().removesuffix(":latest")


def names_the_model(named: str, asked: Any) -> bool:
    """Whether a reply naming ``named`` answered as one of the names ``asked`` (the name sent, the one the
    server resolved it to, the one its model list serves — llama.cpp answers with the alias it loaded
    whatever is asked, so the listed one is the name there) or as a dated snapshot of one."""
    key = model_key(named)
    for name in asked:
        if not isinstance(name, str) or not name.strip():
            continue
        known = model_key(name)
        if key == known or (key.startswith(known + "-") and _SNAPSHOT.fullmatch(key[len(known) + 1:])):
            return True
    return False


# The distinct model names a run's replies may record (a server naming a new model on every reply is said
# after the second; the record stays small).
MAX_NAMES_KEPT = 8


class AnsweredAs:
    """The models an explainer's replies named, against the one asked: a gateway that falls back to another
    model, or a provider that moves its alias mid-run, answers with results that belong to another model.
    Recorded with the model when a name is not the one asked or there are two (``answered_as``: each name,
    shown as it came, made visible, and its replies) and said once for each kind of finding."""

    def __init__(self, model: str, host: str) -> None:
        self.model, self.host = model, host
        self.counts: dict[str, int] = {}
        self._said: set[str] = set()

    def heard(self, named: Any, info: ModelInfo | None) -> None:
        """One reply named ``named``; ``info``: the model's record (the names it resolved and serves)."""
        if not isinstance(named, str) or not named.strip():
            return
        shown = visible(named.strip())[:80]
        if shown in self.counts or len(self.counts) < MAX_NAMES_KEPT:
            self.counts[shown] = self.counts.get(shown, 0) + 1
        asked = (self.model, info.name if info else None, info.extra.get("served_as") if info else None)
        other = not names_the_model(named, asked)
        # Recorded once there is something to say (the counts are the process's calls: a run whose replies
        # all name the model asked records nothing, as before).
        if info is not None and (other or len(self.counts) > 1 or ANSWERED_AS in info.extra):
            info.extra[ANSWERED_AS] = dict(self.counts)
        if other and "other" not in self._said:
            self._said.add("other")
            warn(RobustExplainWarning(
                f"{self.model} on {self.host}: a reply names the model {shown!r}, which is not the model "
                "asked for: a gateway or proxy may be answering with another model, and the results belong "
                "to the model that answered (the report records the names replies gave as answered_as; said "
                "once)"))
        if len({model_key(n) for n in self.counts}) > 1 and "two" not in self._said:
            self._said.add("two")
            names = ", ".join(f"{n!r} ({count_noun(count, 'reply', 'replies')})"
                              for n, count in self.counts.items())
            warn(RobustExplainWarning(
                f"{self.model} on {self.host}: replies named more than one model during the run ({names}), "
                "so the explanations may come from different models and the verdicts mix them; rerun to "
                "measure one (said once)"))
