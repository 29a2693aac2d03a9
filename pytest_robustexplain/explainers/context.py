"""Does the prompt fit the model's context? What the server says, and what its token counts give away.

Servers treat a prompt longer than the context differently: llama.cpp and vLLM refuse it (HTTP 400 with
the token counts), Ollama **keeps going silently** — it drops the start of the prompt (here: the start of
the history) and answers from the rest, reporting ``prompt_eval_count`` at or below ``num_ctx`` (about
``num_ctx`` on current releases, about half of it on older ones: ollama/ollama #3839, #17427). A
perturbation that lengthens the history (noise, dilution) would then be measured against a model that never
saw it. So:

- the context is read where the server says it (:class:`ContextWindow`: Ollama's ``num_ctx`` sent with every
  request, capped by the model's trained ``context_length`` from ``/api/show``; llama.cpp's
  ``/v1/models`` ``meta.n_ctx``; vLLM's ``max_model_len``);
- a refusal becomes :class:`ContextOverflow` with the server's numbers (the call's explanation is failure
  ``"context"``, never a run-stopping error: other users' prompts may fit);
- :class:`PromptSizer` learns the characters per token from the warm-up (sent after the start of the first
  real prompt) and from replies whose prompts surely fitted, and flags a
  reply as **truncated** when its prompt may not have fitted (the estimate is at least 90 % of the context)
  and the server read far fewer tokens than the prompt has (under 75 % of the estimate), or the whole
  context of a prompt estimated longer than it.
- A server may also truncate at a context it never states (a gateway that drops ``num_ctx``, an
  OpenAI-compatible endpoint that ignores it): the sizer then **infers** the context from the counts — they
  stop growing with the prompt (four prompts whose lengths differ by half again all read as the same
  largest count, and so do three quarters of the prompts at least as long), or, where a reply says how
  many of its tokens came from a cache (so its count is the whole prompt's), one prompt read at more
  characters a token than any tokenizer gives — and from then on checks every reply against it. (A prompt
  made mostly of one repeated character, which tokenizers pack many to a token, could pass for the second;
  no template's prompt is.)
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

# Characters per token before any reply taught better: English prose runs ~4 under BPE tokenisers; ids,
# dates and titles run lower (a MovieLens prompt ~3.5 on SmolLM2). Erring high, the estimate errs low, so
# a prompt is flagged on evidence rather than on a pessimistic guess.
CHARS_PER_TOKEN_PRIOR = 4.0
# Before any call the tokenizer is unknown: the warning of prompts that may not fit counts this many
# characters a token (ids, numbers and names run 3–3.5), so that it errs towards saying so.
CAUTIOUS_CHARS_PER_TOKEN = 3.0
# A prompt is checked only when its estimate reaches this share of the context (below it, a low count is a
# prompt cache at work, not a truncation), and flagged when the server read under TRUNCATED_SHARE of it.
CHECKED_SHARE = 0.9
TRUNCATED_SHARE = 0.75
# A reply whose prompt count is under this share of the context cannot have been truncated (truncation keeps
# at least half the context): its characters per token teach the sizer.
LEARNING_SHARE = 0.45
# Ollama keeps every token up to the context when it truncates (current releases): a count this close to
# num_ctx is a full context, and a prompt that fills it leaves no room for the reply.
FULL_SHARE = 0.98
# What tokenizers give on a prompt's text: English prose runs 4–5 characters a token under the largest
# vocabularies, ids and dates fewer, byte-level fallback on CJK down to a third. A count beyond this range
# was not a count of the whole prompt — a prompt cache (Ollama before 0.30 counts only what it evaluated)
# or a truncation — and teaches nothing.
MIN_CHARS_PER_TOKEN, MAX_CHARS_PER_TOKEN = 0.25, 8.0
# Counts that stop growing: this many prompts read as the largest count (within CEILING_TOLERANCE of it)
# whose lengths differ by CEILING_SPREAD or more. One template's prompts vary a few tens of percent in
# characters a token; half again is a truncation. Simulated (benchmarks/bench_truncation_inference.py,
# docs/method.md): with three, a prompt cache's partial counts coincided so in up to 4 % of runs; with four
# and the share below, in at most 1 of 2,000 runs a cell — and then the gates are not measured, saying why.
CEILING_REPLIES = 4
CEILING_TOLERANCE = 0.02
CEILING_SPREAD = 1.5
# ... and at least this share of the prompts as long as the shortest of them read there too.
CEILING_SHARE = 0.75
# The counts the sizer keeps to find the ceiling (the recent ones: a long run keeps no unbounded list).
KEPT_COUNTS = 256


@dataclass(frozen=True)
class ContextWindow:
    """The tokens a prompt (and its reply) may take, and where that number comes from."""

    tokens: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "source": self.source}


class ContextOverflow(Exception):
    """The server refused a prompt longer than its context; ``detail`` says it with the server's numbers."""

    def __init__(self, detail: str, *, prompt_tokens: int | None = None, limit: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.prompt_tokens = prompt_tokens
        self.limit = limit


def overflow_sentence(prompt_tokens: int | None, limit: int | None, *, estimated: bool = False,
                      read: int | None = None) -> str:
    """"prompt of 2,031 tokens exceeds the context of 512 tokens" (with what was read, when truncated)."""
    size = f"{'≈ ' if estimated else ''}{prompt_tokens:,} tokens" if prompt_tokens else "unknown size"
    where = f"the context of {limit:,} tokens" if limit else "the model's context"
    tail = f"; the server read {read:,} tokens of it (the start of the prompt was dropped)" if read else ""
    return f"prompt of {size} exceeds {where}{tail}"


_LLAMA_CPP = re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)")
_VLLM = re.compile(r"maximum context length is (\d+) tokens.*?(?:requested|resulted in|you requested) "
                   r"(\d+) tokens", re.DOTALL)


