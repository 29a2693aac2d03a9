"""What a sweep is asked and what it answers: slice specs, slice results, the pair being run, the progress
counters (and the one progress line), a slice's perturbations recomputed on demand, and re-weighting a
scored pair under a slice's own weights."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, overload

from ..data import Catalog, EvalCase
from ..metrics.weights import weight_items
from ..results import (
    ANSWERED_BY,
    REUSED_TOKENS,
    PairKey,
    PairResult,
)

# A slice's weights: the metrics' (four, or five with the embedding), or by name when a user metric has a
# share of ρ (``metrics.check_user_weights``).
Weights = tuple[float, ...] | Mapping[str, float]

if TYPE_CHECKING:
    from ..explainers.base import Explanation
    from ..metrics.user import Metric
    from ..perturbations import KindRegistry, PerturbationResult
    from ..perturbations.donors import Control
    from ..stats import OneSidedTest, SequentialGate, Stopped, StopRule


# Control pairs explain the same history again with a different sampling seed; this offset keeps their
# seeds clear of the run seed whatever its value.
CONTROL_SEED_OFFSET = 7919
# How many users ahead of the pairs being started their original explanations are requested.
ORIGINALS_AHEAD = 1
# How many users ahead of a sequential slice's next user to feed pairs start: enough to keep the model busy
# while the user before is scored (and read by the judge, ``StopRule.probe``), few enough that a test that
# decides early saves the calls of the users after — however fast the model is next to the scorer (an
# instant backend beside a scorer still being built had run most of a slice's calls before its first user
# was fed: 35 of 80 calls made for a stop after one user, under xdist).
AHEAD_OF_FEED = 1


@dataclass(frozen=True)
class SliceSpec:
    """What one gated test item needs: its pairs are the product of cases × kinds × severities × repeats."""

    slice_id: str
    model: str
    cases: tuple[EvalCase, ...]
    kinds: tuple[str, ...]
    severities: tuple[int, ...]
    repeats: int
    seed: int
    noise_floor: bool = False
    sequential: SequentialConfig | None = None
    weights: Weights | None = None  # None: the sweep scorer's weights
    # The user's own metrics this slice's test measures (its directory's conftests'): pair.user_metrics.
    metrics: tuple[Metric, ...] = ()
    # (user, item) -> the case's content-only cross-user control (a donor's interactions under the user's
    # identity, ``perturbations/donors.py``); empty: no controls (guard off).
    donors: Mapping[tuple[str, str], Control] = field(default_factory=dict)
    # "full": every case runs every severity of every kind; "balanced": one severity per kind, rotated
    # over the cases (planner.severities_for).
    design: str = "full"
    # The users of ``cases`` this run measures (a shard's, ``engine/shards.py``); None: every one. The pairs
    # are planned as for all of them (positions, donors, seeds), then only these users' run.
    users: frozenset[str] | None = None


def planned_users(cases: Sequence[EvalCase], max_users: int | None) -> int:
    """The users a sequential slice of ``cases`` can feed: each user once, at most ``max_users``."""
    users = len({case.user_id for case in cases})
    return users if max_users is None else min(users, max_users)


@dataclass(frozen=True)
class SequentialConfig:
    """Thresholds for an anytime-valid sequential gate over this slice's users."""

    thresholds: Mapping[str, float]
    alpha: float = 0.05
    max_users: int | None = None
    # The checks' own anytime-valid tests (``Check.stop_rules``), fed the same users in the same order: a
    # FAIL rule that rejects ends the slice, as the gate's FAIL does; a PASS decided by ρ waits for every
    # PASS rule.
    stops: tuple[StopRule, ...] = ()
    # The users a PASS waits for (``Check.users_needed``): the checks that pass unless shown to fail.
    hold: int = 0


@dataclass
class SliceResult:
    """What a slice's test item receives once its pairs are scored (or cancelled)."""

    spec: SliceSpec
    pairs: list[PairResult] = field(default_factory=list)  # ρ under the slice's weights
    scored: list[PairResult] = field(default_factory=list)  # the same pairs, ρ under the run's weights
    controls: list[PairResult] = field(default_factory=list)  # noise floor: same history, resampled
    swaps: list[PairResult] = field(default_factory=list)  # cross-user controls, ρ under the run's weights
    trivial: int = 0  # pairs filtered because the perturbation changed nothing
    cancelled: int = 0  # pairs never run because a sequential gate had decided
    users_order: list[str] = field(default_factory=list)
    gate: SequentialGate | None = None
    stops: dict[str, OneSidedTest] = field(default_factory=dict)  # the checks' own tests, by StopRule.key
    stopped: Stopped | None = None  # the check whose own test ended the slice early, when one did
    # The probes' answers (``StopRule.probe``: the judge's verdicts), by StopRule.key, then user.
    probed: dict[str, dict[str, float | None]] = field(default_factory=dict)
    users_fed: int = 0  # how many users (in ``users_order``) the sequential gate has seen
    # (users measured, users planned) when the run's time budget (max-minutes) ran out before the slice
    # finished: it is decided on the first users of ``users_order`` whose pairs were all in; None otherwise.
    out_of_time: tuple[int, int] | None = None


@dataclass
class Pair:
    key: PairKey
    case: EvalCase
    # None for control pairs, and once the pair is scored: perturbations are pure functions of their seed,
    # so :class:`Perturbations` recomputes them instead of the run keeping every perturbed history.
    perturbation: PerturbationResult | None
    sample_seed: int
    donor: Control | None = None  # cross-user controls: the history explained instead of the user's
    slices: set[str] = field(default_factory=set)
    result: PairResult | None = None
    task: asyncio.Task[None] | None = None


