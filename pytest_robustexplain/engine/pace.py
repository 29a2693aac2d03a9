"""How fast a model answered last time: recorded after a run in the cache directory's database
(:mod:`..store`), read by ``--dry-run`` to say what a planned run will take before any call is made."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..results import PairResult, RunResult, is_number, money, price_for, tokens_cost
from .plan import max_calls

if TYPE_CHECKING:
    from ..store import Store
    from ..sweep import SliceSpec

T = TypeVar("T")
PACE = "pace"  # the store's kind of entry
# Fewer timed calls than this say little about a model's pace (the first call also loads the model).
MIN_CALLS = 3


@dataclass(frozen=True)
class Pace:
    """The median seconds a call took, over how many calls, how many at a time, and when; and the mean
    prompt and completion tokens of a call, when the server counted them (what a call costs)."""

    model: str
    backend: str
    median_s: float
    calls: int
    concurrency: int
    measured_at: str
    prompt_tokens: float | None = None
    completion_tokens: float | None = None

    def call_cost(self, price: tuple[float, float]) -> float | None:
        """What one call cost on average at ``price`` (None: the server did not count tokens)."""
        if self.prompt_tokens is None or self.completion_tokens is None:
            return None
        return tokens_cost(self.prompt_tokens, self.completion_tokens, price)

    def minutes_for(self, calls: int) -> float:
        """Wall minutes for ``calls`` calls, ``concurrency`` at a time, at this pace."""
        return calls * self.median_s / max(1, self.concurrency) / 60

    def estimate(self, calls: int) -> str:
        """The dry run's line for a plan of ``calls`` calls at most."""
        pace = (f"{self.median_s:.1f} s a call, median of {self.calls}, {self.concurrency} at a time, "
                f"{self.measured_at[:10]}")
        return (f"{self.model}: ≈ {self.minutes_for(calls):.0f} min for these {calls:,} calls at the pace "
                f"last measured ({pace}); cache hits are free, max-minutes caps it")


def measured_pace(pairs: Sequence[PairResult], *, model: str, backend: str, concurrency: int,
                  at: str) -> Pace | None:
    """The pace of the calls this run made for ``model`` (cache hits left out: they cost nothing now)."""
    originals: dict[tuple[str, str], float] = {}
    times = []
    tokens: dict[tuple[Any, ...], tuple[int, int]] = {}  # per call: an original once, each pair's other reply
    for p in pairs:
        if p.key.model != model:
            continue
        if not p.cached_original and p.original_latency_s > 0:
            originals.setdefault((p.key.user_id, p.key.item_id), p.original_latency_s)
        if not p.cached_perturbed and p.latency_s > 0:
            times.append(p.latency_s)
        if p.tokens and p.tokens[0] > 0:
            tokens.setdefault((p.key.user_id, p.key.item_id), (p.tokens[0], p.tokens[1]))
        if p.tokens and p.tokens[2] > 0:
            tokens[(p.key,)] = (p.tokens[2], p.tokens[3])
    times += originals.values()
    if len(times) < MIN_CALLS:
        return None
    counted = list(tokens.values())
    prompt = round(statistics.fmean(t[0] for t in counted), 1) if counted else None
    completion = round(statistics.fmean(t[1] for t in counted), 1) if counted else None
    return Pace(model, backend, round(statistics.median(times), 3), len(times), concurrency, at, prompt,
                completion)


def pace_key(backend: str, model: str) -> str:
    return f"{backend}\x1f{model}"


def save_pace(kept: Store, pace: Pace) -> None:
    """Record the pace (best effort: a store that cannot be written loses nothing else)."""
    _save(kept, pace_key(pace.backend, pace.model), pace)


def load_pace(kept: Store, backend: str, model: str) -> Pace | None:
    """The recorded pace of ``model`` on ``backend``, None when there is none or it cannot be read."""
    pace = _load(kept, pace_key(backend, model), Pace)
    if pace is None:
        return None
    numbers_ok = (isinstance(pace.median_s, (int, float)) and 0 < pace.median_s < 86_400
                  and isinstance(pace.calls, int) and isinstance(pace.concurrency, int)
                  and pace.concurrency > 0)
    same = pace.model == model and pace.backend == backend and isinstance(pace.measured_at, str)
    tokens_ok = all(t is None or _a_token_mean(t) for t in (pace.prompt_tokens, pace.completion_tokens))
    return pace if numbers_ok and same and tokens_ok else None


def _save(kept: Store, key: str, record: Any) -> None:
    """A small record (a dataclass) kept in the run's store, best effort."""
    kept.put(PACE, key, json.dumps(asdict(record)))