def overflow_of(status: int | None, body: str) -> ContextOverflow | None:
    """The refusal a 400 reply carries when the prompt was longer than the context (llama.cpp's
    ``exceed_context_size_error``, vLLM's "maximum context length", OpenAI's ``context_length_exceeded``),
    else None."""
    if status not in (400, 413, 422):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        n_prompt, n_ctx = error.get("n_prompt_tokens"), error.get("n_ctx")
        if error.get("type") == "exceed_context_size_error" or (
                isinstance(n_prompt, int) and isinstance(n_ctx, int)):
            tokens = n_prompt if isinstance(n_prompt, int) else None
            limit = n_ctx if isinstance(n_ctx, int) else None
            return ContextOverflow(overflow_sentence(tokens, limit), prompt_tokens=tokens, limit=limit)
        if error.get("code") == "context_length_exceeded":
            return ContextOverflow(overflow_sentence(None, None))
    text = body if isinstance(body, str) else ""
    found = _LLAMA_CPP.search(text)
    if found:
        tokens, limit = int(found.group(1)), int(found.group(2))
        return ContextOverflow(overflow_sentence(tokens, limit), prompt_tokens=tokens, limit=limit)
    found = _VLLM.search(text)
    if found:
        limit, tokens = int(found.group(1)), int(found.group(2))
        return ContextOverflow(overflow_sentence(tokens, limit), prompt_tokens=tokens, limit=limit)
    return None


