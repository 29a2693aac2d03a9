"""Scheduling of the sweep: originals fetched ahead, slices finished by a counter (no timing involved)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest

from pytest_robustexplain.data import Item, UserHistory, default_dataset
from pytest_robustexplain.errors import BackendError
from pytest_robustexplain.explainers.base import Explanation, ModelInfo
from pytest_robustexplain.metrics import Scorer
from pytest_robustexplain.perturbations import NOISE, SHUFFLE
from pytest_robustexplain.score_cache import CachedScorer
from pytest_robustexplain.sweep import SliceSpec, Sweep

KINDS = (SHUFFLE, NOISE)


class RecordingExplainer:
    """Answers at once and records, in call order, whose explanation was asked and whether it was an
    original (the case's own history object) or a perturbed one."""

    backend = "recording"
    model = "m"

    def __init__(self, originals: dict[str, UserHistory]) -> None:
        self._originals = originals
        self.calls: list[tuple[str, bool]] = []

    async def preflight(self) -> ModelInfo:
        return ModelInfo(self.model, self.backend)

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        user = history.user_id
        self.calls.append((user, history is self._originals.get(user)))
        return Explanation(f"{item.title} fits {user}'s taste for {len(history)} items.", self.model)

    def request_identity(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> dict[str, Any]:
        return {}

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def scorer() -> Scorer:
    return Scorer()


def run_slices(scorer: Scorer | CachedScorer, specs: list[SliceSpec],
               users: int) -> tuple[RecordingExplainer, Sweep]:
    dataset = default_dataset()
    explainer = RecordingExplainer({c.user_id: c.history for c in dataset.cases[:users]})
    sweep = Sweep({"m": explainer}, dataset.catalog, scorer=scorer, window=4)
    for spec in specs:
        sweep.add_slice(spec)
    sweep.start()
    try:
        for spec in specs:
            sweep.wait(spec.slice_id)
    finally:
        sweep.close()
    return explainer, sweep


def spec(slice_id: str, users: int, kinds: tuple[str, ...] = KINDS) -> SliceSpec:
    cases = default_dataset().cases[:users]
    return SliceSpec(slice_id, "m", cases, kinds, (1, 2, 3, 4, 5), 1, seed=7)


def test_next_users_original_is_requested_before_the_current_users_last_call(scorer: Scorer) -> None:
    explainer, _ = run_slices(scorer, [spec("s", 4)], 4)
    users = [c.user_id for c in default_dataset().cases[:4]]
    for current, following in itertools.pairwise(users):
        last_perturbed = max(i for i, (u, orig) in enumerate(explainer.calls) if u == current and not orig)
        original = explainer.calls.index((following, True))
        assert original < last_perturbed, explainer.calls
    assert sum(orig for _, orig in explainer.calls) == 4  # each original still requested once


def test_every_slice_finishes_with_all_its_pairs_when_slices_share_pairs(scorer: Scorer) -> None:
    specs = [spec("both", 3), spec("first", 3, KINDS[:1]), spec("second", 2, KINDS[1:])]
    explainer, sweep = run_slices(scorer, specs, 3)
    results = {s.slice_id: sweep.finished(s.slice_id) for s in specs}
    both = results["both"]
    assert both is not None and both.cancelled == 0
    for slice_id, kinds in (("first", KINDS[:1]), ("second", KINDS[1:])):
        result = results[slice_id]
        assert result is not None and result.cancelled == 0
        assert {p.key.kind for p in result.pairs} == set(kinds)
    # Shared pairs were one call each: the biggest slice's pairs plus one original per user.
    assert len(explainer.calls) == len(both.pairs) + 3


class BrokenExplainer(RecordingExplainer):
    """Every call is the run-ending error a dead backend raises."""

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        raise BackendError("the backend is gone")


def test_a_slice_added_after_the_run_failed_is_not_waited_for(scorer: Scorer) -> None:
    dataset = default_dataset()
    sweep = Sweep({"m": BrokenExplainer({})}, dataset.catalog, scorer=scorer, window=4)
    sweep.start()
    try:
        sweep.add_slice(spec("first", 2))
        with pytest.raises(BackendError, match="gone"):
            sweep.wait("first")
        sweep.add_slice(spec("same pairs", 2))  # shares every pair with the failed slice
        sweep.run_coroutine(asyncio.sleep(0))  # the loop has registered it

        def never_finishes() -> None:
            raise AssertionError("the second slice would be waited for forever")

        with pytest.raises(BackendError, match="gone"):
            sweep.wait("same pairs", poll=never_finishes, interval=0)
    finally:
        sweep.close()


class CountingExplainer(RecordingExplainer):
    """Holds each call until the test lets it go, and counts how many are in progress at once."""

    def __init__(self, originals: dict[str, UserHistory]) -> None:
        super().__init__(originals)
        self.in_flight = 0
        self.peak = 0

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0)  # let every call the sweep has started be in progress together
            return await super().explain(history, item, seed=seed, repeat=repeat)
        finally:
            self.in_flight -= 1


def test_pairs_in_progress_never_exceed_the_window_and_users_start_in_order(scorer: Scorer) -> None:
    dataset = default_dataset()
    explainer = CountingExplainer({c.user_id: c.history for c in dataset.cases[:5]})
    sweep = Sweep({"m": explainer}, dataset.catalog, scorer=scorer, window=3)
    sweep.add_slice(spec("s", 5))
    sweep.start()
    try:
        result = sweep.wait("s")
    finally:
        sweep.close()
    # A pair makes at most two calls (its user's original, fetched once, and the perturbed one) and one
    # original is fetched ahead: the window of 3 pairs bounds the calls in progress.
    assert 1 < explainer.peak <= 2 * 3 + 1
    users = [c.user_id for c in dataset.cases[:5]]
    first_call = {u: next(i for i, (who, _) in enumerate(explainer.calls) if who == u) for u in users}
    assert sorted(users, key=first_call.__getitem__) == users  # users are started in the seeded order
    assert len(result.pairs) == len({p.key for p in result.pairs}) > 0


def test_a_decided_sequential_slice_cancels_the_calls_no_other_slice_needs(scorer: Scorer) -> None:
    from pytest_robustexplain.sweep import SequentialConfig

    # Every threshold 0: met before any user, so the sequential gate decides PASS on the first user it
    # sees; the fixed slice on the same cases still needs, and gets, all of its pairs.
    sequential = SliceSpec("seq", "m", default_dataset().cases[:6], KINDS, (1, 2, 3, 4, 5), 1, seed=7,
                           sequential=SequentialConfig({"combined": 0.0}))
    fixed = spec("fixed", 2, KINDS[:1])
    explainer, sweep = run_slices(scorer, [sequential, fixed], 6)
    seq, kept = sweep.finished("seq"), sweep.finished("fixed")
    assert seq is not None and kept is not None
    assert seq.cancelled > 0 and sweep.counters.cancelled > 0
    assert len(seq.pairs) + seq.cancelled + seq.trivial == 6 * len(KINDS) * 5
    assert kept.cancelled == 0 and {p.key.kind for p in kept.pairs} == set(KINDS[:1])
    assert len(explainer.calls) < 6 * len(KINDS) * 5 + 6  # fewer calls than the whole plan


def test_cancelled_calls_are_counted_when_the_slice_decides_not_later(scorer: Scorer) -> None:
    """The run's record is written as soon as its last slice finishes, so what a decided slice cancelled
    must be counted by then: every pair left without a result, queued or in flight, exactly once (it was
    counted when a cancellation landed or the window reached a queued pair, and a report could say
    "0 cancelled" of a run that stopped after 7 of 20 users)."""
    from pytest_robustexplain.sweep import SequentialConfig

    dataset = default_dataset()
    explainer = RecordingExplainer({c.user_id: c.history for c in dataset.cases[:6]})
    sweep = Sweep({"m": explainer}, dataset.catalog, scorer=scorer, window=4)
    sweep.add_slice(SliceSpec("seq", "m", dataset.cases[:6], KINDS, (1, 2, 3, 4, 5), 1, seed=7,
                              sequential=SequentialConfig({"combined": 0.0})))
    sweep.start()
    try:
        result = sweep.wait("seq")
        counted = sweep.counters.cancelled  # read at once, while the loop may still be winding down
        left = sum(p.result is None for p in sweep._slice_pairs["seq"])
    finally:
        sweep.close()
    assert result.cancelled > 0 and counted == left > 0
    assert sweep.counters.cancelled == counted  # nothing counted again at shutdown


class StuckExplainer(RecordingExplainer):
    """Answers originals at once; every perturbed call waits until cancelled. ``stuck`` is set once
    ``expected`` perturbed calls are waiting."""

    def __init__(self, originals: dict[str, UserHistory], expected: int) -> None:
        super().__init__(originals)
        self.expected = expected
        self.waiting = 0
        self.stuck = threading.Event()

    async def explain(self, history: UserHistory, item: Item, *, seed: int, repeat: int) -> Explanation:
        if history is self._originals.get(history.user_id):
            return await super().explain(history, item, seed=seed, repeat=repeat)
        self.waiting += 1
        if self.waiting == self.expected:
            self.stuck.set()
        await asyncio.Event().wait()  # never answers: only a cancellation ends it
        raise AssertionError("unreachable")


def test_calls_in_flight_when_the_sweep_closes_are_counted_as_cancelled(scorer: Scorer) -> None:
    """An interrupted run (Ctrl-C, a failed backend) closes the sweep with calls in flight: each is counted
    as cancelled once, at shutdown, so the partial report's call counts add up."""
    dataset = default_dataset()
    window = 4
    explainer = StuckExplainer({c.user_id: c.history for c in dataset.cases[:2]}, expected=window)
    sweep = Sweep({"m": explainer}, dataset.catalog, scorer=scorer, window=window)
    sweep.add_slice(spec("s", 2))
    sweep.start()
    try:
        assert explainer.stuck.wait(30)  # the whole window is waiting on the model
    finally:
        sweep.close()
    assert sweep.counters.cancelled == window and sweep.counters.pairs_done == 0
    assert explainer.waiting == window  # nothing started after the window filled


def test_the_metrics_scorer_is_built_by_the_waiting_thread_never_by_the_sweeps() -> None:
    """TextBlob's lexicon is loaded under warnings.catch_warnings (process-wide, not thread-safe): on the
    sweep's thread it raced pytest's own per-test catch_warnings and could swallow later warnings."""
    built: list[threading.Thread] = []

    def make() -> Scorer:
        built.append(threading.current_thread())
        return Scorer()

    scorer = CachedScorer(make_scorer=make)
    _, sweep = run_slices(scorer, [spec("first", 2), spec("second", 2, KINDS[:1])], 2)
    assert built == [threading.current_thread()]
    first = sweep.finished("first")
    assert first is not None and first.pairs and all(p.combined > 0 for p in first.pairs)


class _InterruptedInsideWait(threading.Event):
    """What CPython's Event.wait raises when Ctrl-C lands just after its Condition released the lock: the
    ``with`` around it releases again, "release unlocked lock", with the KeyboardInterrupt as its context."""

    def wait(self, timeout: float | None = None) -> bool:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("release unlocked lock") from None


def test_ctrl_c_inside_the_wait_is_an_interrupt_not_a_lock_error() -> None:
    """`robustexplain run` given SIGINT exited 1 with that RuntimeError's traceback instead of 130, once in a
    few hundred runs (tests/test_cli.py's signal test, under load)."""
    from pytest_robustexplain.sweep.background import wait_interruptibly

    with pytest.raises(KeyboardInterrupt):
        wait_interruptibly(_InterruptedInsideWait(), 0.01)
    done = threading.Event()
    done.set()
    assert wait_interruptibly(done, 0.01) and not wait_interruptibly(threading.Event(), 0.001)

    class Broken(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            raise RuntimeError("something else")

    with pytest.raises(RuntimeError, match="something else"):
        wait_interruptibly(Broken(), 0.01)
