"""The :class:`Sweep`: pairs planned from slices and run on a background event loop, originals one user
ahead, a bounded window, sequential slices stopped and their calls cancelled."""

from __future__ import annotations

import asyncio
import heapq
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..data import Catalog, EvalCase, Item, UserHistory
from ..errors import BackendError
from ..results import (
    CONTROL_KIND,
    METRICS,
    ORIGINAL_FAILED,
    SWAP_KIND,
    PairResult,
    is_control,
)
from ..score_cache import CachedScorer
from .planner import PairPlanner
from .records import (
    CONTROL_SEED_OFFSET,
    ORIGINALS_AHEAD,
    Counters,
    Pair,
    Perturbations,
    SliceResult,
    SliceSpec,
    reweighted,
)

if TYPE_CHECKING:
    from ..explainers.base import Explainer, Explanation
    from ..grounding import Vocabulary
    from ..metrics import Scorer

T = TypeVar("T")


class Sweep:
    """Plans pairs from slices and runs them on a background event loop.

    ``explainers`` maps model name → explainer. Slices may be added before or after :meth:`start`;
    :meth:`wait` blocks until a slice is finished and returns its :class:`SliceResult`.
    """

    def __init__(self, explainers: Mapping[str, Explainer], catalog: Catalog, *,
                 scorer: CachedScorer | Scorer, window: int = 8, budget_s: float | None = None) -> None:
        """``window`` bounds the pairs in progress at once: enough to keep every backend slot busy
        (an original and a perturbed call per pair), few enough that users finish in order. A
        :class:`~pytest_robustexplain.score_cache.CachedScorer` builds the metrics' Scorer only for a pair
        its score cache cannot answer. ``budget_s`` is the time budget (max-minutes) from :meth:`start`:
        when it runs out, every unfinished slice is cut short (:meth:`_cut_short`)."""
        self._explainers = dict(explainers)
        self._catalog = catalog
        self._scorer = scorer
        self._planner = PairPlanner(catalog)  # which pairs each slice has (pure; shared pairs once)
        self._slices: dict[str, SliceResult] = {}
        self._slice_pairs: dict[str, list[Pair]] = {}
        self._slice_done: dict[str, threading.Event] = {}
        self._slice_users: dict[str, dict[str, list[Pair]]] = {}  # user -> the slice's pairs for them
        # Pairs of each slice still without a result: a slice is done when this reaches 0 (a counter, not
        # a rescan of the slice per finished pair, which made a run quadratic in its users).
        self._unfinished: dict[str, int] = {}
        self._originals: dict[tuple[str, str, str, int], asyncio.Future[Explanation]] = {}
        self._fatal: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._window = max(1, window)
        self._queue: list[tuple[int, int, Pair]] = []  # (user rank, sequence, pair): waiting to start
        self._queued: set[int] = set()  # ids of queued pairs
        self._rank: dict[str, int] = {}  # user -> position in the seeded order (first slice to say wins)
        self._active = 0
        self._sequence = 0
        self._planned_originals: set[tuple[str, str, str, int]] = set()
        # (user rank, sequence, a pair needing it): originals not requested yet, fetched one user ahead of
        # the pairs being started so the next user's pairs never wait on their own original.
        self._ahead: list[tuple[int, int, Pair]] = []
        self._vocabulary: Vocabulary | None = None
        # Set when a slice finishes, the run fails or a pair asks for the scorer: wakes :meth:`wait`.
        self._attention = threading.Event()
        self._budget_s = budget_s
        self._expired = False  # the time budget ran out: slices added from now on are cut short at once
        self.counters = Counters()

    # ----------------------------------------------------------------------------------- planning
    def add_slice(self, spec: SliceSpec) -> SliceResult:
        """Plan a slice's pairs (deduplicated against every slice planned so far)."""
        from ..stats import SequentialGate, user_order

        if spec.model not in self._explainers:
            raise KeyError(f"no explainer for model {spec.model!r}")
        if spec.slice_id in self._slices:
            # A second plan of the same slice would find every pair taken and finish with none.
            raise ValueError(f"slice {spec.slice_id!r} is already planned")
        result = SliceResult(spec=spec)
        users = [c.user_id for c in spec.cases]
        result.users_order = user_order(users, spec.seed) if spec.sequential else users
        if spec.sequential:
            result.gate = SequentialGate(spec.sequential.thresholds, alpha=spec.sequential.alpha,
                                         max_users=spec.sequential.max_users)
        planned = self._planner.plan(spec, result.users_order)
        pairs = planned.pairs
        result.trivial += planned.trivial
        with self._lock:
            self._slices[spec.slice_id] = result
            self._slice_pairs[spec.slice_id] = pairs
            self._slice_done[spec.slice_id] = threading.Event()
        if self._loop is None:
            self._register_slice(result, pairs)
        else:
            # Pairs, slices and the queue belong to the loop thread once it runs.
            self._loop.call_soon_threadsafe(self._register_slice, result, pairs)
        return result

    def _register_slice(self, result: SliceResult, pairs: list[Pair]) -> None:
        slice_id = result.spec.slice_id
        by_user: dict[str, list[Pair]] = {}
        self._unfinished[slice_id] = 0
        for pair in pairs:
            if slice_id not in pair.slices and pair.result is None:
                self._unfinished[slice_id] += 1
            pair.slices.add(slice_id)
            # Controls included: a user counts as finished (for the sequential gate) only once its
            # controls are in too, so what a decided slice reports does not depend on timing.
            by_user.setdefault(pair.key.user_id, []).append(pair)
        for index, user in enumerate(result.users_order):
            self._rank.setdefault(user, index)
        self._slice_users[slice_id] = by_user
        if self._fatal is not None:
            # The run has already failed: the pairs this slice shares with the failed ones will never
            # run again, so its waiter must not wait for them.
            self._slice_done[slice_id].set()
        elif self._expired:
            self._cut_short(slice_id)
        elif self._loop is not None:
            self._schedule(slice_id)

    def perturbations_for(self, slice_id: str) -> Perturbations:
        """The planned perturbations of a slice (trivial ones were filtered), computed when read."""
        pairs = [p for p in self._slice_pairs[slice_id] if not is_control(p.key.kind)]
        return Perturbations(pairs, self._catalog)

    def add_explainer(self, model: str, explainer: Explainer) -> None:
        """Make ``model`` available to slices added from now on."""
        with self._lock:
            self._explainers.setdefault(model, explainer)

    # ----------------------------------------------------------------------------------- running
    def run_coroutine(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the sweep's loop from another thread and return its result."""
        self.start()
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def start(self) -> None:
        """Start the background event loop; planned slices begin immediately."""
        if self._thread is not None:
            return
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            loop.call_soon(self._schedule, *list(self._slice_pairs))
            if self._budget_s is not None:
                loop.call_later(self._budget_s, self._out_of_time)
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="robustexplain-sweep", daemon=True)
        self._thread.start()
        ready.wait()

    async def _shutdown(self) -> None:
        self._queue.clear()
        running = [p for p in self._planner.pairs.values() if p.task is not None and not p.task.done()]
        # Pairs in flight that a slice still waits for (the run was interrupted or failed) are cancelled
        # here; those of decided slices were counted by ``_release`` when it cancelled them.
        self.counters.cancelled += sum(1 for p in running if p.slices)
        pending: list[asyncio.Future[Any]] = [p.task for p in running if p.task is not None]
        pending += [f for f in self._originals.values() if not f.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for explainer in self._explainers.values():
            await explainer.aclose()

    def close(self) -> None:
        """Cancel what is left, close the explainers and stop the background thread."""
        if self._loop is None or self._thread is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._thread = None

    def _schedule(self, *slice_ids: str) -> None:
        """Queue the pairs of these slices, earliest users first across all of them, and start some.

        Backends serve waiting requests in arrival order, so admitting pairs user by user (in the seeded
        order) makes users finish one after another: a sequential gate can decide after a few users
        while the rest have not cost a single call.
        """
        for slice_id in slice_ids:
            for pair in self._slice_pairs[slice_id]:
                if pair.result is not None:
                    self._pair_finished(pair)
                elif (pair.task is None or pair.task.cancelled()) and id(pair) not in self._queued:
                    # A pair cancelled for a decided slice is queued again when a new slice needs it.
                    pair.task = None
                    self._sequence += 1
                    self._queued.add(id(pair))
                    rank = self._rank.get(pair.key.user_id, 0)
                    heapq.heappush(self._queue, (rank, self._sequence, pair))
                    self.counters.pairs_total += 1
                    self.counters.planned_calls += 1
                    original = (pair.key.model, pair.key.user_id, pair.key.item_id, pair.sample_seed)
                    if original not in self._planned_originals:
                        # Counted when planned, so the progress line's total does not grow mid-run.
                        self._planned_originals.add(original)
                        self.counters.planned_calls += 1
                        heapq.heappush(self._ahead, (rank, self._sequence, pair))
            self._check_done(slice_id)
        self._pump()

    def _pump(self) -> None:
        """Start queued pairs while fewer than ``window`` are in progress."""
        while self._active < self._window and self._queue:
            _, _, pair = heapq.heappop(self._queue)
            if id(pair) not in self._queued:  # dropped (and counted) by a slice that decided, or queued anew
                continue
            self._queued.discard(id(pair))
            if pair.result is not None or not pair.slices:  # done, or dropped (and counted) by ``_release``
                continue
            self._active += 1
            pair.task = asyncio.ensure_future(self._run_pair(pair))
            pair.task.add_done_callback(self._pair_left)
            self._fetch_ahead(self._rank.get(pair.key.user_id, 0) + ORIGINALS_AHEAD)

    def _fetch_ahead(self, last_rank: int) -> None:
        """Request the originals of users up to ``last_rank`` while the current users' pairs run.

        Without this, the first pairs of each user all waited on that user's original: one latency per
        user with most slots idle. One user ahead is enough (a user's pairs take several latencies) and
        costs a sequential gate at most one original per slice that decides.
        """
        while self._ahead and self._ahead[0][0] <= last_rank:
            _, _, pair = heapq.heappop(self._ahead)
            if pair.slices and pair.result is None:  # still wanted by a slice that has not decided
                self._original(pair.key.model, pair.case, pair.sample_seed)

    def _pair_left(self, _task: asyncio.Task[None]) -> None:
        self._active -= 1
        if self._loop is not None and self._loop.is_running():
            self._pump()

    async def _run_pair(self, pair: Pair) -> None:
        case = pair.case
        try:
            original = await asyncio.shield(self._original(pair.key.model, case, pair.sample_seed))
            if pair.donor is not None:  # the same item, seed and identity; another user's interactions
                history, seed = pair.donor.history, pair.sample_seed
            elif pair.perturbation is None:
                history, seed = case.history, pair.sample_seed + CONTROL_SEED_OFFSET + pair.key.repeat
            else:
                history, seed = pair.perturbation.perturbed, pair.sample_seed
            other = await self._call(pair.key.model, history, case.item, seed, pair.key.repeat)
            await self._scorer_for(original.text, other.text)
            result = self._score(pair, original, other)
        except asyncio.CancelledError:  # counted where it was cancelled: ``_release`` or ``_shutdown``
            raise
        except Exception as exc:
            # BackendError / CacheMissError end the run; anything else (a scorer that cannot be built, a
            # bug) must surface in the waiting tests rather than hang them.
            self._set_fatal(exc)
            return
        pair.result = result
        pair.perturbation = None  # scored: what changed is in the result; the histories are recomputable
        self.counters.pairs_done += 1
        for slice_id in pair.slices:
            self._unfinished[slice_id] -= 1
        self._pair_finished(pair)

    async def _scorer_for(self, e: str, e_prime: str) -> None:
        """Wait, without blocking the loop, until the scorer can score (e, e′): the first pair that needs
        the metrics' Scorer asks the thread in :meth:`wait` to build it (see ``CachedScorer``)."""
        scorer = self._scorer
        if isinstance(scorer, CachedScorer) and scorer.needs_scorer(e, e_prime):
            future = scorer.request()
            self._attention.set()
            # Shielded: a pair cancelled meanwhile (its slice decided) must not cancel the build others await.
            await asyncio.shield(asyncio.wrap_future(future))

    def _original(self, model: str, case: EvalCase, seed: int) -> asyncio.Future[Explanation]:
        key = (model, case.user_id, case.item_id, seed)
        future = self._originals.get(key)
        if future is None:
            future = asyncio.ensure_future(self._call(model, case.history, case.item, seed, 0))
            # Fetched ahead, an original may end up awaited by no pair (its slices decided): its error is
            # reported by the pairs that do await it, and must not be logged as never retrieved.
            future.add_done_callback(_retrieve)
            self._originals[key] = future
        return future

    async def _call(self, model: str, history: UserHistory, item: Item, seed: int,
                    repeat: int) -> Explanation:
        explanation = await self._explainers[model].explain(history, item, seed=seed, repeat=repeat)
        self.counters.calls_done += 1
        if explanation.host is not None:
            self.counters.by_host[explanation.host] = self.counters.by_host.get(explanation.host, 0) + 1
        if explanation.cached:
            self.counters.cached += 1
        if explanation.failure is not None:
            self.counters.failed += 1
        if explanation.cut:
            self.counters.cut += 1
        if explanation.unfit:
            self.counters.unfit += 1
        self.counters.retried += explanation.retries
        if not explanation.cached:
            self.counters.prompt_tokens += explanation.prompt_tokens or 0
            self.counters.completion_tokens += explanation.completion_tokens or 0
        return explanation

    def _changes(self, pair: Pair, original: Explanation, other: Explanation) -> dict[str, Any]:
        if pair.perturbation is not None:
            from ..adversarial import attack_outcome

            changes = dict(pair.perturbation.changes)
            outcome = attack_outcome(pair.key.kind, changes, original.text, other.text)
            if outcome is not None:  # prompt injection and shilling: what the attack achieved
                changes["attack"] = outcome
            return changes
        if pair.donor is None:
            return {"control": "resampled"}
        if self._vocabulary is None:
            from ..grounding import Vocabulary

            self._vocabulary = Vocabulary(self._catalog)
        grounding = self._vocabulary.ground(original.text, pair.case.history, pair.case.item)
        return {"donor": pair.donor.donor_id, "donor_history_length": pair.donor.donor_length,
                "control_length": len(pair.donor.history), "copied": _copied(original.text, pair.case),
                "grounding": grounding.to_dict()}

    def _score(self, pair: Pair, original: Explanation, other: Explanation) -> PairResult:
        failed = original if original.failure is not None else other
        vectors = None if original.embedding is None or other.embedding is None else (
            original.embedding, other.embedding)
        scores = self._scorer.score(original.text, other.text, vectors=vectors)
        failure = failed.failure
        if failure is None and scores.generation_failure:
            failure = "empty"
            failed = original if not original.text.strip() else other
        detail = failed.detail if failure else ""
        if failure and failed is original:
            # One failed original zeroes every pair of its user: the reports say where the zeros come from.
            detail = f"{ORIGINAL_FAILED} ({failure}){': ' + detail if detail else ''}"
        values: dict[str, Any] = {m: 0.0 if failure else getattr(scores, m) for m in METRICS}
        if scores.embedding is not None:  # the opt-in fifth metric
            values["embedding"] = 0.0 if failure else scores.embedding
        return PairResult(
            key=pair.key, **values, combined=0.0 if failure else scores.combined,
            original=original.text, perturbed=other.text,
            changes=self._changes(pair, original, other),
            failure=failure, failure_detail=detail,
            keyword_empty=scores.keyword_empty and not failure,
            cached_original=original.cached, cached_perturbed=other.cached,
            latency_s=other.latency_s, history_length=len(pair.case.history),
            cut=tuple(name for name, e in (("original", original), ("perturbed", other)) if e.cut),
            **_overflow(original, other), tokens=_tokens(original, other),
            original_latency_s=original.latency_s,
        )

    def _weighted(self, result: SliceResult, pair: PairResult) -> PairResult:
        return reweighted(pair, result.spec.weights)

    def _pair_finished(self, pair: Pair) -> None:
        for slice_id in list(pair.slices):
            result = self._slices[slice_id]
            if result.gate is not None and not is_control(pair.key.kind):
                self._feed_gate(slice_id)
            self._check_done(slice_id)

    def _feed_gate(self, slice_id: str) -> None:
        """Feed finished users to the sequential gate, strictly in the slice's seeded user order.

        Feeding in completion order would let latency (which tracks explanation length, and so the
        scores) choose the order and break the test's validity; a finished user waits for its turn.
        """
        result = self._slices[slice_id]
        gate = result.gate
        assert gate is not None
        by_user = self._slice_users[slice_id]
        while not gate.decided and result.users_fed < len(result.users_order):
            mine = by_user.get(result.users_order[result.users_fed], [])
            if any(p.result is None for p in mine):
                return
            result.users_fed += 1
            done = [self._weighted(result, p.result) for p in mine
                    if p.result is not None and not is_control(p.key.kind)]
            if done:  # a user whose perturbations were all trivial has nothing to say
                gate.update({q: sum(r.metric(q) for r in done) / len(done) for q in gate.thresholds},
                            pairs=len(done))
        if gate.decided:
            self._release(slice_id)

    def _out_of_time(self) -> None:
        """The time budget ran out: cut every unfinished slice short, in the order they were planned."""
        self._expired = True
        before = self.counters.cancelled
        for slice_id, done in list(self._slice_done.items()):
            if not done.is_set() and slice_id in self._slice_users:
                self._cut_short(slice_id)
        self.counters.out_of_time += self.counters.cancelled - before

    def _cut_short(self, slice_id: str) -> None:
        """Decide the slice on its first users (seeded order) whose pairs are all in; cancel the rest.

        A prefix of the order, not every user that happens to be done: which later users finished depends
        on timing, and users are admitted in this order, so the prefix is what the budget bought. A
        sequential slice keeps the users its gate has seen (its fallback then decides)."""
        result = self._slices[slice_id]
        if result.gate is not None:
            kept = result.users_fed
        else:
            by_user = self._slice_users[slice_id]
            kept = 0
            for user in result.users_order:
                if any(p.result is None for p in by_user.get(user, [])):
                    break
                kept += 1
        result.out_of_time = (kept, len(result.users_order))
        self._release(slice_id)

    def _release(self, slice_id: str) -> None:
        """A decided slice no longer needs its outstanding pairs; cancel those no other slice needs.

        They are counted as cancelled here, before the slice is reported finished: counted later (when a
        task's cancellation landed, or when the window reached a queued pair) the run's record, written as
        soon as the last slice finished, could miss them — the count depended on timing."""
        for pair in self._slice_pairs[slice_id]:
            if pair.result is None:
                pair.slices.discard(slice_id)
                if pair.slices:
                    continue
                if pair.task is not None and not pair.task.done():
                    pair.task.cancel()
                    self.counters.cancelled += 1
                elif id(pair) in self._queued:  # never started: out of the queue (``_pump`` skips it)
                    self._queued.discard(id(pair))
                    self.counters.cancelled += 1
        self._finish(slice_id)

    def _check_done(self, slice_id: str) -> None:
        if not self._slice_done[slice_id].is_set() and self._unfinished[slice_id] == 0:
            self._finish(slice_id)

    def _finish(self, slice_id: str) -> None:
        result = self._slices[slice_id]
        planned = self._slice_pairs[slice_id]
        if result.gate is not None or result.out_of_time is not None:
            # A sequential verdict speaks for the users the gate saw, in order; pairs of later users
            # that happened to finish depend on timing and are left out (same result serial or xdist).
            # So does one cut short by the time budget, for the users it measured.
            kept = result.users_fed if result.out_of_time is None else result.out_of_time[0]
            seen = set(result.users_order[:kept])
            planned = [p for p in planned if p.key.user_id in seen]
        done = [p.result for p in planned if p.result is not None]
        result.scored = [r for r in done if not is_control(r.key.kind)]
        result.pairs = [self._weighted(result, r) for r in result.scored]
        result.controls = [r for r in done if r.key.kind == CONTROL_KIND]
        result.swaps = [r for r in done if r.key.kind == SWAP_KIND]
        result.cancelled = len(self._slice_pairs[slice_id]) - len(done)
        if result.gate is not None and not result.gate.decided:
            result.gate.finish()  # every user seen, still undecided: the fixed-sample fallback decides
        self._slice_done[slice_id].set()
        self._attention.set()

    def _set_fatal(self, exc: BaseException) -> None:
        if self._fatal is None:
            self._fatal = exc
        self._attention.set()
        with self._lock:  # add_slice adds events from the main thread
            events = list(self._slice_done.values())
        for event in events:
            event.set()

    # ----------------------------------------------------------------------------------- results
    def wait(self, slice_id: str, *, poll: Callable[[], None] | None = None,
             interval: float = 0.25) -> SliceResult:
        """Block until the slice is finished; ``poll`` runs every ``interval`` seconds meanwhile, and the
        metrics' Scorer is built here (on this, the waiting thread) when a pair asks for it."""
        event = self._slice_done[slice_id]
        while not event.is_set():
            if isinstance(self._scorer, CachedScorer) and self._scorer.requested:
                self._scorer.build_requested()
                continue
            if self._attention.wait(interval):
                self._attention.clear()  # then look again: the slice, or a request for the scorer
            elif poll is not None:
                poll()
        if self._fatal is not None:
            raise self._fatal
        result = self._slices[slice_id]
        errors = [p for p in result.pairs if p.failure == "error"]
        if result.pairs and len(errors) == len(result.pairs):
            # Every call failing is a broken backend, not a robustness finding: never a verdict.
            raise BackendError(f"every model call failed for model {result.spec.model!r} "
                               f"({len(errors)} pairs); first error: {errors[0].failure_detail}")
        return result


    def finished(self, slice_id: str) -> SliceResult | None:
        """The slice's result if it has finished (without a fatal error), else None; never waits."""
        if self._fatal is None and self._slice_done[slice_id].is_set():
            return self._slices[slice_id]
        return None

    def all_results(self) -> list[PairResult]:
        """Every scored pair so far, in a stable order."""
        done = [p.result for p in self._planner.pairs.values() if p.result is not None]
        return sorted(done, key=lambda r: r.key)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _copied(text: str, case: EvalCase) -> float:
    """The share of the original explanation copied from its prompt (``copying.py``): the default
    prompt's rendering of the case, which holds every history line and the item's line."""
    from ..copying import copied_share
    from ..explainers.prompt import PromptTemplate

    return round(copied_share(text, PromptTemplate().render(case.history, case.item)), 4)


def _overflow(original: Explanation, other: Explanation) -> dict[str, Any]:
    """The pair's prompts that did not fit the context, and the first one's sentence (with its user)."""
    sides = tuple(name for name, e in (("original", original), ("perturbed", other)) if e.unfit)
    if not sides:
        return {}
    first = original if original.unfit else other
    return {"overflow": sides, "overflow_detail": f"{sides[0]} explanation: {first.detail}"}


def _tokens(original: Explanation, other: Explanation) -> tuple[int, ...]:
    """The two replies' token counts as the server reported them; () when it reported none."""
    counts = (original.prompt_tokens, original.completion_tokens, other.prompt_tokens,
              other.completion_tokens)
    return () if all(n is None for n in counts) else tuple(n or 0 for n in counts)