def window_from_openai_entry(entry: dict[str, Any]) -> ContextWindow | None:
    """The context an OpenAI-compatible server's ``/models`` entry states: llama.cpp's ``meta.n_ctx`` (per
    slot), vLLM's ``max_model_len``, LM Studio's and others' ``context_length``."""
    raw = entry.get("meta")
    meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
    for value, source in ((meta.get("n_ctx"), "the server's /models meta.n_ctx (llama.cpp, per slot)"),
                          (entry.get("max_model_len"), "the server's /models max_model_len"),
                          (entry.get("context_length"), "the server's /models context_length"),
                          (entry.get("max_context_length"), "the server's /models max_context_length")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return ContextWindow(value, source)
    return None


def trained_context(model_info: Any) -> int | None:
    """The ``<arch>.context_length`` of an Ollama ``/api/show`` ``model_info`` (None when absent)."""
    if not isinstance(model_info, dict) and not hasattr(model_info, "items"):
        return None
    for key, value in model_info.items():
        if str(key).endswith(".context_length") and isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def window_for_ollama(num_ctx: int, trained: int | None) -> ContextWindow:
    """``num_ctx`` as sent, capped by the model's trained context length when /api/show says it (Ollama
    does not give a model more context than it was trained for)."""
    if trained is not None and 0 < trained < num_ctx:
        return ContextWindow(trained, f"the model's trained context_length ({trained:,}; num_ctx {num_ctx:,} "
                                      "was sent)")
    return ContextWindow(num_ctx, "num_ctx sent with every request")


class PromptSizer:
    """Token estimates for prompts, in characters per token learned from the run's own replies, and the
    context a server truncates at when it states none (:attr:`inferred`).

    ``whole``: the reply says how many of its prompt tokens came from a cache (OpenAI's ``cached_tokens``,
    llama.cpp's ``timings.cache_n``), so its count is the whole prompt's and one count below what any
    tokenizer gives already shows a truncation; a count that says nothing of a cache may have left cached
    tokens out (Ollama before 0.30, on either API; Ollama's native replies are all taken so), so there only
    counts that stop growing do."""

    def __init__(self) -> None:
        self._ratios: list[float] = []
        self._counts: list[tuple[int, int]] = []  # (tokens read, characters sent) of recent replies
        self.inferred: ContextWindow | None = None
        self.evidence = ""  # what showed the inferred context, in words

    @property
    def chars_per_token(self) -> float:
        return statistics.median(self._ratios) if self._ratios else CHARS_PER_TOKEN_PRIOR

    def estimate(self, prompt: str) -> int:
        return math.ceil(len(prompt) / self.chars_per_token)

    def window(self, stated: ContextWindow | None) -> ContextWindow | None:
        """The context replies are checked against: the one the server states, or the smaller one its
        counts show."""
        if self.inferred is not None and (stated is None or self.inferred.tokens < stated.tokens):
            return self.inferred
        return stated

    def calibrate(self, chars: int, reported: int | None, window: ContextWindow | None, *,
                  whole: bool = False) -> None:
        """Learn from a prompt of ``chars`` characters (the warm-up's sample) when the server surely read
        it whole: a count near a small context may be a truncated one."""
        if not reported or reported <= 0 or chars <= 0:
            return
        self._observe(chars, reported, whole)
        window = self.window(window)
        if window is None or reported < LEARNING_SHARE * window.tokens:
            self._learn(chars, reported)

    def _learn(self, chars: int, reported: int) -> None:
        ratio = chars / reported
        if MIN_CHARS_PER_TOKEN <= ratio <= MAX_CHARS_PER_TOKEN:
            self._ratios.append(ratio)
            del self._ratios[:-64]  # the recent ones: a long run (or many users counted) keeps no long list

    def _observe(self, chars: int, reported: int, whole: bool) -> None:
        """Keep the count, and infer the context the first time the counts show one (module docstring)."""
        self._counts.append((reported, chars))
        del self._counts[:-KEPT_COUNTS]
        if self.inferred is not None:
            return
        if whole and chars / reported > MAX_CHARS_PER_TOKEN:
            self._infer(reported, f"a prompt of {chars:,} characters read as {reported:,} tokens, more "
                                  f"characters a token than any tokenizer gives")
            return
        top = max(n for n, _ in self._counts)
        near = [c for n, c in self._counts if n >= (1 - CEILING_TOLERANCE) * top]
        if len(near) < CEILING_REPLIES or max(near) < CEILING_SPREAD * min(near):
            return
        # A truncating server reads nearly every prompt at least that long at the ceiling; a prompt cache
        # that happened to leave three counts there left most such prompts elsewhere.
        longer = sum(c >= min(near) for _, c in self._counts)
        if len(near) >= CEILING_SHARE * longer:
            self._infer(top, f"{len(near)} prompts of {min(near):,} to {max(near):,} characters all read as "
                             f"{top:,} tokens")

    def _infer(self, tokens: int, evidence: str) -> None:
        self.evidence = evidence
        self.inferred = ContextWindow(tokens, f"inferred from the server's token counts ({evidence}); the "
                                              "server states no such context")
        # What the truncated counts taught is forgotten: only counts well inside the context were whole.
        self._ratios = [c / n for n, c in self._counts if n < LEARNING_SHARE * tokens
                        and MIN_CHARS_PER_TOKEN <= c / n <= MAX_CHARS_PER_TOKEN][-64:]

    def truncated(self, prompt: str, reported: int | None, window: ContextWindow | None, *,
                  whole: bool = False) -> bool:
        """Whether the server read less of ``prompt`` than it holds (and learn from it when it surely read
        it all). ``window`` is the stated context (None: not stated); the inferred one, when smaller, is
        used instead. Unknown counts, or no context stated nor inferred: never flagged."""
        if not reported or reported <= 0 or not prompt:
            return False
        self._observe(len(prompt), reported, whole)
        window = self.window(window)
        if window is None:
            return False
        if reported < LEARNING_SHARE * window.tokens:
            self._learn(len(prompt), reported)
            return False
        estimate = self.estimate(prompt)
        if estimate < CHECKED_SHARE * window.tokens:
            return False
        # Far fewer tokens read than the prompt has; or the whole context read of a prompt estimated longer
        # (a prompt that fills the context but fits is not truncated).
        return reported < TRUNCATED_SHARE * estimate or (reported >= FULL_SHARE * window.tokens
                                                          and estimate > window.tokens)

    def cautious_estimate(self, prompt: str) -> int:
        """An estimate that errs high (before the calls: the warning of prompts that may not fit)."""
        return math.ceil(len(prompt) / min(self.chars_per_token, CAUTIOUS_CHARS_PER_TOKEN))