def _load(kept: Store, key: str, kind: type[T]) -> T | None:
    """The ``kind`` record kept under ``key``; None when there is none or it cannot be read: more than
    4 KB, not JSON, not the record's fields."""
    raw = kept.get(PACE, key)
    if raw is None or len(raw) > 4096:
        return None
    try:
        return kind(**json.loads(raw))
    except (ValueError, TypeError):
        return None


def _a_token_mean(value: Any) -> bool:
    """A mean of tokens a call, as a record read back may hold it: a number in range, not a bool."""
    return is_number(value) and 0 <= value < 10_000_000


def remember_pace(kept: Store, result: RunResult, *, backend: str, concurrency: int) -> None:
    """Record each model's pace in ``result`` (xdist workers' pairs included) for a later dry run."""
    for model in sorted({p.key.model for p in result.pairs}):
        pace = measured_pace(result.pairs, model=model, backend=backend, concurrency=concurrency,
                             at=result.finished_at)
        if pace is not None:
            save_pace(kept, pace)


def pace_lines(kept: Store, backend: str, specs: Mapping[str, Sequence[SliceSpec]],
               max_minutes: float | None, prices: Mapping[str, Any] | None = None) -> list[str]:
    """What each planned model's calls (``specs``: its slices) will take at the pace a previous run
    recorded — and cost, at its price — and how many users a time budget buys at it."""
    lines = []
    for model, slices in specs.items():
        pace = load_pace(kept, backend, model) if model else None
        price = price_for(prices, model)
        if pace is None:
            if price is not None and model:
                lines.append(f"{model}: the cost is known once a run has counted a call's tokens (no pace "
                             "recorded yet)")
            continue
        calls = max_calls(slices)
        lines.append(pace.estimate(calls))
        per_call = pace.call_cost(price) if price is not None else None
        if per_call is not None:
            lines.append(f"{model}: ≈ {money(per_call * calls)} for these {calls:,} calls at its price "
                         f"({pace.prompt_tokens:,.0f} prompt + {pace.completion_tokens:,.0f} completion "
                         "tokens a call last time; cache hits are free)")
        minutes = pace.minutes_for(calls)
        users = max(len(spec.cases) for spec in slices)
        if max_minutes is not None and minutes > max_minutes:
            fit = min(users, int(max_minutes / (minutes / users)))
            lines.append(f"max-minutes {max_minutes:g}: about {fit} of {users} users fit at that pace; "
                         "each gate is decided on its first users whose pairs are all in")
    return lines


# ------------------------------------------------------------------------------ the judge's tokens
# A judge's calls are timed by nobody (their pace is the sweep's), but they cost: the mean tokens of a judge
# call last time, kept beside the models' pace under the judge's backend with this suffix (a model that
# also judges keeps both: its judge prompts are longer than its explanation prompts).
JUDGE_SUFFIX = "+judge"


@dataclass(frozen=True)
class JudgeCallTokens:
    """The mean prompt and completion tokens of one judge model's call, over how many replies, and when."""

    model: str
    backend: str
    replies: int
    prompt_tokens: float
    completion_tokens: float
    measured_at: str

    def call_cost(self, price: tuple[float, float]) -> float:
        return tokens_cost(self.prompt_tokens, self.completion_tokens, price)


def remember_judge_tokens(kept: Store, result: RunResult, *, backend: str) -> None:
    """Record each judge model's mean tokens a call (``result.judge_tokens``, every process's), for the
    next dry run's estimate and max-cost's bound (best effort, as :func:`save_pace`)."""
    for model, counts in result.judge_tokens.items():
        replies = counts.get("replies", 0)
        if replies < MIN_CALLS:
            continue
        found = JudgeCallTokens(model, backend, replies, round(counts.get("prompt", 0) / replies, 1),
                                round(counts.get("completion", 0) / replies, 1), result.finished_at)
        _save(kept, pace_key(backend + JUDGE_SUFFIX, model), found)


def load_judge_tokens(kept: Store, backend: str, model: str) -> JudgeCallTokens | None:
    """A judge model's recorded tokens a call on ``backend``; None when there are none or they cannot be
    read (too large, numbers out of range)."""
    found = _load(kept, pace_key(backend + JUDGE_SUFFIX, model), JudgeCallTokens)
    if found is None:
        return None
    ok = (_a_token_mean(found.prompt_tokens) and _a_token_mean(found.completion_tokens)
          and found.model == model and found.backend == backend and isinstance(found.replies, int))
    return found if ok else None
