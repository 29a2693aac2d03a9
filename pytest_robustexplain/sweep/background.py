"""The :class:`Sweep`: pairs planned from slices and run on a background event loop, originals one user
ahead, a bounded window, sequential slices stopped and their calls cancelled.

The sweep only schedules: which pairs a slice has is the planner's (``planner.py``), what a finished pair
completes or orphans the book-keeper's (``books.py``), how a pair is scored the injected pair scorer's
(``scoring.py``), and the thread is :class:`~.loop.LoopThread`'s.
"""

from __future__ import annotations

import asyncio
import heapq
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ..data import Catalog, EvalCase, Item, UserHistory
from ..errors import BackendError, WarningQueue
from ..results import PairKey, PairResult, is_control
from .books import Books, Step
from .loop import LoopThread
from .planner import PairPlanner
from .records import (
    AHEAD_OF_FEED,
    CONTROL_SEED_OFFSET,
    ORIGINALS_AHEAD,
    Counters,
    Pair,
    Perturbations,
    SliceResult,
    SliceSpec,
    planned_users,
)
from .scoring import PairScorer

if TYPE_CHECKING:
    from ..explainers.base import Explainer, Explanation
    from ..metrics import Scorer
    from ..perturbations import KindRegistry
    from ..score_cache import CachedScorer

T = TypeVar("T")