@dataclass
class Counters:
    """Progress of the sweep; read from the main thread for the progress line (ints are atomic enough)."""

    planned_calls: int = 0
    calls_done: int = 0
    cached: int = 0
    failed: int = 0
    cut: int = 0  # replies the server cut at the token limit (stop reason "length"), cached ones included
    retried: int = 0  # attempts after the first (timeouts, server errors) that the calls needed
    unfit: int = 0  # calls whose prompt did not fit the context (refused, or truncated by the server)
    # Tokens of the calls made (cache hits cost none), as the server reported them (Ollama prompt_eval_count
    # / eval_count, OpenAI usage): what the run cost.
    prompt_tokens: int = 0
    reused_tokens: int = 0  # of those, what the server said it took from its prompt cache
    completion_tokens: int = 0
    cancelled: int = 0
    out_of_time: int = 0  # of those cancelled, the calls the time budget (max-minutes) stopped
    pairs_done: int = 0
    pairs_total: int = 0
    started: float = field(default_factory=time.monotonic)
    by_host: dict[str, int] = field(default_factory=dict)  # calls answered per host (several hosts only)

    def count(self, explanation: Explanation) -> None:
        """One call answered: what it cost and what the server said of it."""
        self.calls_done += 1
        if explanation.host is not None:
            self.by_host[explanation.host] = self.by_host.get(explanation.host, 0) + 1
        self.cached += explanation.cached
        self.failed += explanation.failure is not None
        self.cut += bool(explanation.cut)
        self.unfit += bool(explanation.unfit)
        self.retried += explanation.retries
        if not explanation.cached:
            self.prompt_tokens += explanation.prompt_tokens or 0
            self.reused_tokens += explanation.reused_tokens or 0
            self.completion_tokens += explanation.completion_tokens or 0

    def to_dict(self) -> dict[str, int]:
        made = self.calls_done - self.cached
        by_host = {ANSWERED_BY + host: n for host, n in sorted(self.by_host.items())}
        # Said only when it happened: a run of whole replies without retries reads as it always did.
        seldom = {name: n for name, n in (("cut at num_predict", self.cut), ("retried", self.retried),
                                          ("prompt over the context", self.unfit),
                                          ("stopped by the time budget", self.out_of_time)) if n}
        tokens = {name: n for name, n in (("prompt tokens", self.prompt_tokens),
                                          (REUSED_TOKENS, self.reused_tokens),
                                          ("completion tokens", self.completion_tokens)) if n}
        return {"made": made, "cached": self.cached, "failed": self.failed, **seldom,
                "cancelled": self.cancelled, "planned": self.planned_calls, **tokens, **by_host}

    def progress_line(self, now: float, *, bar_width: int = 0) -> str:
        """``robustexplain: [####----] 120/500 pairs · 130/520 calls · 25 cached · 14.2/s · ETA 27s``, the
        bar only with ``bar_width``: the one progress line of ``robustexplain run`` and of pytest."""
        bar = ""
        if bar_width:
            filled = round(bar_width * min(self.pairs_done / max(self.pairs_total, 1), 1.0))
            bar = "[" + "#" * filled + "-" * (bar_width - filled) + "] "
        done, total = self.calls_done, max(self.planned_calls, 1)
        rate = done / max(now - self.started, 1e-9)
        eta = f"ETA {(total - done) / rate:.0f}s" if rate > 0 else "ETA --"
        return (f"robustexplain: {bar}{self.pairs_done}/{self.pairs_total} pairs · {done}/{total} calls · "
                f"{self.cached} cached · {rate:.1f}/s · {eta}")


class Perturbations(Sequence["PerturbationResult"]):
    """A slice's perturbations in plan order, each recomputed when read (the same seed gives the same
    perturbation), so a long run holds no perturbed history longer than its pair needs it."""

    def __init__(self, pairs: list[Pair], catalog: Catalog, kinds: KindRegistry | None = None) -> None:
        self._pairs = pairs
        self._catalog = catalog
        self._kinds = kinds

    def __len__(self) -> int:
        return len(self._pairs)

    @overload
    def __getitem__(self, index: int) -> PerturbationResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[PerturbationResult]: ...

    def __getitem__(self, index: int | slice) -> PerturbationResult | list[PerturbationResult]:
        if isinstance(index, slice):
            return [self.of(p) for p in self._pairs[index]]
        return self.of(self._pairs[index])

    def of(self, pair: Pair) -> PerturbationResult:
        """``pair``'s perturbation (recomputed unless the pair still holds it)."""
        if pair.perturbation is not None:
            return pair.perturbation
        from ..perturbations import apply_perturbation  # lazy: loads numpy

        key = pair.key
        return apply_perturbation(pair.case.history, key.kind, key.severity, catalog=self._catalog,
                                  seed=pair.sample_seed, item_id=key.item_id, repeat=key.repeat,
                                  kinds=self._kinds)


def reweighted(pair: PairResult, weights: Weights | None) -> PairResult:
    """``pair`` with ρ under ``weights`` (None: unchanged; the metrics do not depend on the weights). Weights
    that give a user metric a share read its value from the pair (measured for the slice first)."""
    if weights is None or pair.failure is not None:
        return pair
    combined = math.fsum(w * pair.metric(m) for m, w in weight_items(weights))
    return replace(pair, combined=min(1.0, max(0.0, combined)))