class Sweep:
    """Plans pairs from slices and runs them on a background event loop.

    ``explainers`` maps model name → explainer. Slices may be added before or after :meth:`start`;
    :meth:`wait` blocks until a slice is finished and returns its :class:`SliceResult`.
    """

    def __init__(self, explainers: Mapping[str, Explainer], catalog: Catalog, *,
                 scorer: CachedScorer | Scorer | PairScorer, window: int = 8,
                 budget_s: float | None = None, warnings: WarningQueue | None = None,
                 kinds: KindRegistry | None = None, recorded: Mapping[PairKey, PairResult] | None = None
                 ) -> None:
        """``window`` bounds the pairs in progress at once: enough to keep every backend slot busy
        (an original and a perturbed call per pair), few enough that users finish in order. ``scorer``
        scores finished pairs (a :class:`PairScorer`, or the scorer to make one of: a
        :class:`~pytest_robustexplain.score_cache.CachedScorer` builds the metrics' Scorer only for a pair
        its score cache cannot answer). ``budget_s`` is the time budget (max-minutes) from :meth:`start`:
        when it runs out, every unfinished slice is cut short (:meth:`_out_of_time`). ``warnings`` is the
        run's queue for what the loop thread warns of (:attr:`warnings`, flushed by the waiting thread).
        ``recorded``: pairs another run measured (a merge's shards), taken as finished when planned."""
        self._explainers = dict(explainers)
        self._recorded = recorded or {}
        self._catalog = catalog
        self._scorer = scorer if isinstance(scorer, PairScorer) else PairScorer(scorer, catalog)
        self._planner = PairPlanner(catalog, kinds)  # which pairs each slice has (pure; shared pairs once)
        # What finished pairs complete or orphan (pure but for measuring the user's metrics of a slice).
        self._books = Books(self._scorer.scorer.user)
        self.warnings = warnings if warnings is not None else WarningQueue()
        self._thread = LoopThread(self.warnings)
        # Read by the main thread (wait, perturbations_for) as soon as add_slice returns:
        self._slices: dict[str, SliceResult] = {}
        self._slice_pairs: dict[str, list[Pair]] = {}
        self._slice_done: dict[str, threading.Event] = {}
        self._originals: dict[tuple[str, str, str, int], asyncio.Future[Explanation]] = {}
        self._fatal: BaseException | None = None
        self._lock = threading.Lock()
        self._window = max(1, window)
        self._probing: set[asyncio.Task[None]] = set()  # probes asked and not answered yet
        self._sequential_slices: list[SliceResult] = []  # their feed bounds how far ahead pairs start
        self._queue: list[tuple[int, int, Pair]] = []  # (user rank, sequence, pair): waiting to start
        self._queued: set[int] = set()  # ids of queued pairs
        self._active = 0
        self._sequence = 0
        self._planned_originals: set[tuple[str, str, str, int]] = set()
        # (user rank, sequence, a pair needing it): originals not requested yet, fetched one user ahead of
        # the pairs being started so the next user's pairs never wait on their own original.
        self._ahead: list[tuple[int, int, Pair]] = []
        # Set when a slice finishes, the run fails or a pair asks for the scorer: wakes :meth:`wait`.
        self._attention = threading.Event()
        self._budget_s = budget_s
        self._expired = False  # the time budget ran out: slices added from now on are cut short at once
        self.counters = Counters()

    # ----------------------------------------------------------------------------------- planning
    def add_slice(self, spec: SliceSpec) -> SliceResult:
        """Plan a slice's pairs (deduplicated against every slice planned so far)."""
        from ..stats import SequentialGate, user_order  # lazy: loads numpy

        if spec.model not in self._explainers:
            raise KeyError(f"no explainer for model {spec.model!r}")
        if spec.slice_id in self._slices:
            # A second plan of the same slice would find every pair taken and finish with none.
            raise ValueError(f"slice {spec.slice_id!r} is already planned")
        result = SliceResult(spec=spec)
        users = [c.user_id for c in spec.cases]
        order = user_order(users, spec.seed) if spec.sequential else users
        # A shard's users keep their places in the whole plan's order (engine/shards.py).
        result.users_order = order if spec.users is None else [u for u in order if u in spec.users]
        if spec.sequential:
            result.gate = SequentialGate(spec.sequential.thresholds, alpha=spec.sequential.alpha,
                                         max_users=spec.sequential.max_users,
                                         user=[m.name for m in spec.metrics])
            at_most = planned_users(spec.cases, spec.sequential.max_users)
            result.stops = {rule.key: rule.test(at_most) for rule in spec.sequential.stops}
        planned = self._planner.plan(spec, result.users_order)
        pairs = planned.pairs
        result.trivial += planned.trivial
        with self._lock:
            self._slices[spec.slice_id] = result
            self._slice_pairs[spec.slice_id] = pairs
            self._slice_done[spec.slice_id] = threading.Event()
        if self._thread.loop is None:
            self._register_slice(result, pairs)
        else:
            # Pairs, slices and the queue belong to the loop thread once it runs.
            self._thread.call_soon(self._register_slice, result, pairs)
        return result

    def _register_slice(self, result: SliceResult, pairs: list[Pair]) -> None:
        slice_id = result.spec.slice_id
        for pair in pairs:  # measured by another run: finished as it is planned (the books settle it)
            if pair.result is None and pair.key in self._recorded:
                pair.result, pair.perturbation = self._recorded[pair.key], None
        self._books.add(result, pairs)
        if result.spec.sequential is not None:
            self._sequential_slices.append(result)
        if self._fatal is not None:
            # The run has already failed: the pairs this slice shares with the failed ones will never
            # run again, so its waiter must not wait for them.
            self._slice_done[slice_id].set()
        elif self._expired:
            self._book(self._books.cut_short, slice_id)
        elif self._thread.loop is not None:
            self._schedule(slice_id)

    def perturbations_for(self, slice_id: str) -> Perturbations:
        """The planned perturbations of a slice (trivial ones were filtered), computed when read."""
        pairs = [p for p in self._slice_pairs[slice_id] if not is_control(p.key.kind)]
        return Perturbations(pairs, self._catalog, self._planner.kinds)

    def seen_by(self, slice_id: str) -> dict[PairKey, tuple[UserHistory, Item]]:
        """What each planned pair's second prompt showed: the perturbed history, the case's own for a
        noise-floor control, the donor's interactions for a cross-user control (the judge reads it)."""
        perturbations = Perturbations([], self._catalog, self._planner.kinds)
        seen = {}
        for pair in self._slice_pairs[slice_id]:
            if pair.donor is not None:
                history = pair.donor.history
            elif is_control(pair.key.kind):
                history = pair.case.history
            else:
                history = perturbations.of(pair).perturbed
            seen[pair.key] = (history, pair.case.item)
        return seen

    def add_explainer(self, model: str, explainer: Explainer) -> None:
        """Make ``model`` available to slices added from now on."""
        with self._lock:
            self._explainers.setdefault(model, explainer)

    # ----------------------------------------------------------------------------------- running
    def run_coroutine(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the sweep's loop from another thread and return its result."""
        self.start()
        return self._thread.run(coro)

    def start(self) -> None:
        """Start the background event loop; planned slices begin immediately."""
        self._thread.start(self._first, self._shutdown)

    def _first(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon(self._schedule, *list(self._slice_pairs))
        if self._budget_s is not None:
            loop.call_later(self._budget_s, self._out_of_time)

    async def _shutdown(self) -> None:
        self._queue.clear()
        running = [p for p in self._planner.pairs.values() if p.task is not None and not p.task.done()]
        # Pairs in flight that a slice still waits for (the run was interrupted or failed) are cancelled
        # here; those of decided slices were counted by ``_apply`` when it cancelled them.
        self.counters.cancelled += sum(1 for p in running if p.slices)
        pending: list[asyncio.Future[Any]] = [p.task for p in running if p.task is not None]
        pending += [f for f in self._originals.values() if not f.done()]
        pending += list(self._probing)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for explainer in self._explainers.values():
            await explainer.aclose()

    def close(self) -> None:
        """Cancel what is left, close the explainers and stop the background thread; then the score
        cache's database (its last writes were on that thread)."""
        self._thread.close()
        self._scorer.scorer.close()

    def _schedule(self, *slice_ids: str) -> None:
        """Queue the pairs of these slices, earliest users first across all of them, and start some.

        Backends serve waiting requests in arrival order, so admitting pairs user by user (in the seeded
        order) makes users finish one after another: a sequential gate can decide after a few users
        while the rest have not cost a single call.
        """
        for slice_id in slice_ids:
            for pair in self._slice_pairs[slice_id]:
                if pair.result is None and (pair.task is None or pair.task.cancelled()) \
                        and id(pair) not in self._queued and pair.slices:
                    self._enqueue(pair)
            self._book(self._books.settle, slice_id)
        self._pump()

    def _enqueue(self, pair: Pair) -> None:
        # A pair cancelled for a decided slice is queued again when a new slice needs it.
        pair.task = None
        self._sequence += 1
        self._queued.add(id(pair))
        rank = self._books.rank.get(pair.key.user_id, 0)
        heapq.heappush(self._queue, (rank, self._sequence, pair))
        self.counters.pairs_total += 1
        self.counters.planned_calls += 1
        original = (pair.key.model, pair.key.user_id, pair.key.item_id, pair.sample_seed)
        if original not in self._planned_originals:
            # Counted when planned, so the progress line's total does not grow mid-run.
            self._planned_originals.add(original)
            self.counters.planned_calls += 1
            heapq.heappush(self._ahead, (rank, self._sequence, pair))

    def _book(self, event: Callable[..., Step], *args: Any) -> None:
        """Tell the books of an event and apply what it changed. The books measure the user's own metrics
        when a slice's users are in: a metric that fails ends the run with its error in the waiting tests,
        as a failed scorer does, rather than leaving them waiting on this thread."""
        try:
            step = event(*args)
        except Exception as exc:
            self._set_fatal(exc)
            return
        self._apply(step)

    def _apply(self, step: Step) -> None:
        """Do what the books decided: cancel the orphaned pairs (counted here, once, before the slice
        is reported finished), then wake the waiters of the finished slices."""
        for pair in step.orphans:
            if pair.task is not None and not pair.task.done():
                pair.task.cancel()
                self.counters.cancelled += 1
            elif id(pair) in self._queued:  # never started: out of the queue (``_pump`` skips it)
                self._queued.discard(id(pair))
                self.counters.cancelled += 1
        for slice_id, user, results in step.probes:
            task = asyncio.ensure_future(self._probe(slice_id, user, results))
            self._probing.add(task)
            task.add_done_callback(self._probing.discard)
        for slice_id in step.finished:
            self._slice_done[slice_id].set()
        if step.finished:
            self._attention.set()

    async def _probe(self, slice_id: str, user: str, results: list[PairResult]) -> None:
        """Ask the slice's probes (``StopRule.probe``: the judge) about one user whose pairs are all in,
        while the next users' calls run; the books feed the user when they have answered."""
        sequential = self._slices[slice_id].spec.sequential
        assert sequential is not None
        probes = [(rule.key, rule.probe) for rule in sequential.stops if rule.probe is not None]
        try:
            values = {key: await probe(results) for key, probe in probes}
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a dead judge ends the run, as a dead model does
            self._set_fatal(exc)
            return
        self._book(self._books.probed, slice_id, user, values)
        self._pump()  # a user fed moves the slice's next user on

    def _pump(self) -> None:
        """Start queued pairs while fewer than ``window`` are in progress (and, while a sequential slice is
        undecided, none of a user too far past the users it has fed: :meth:`_furthest_rank`)."""
        while self._active < self._window and self._queue:
            furthest = self._furthest_rank()
            if furthest is not None and self._queue[0][0] > furthest:
                return  # resumed when a user is fed (a pair done, or ``_probe``)
            _, _, pair = heapq.heappop(self._queue)
            if id(pair) not in self._queued:  # dropped (and counted) by a slice that decided, or queued anew
                continue
            self._queued.discard(id(pair))
            if pair.result is not None or not pair.slices:  # done, or orphaned (and counted) by ``_apply``
                continue
            self._active += 1
            pair.task = asyncio.ensure_future(self._run_pair(pair))
            pair.task.add_done_callback(self._pair_left)
            self._fetch_ahead(self._books.rank.get(pair.key.user_id, 0) + ORIGINALS_AHEAD)

    def _furthest_rank(self) -> int | None:
        """The furthest user (rank in the seeded order) whose pairs may start now; None: any. While a
        sequential slice is undecided, ``AHEAD_OF_FEED`` beyond its next user to feed — else a scorer or a
        judge slower than the model let the calls run on far past the users the test had seen."""
        limits = []
        for result in self._sequential_slices:
            if not self._books.is_done(result.spec.slice_id) and result.users_fed < len(result.users_order):
                limits.append(self._books.rank.get(result.users_order[result.users_fed], 0) + AHEAD_OF_FEED)
        return min(limits) if limits else None

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
        loop = self._thread.loop
        if loop is not None and loop.is_running():
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
            await self._scorer_ready(original.text, other.text)
            result = self._scorer.score(pair, original, other)
        except asyncio.CancelledError:  # counted where it was cancelled: ``_apply`` or ``_shutdown``
            raise
        except Exception as exc:
            # BackendError / CacheMissError end the run; anything else (a scorer that cannot be built, a
            # bug) must surface in the waiting tests rather than hang them.
            self._set_fatal(exc)
            return
        pair.result = result
        pair.perturbation = None  # scored: what changed is in the result; the histories are recomputable
        self.counters.pairs_done += 1
        self._book(self._books.finished_pair, pair)

    async def _scorer_ready(self, e: str, e_prime: str) -> None:
        """Wait, without blocking the loop, until the scorer can score (e, e′): the first pair that needs
        the metrics' Scorer asks the thread in :meth:`wait` to build it (see ``CachedScorer``)."""
        future = self._scorer.readiness(e, e_prime)
        if future is not None:
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
        self.counters.count(explanation)
        return explanation

    def _out_of_time(self) -> None:
        """The time budget ran out: cut every unfinished slice short, in the order they were planned."""
        self._expired = True
        before = self.counters.cancelled
        self._book(self._books.out_of_time)
        self.counters.out_of_time += self.counters.cancelled - before

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
            if self._scorer.requested:
                self._scorer.build_requested()
                continue
            if wait_interruptibly(self._attention, interval):
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


def wait_interruptibly(event: threading.Event, timeout: float) -> bool:
    """``event.wait(timeout)``, interrupted as Ctrl-C means. CPython's ``Condition.wait`` is not
    signal-safe: a KeyboardInterrupt raised just after it released its lock leaves the lock released, and
    ``Event.wait``'s ``with`` then fails with "release unlocked lock" — a RuntimeError in place of the
    interrupt (``robustexplain run`` exited 1 with a traceback instead of 130, once in a few hundred runs)."""
    try:
        return event.wait(timeout)
    except RuntimeError as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            raise exc.__context__ from None
        raise
