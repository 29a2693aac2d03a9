"""The sweep's book-keeping, pure: which slices a finished pair completes, when a sequential slice is
decided, which pairs a decided slice no longer needs, what a slice cut short by the time budget keeps.

:class:`Books` knows nothing of event loops, threads or model calls: the loop thread (``background.py``)
tells it that a slice was planned or a pair finished, and it answers with a :class:`Step` — the slices
now finished (their waiters wake) and the orphaned pairs (no undecided slice needs them: cancel them).
So the rules whose bugs were timing bugs (a slice done when its last pair is in, a sequential gate fed
in seeded order, a cancellation counted once) are unit-tested without a loop (``tests/test_books.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..results import CONTROL_KIND, FAIL, PASS, SWAP_KIND, PairResult, is_control
from .records import Pair, SliceResult, reweighted

if TYPE_CHECKING:
    from ..metrics.user import MetricMeasure
    from ..stats import StopRule


@dataclass
class Step:
    """What one event changed: slices now finished, pairs that no undecided slice needs any more, and
    users whose pairs are all in and whose probes (``StopRule.probe``: the judge's calls) are to be asked:
    (slice, user, the user's finished pairs)."""

    finished: list[str] = field(default_factory=list)
    orphans: list[Pair] = field(default_factory=list)
    probes: list[tuple[str, str, list[PairResult]]] = field(default_factory=list)

    def extend(self, other: Step) -> Step:
        self.finished += other.finished
        self.orphans += other.orphans
        self.probes += other.probes
        return self


@dataclass
class _Entry:
    result: SliceResult
    pairs: list[Pair]
    by_user: dict[str, list[Pair]]  # user → the slice's pairs for them (controls included)
    # Pairs still without a result: the slice is done when this reaches 0 (a counter, not a rescan of the
    # slice per finished pair, which made a run quadratic in its users).
    unfinished: int
    done: bool = False
    # Users whose probes were asked, and how many of those have not answered: a slice is finished only
    # when every probe asked has answered (or it is decided), so what it reports never depends on timing.
    probing: set[str] = field(default_factory=set)
    probes_pending: int = 0
    probes: tuple[StopRule, ...] = ()  # the slice's tests whose user value is a probe's (``StopRule.probe``)


class Books:
    """Per-slice counts and decisions of one sweep. Each pair's ``slices`` names the undecided slices
    that still need it; a pair whose set empties before it has a result is an orphan."""

    def __init__(self, measure: MetricMeasure | None = None) -> None:
        self._entries: dict[str, _Entry] = {}
        # The user's own metrics of a slice are measured when its users are fed or it finishes: a pair two
        # slices share may be measured by one of them only (each test has its directory's metrics).
        self._measure = measure
        self.rank: dict[str, int] = {}  # user → position in the seeded order (the first slice to say wins)

    # --------------------------------------------------------------------------------- events
    def add(self, result: SliceResult, pairs: list[Pair]) -> None:
        """A slice planned with these pairs (some maybe shared with, or finished for, earlier slices);
        :meth:`settle` accounts for those already finished."""
        slice_id = result.spec.slice_id
        by_user: dict[str, list[Pair]] = {}
        unfinished = 0
        for pair in pairs:
            if slice_id not in pair.slices and pair.result is None:
                unfinished += 1
            pair.slices.add(slice_id)
            # Controls included: a user counts as finished (for the sequential gate) only once its
            # controls are in too, so what a decided slice reports does not depend on timing.
            by_user.setdefault(pair.key.user_id, []).append(pair)
        for index, user in enumerate(result.users_order):
            self.rank.setdefault(user, index)
        stops = result.spec.sequential.stops if result.spec.sequential is not None else ()
        probes = tuple(rule for rule in stops if rule.probe is not None)
        self._entries[slice_id] = _Entry(result, pairs, by_user, unfinished, probes=probes)

    def settle(self, slice_id: str) -> Step:
        """Account for the slice's pairs that already have a result (shared with a slice that ran first)."""
        step = Step()
        for pair in self._entries[slice_id].pairs:
            if pair.result is not None:
                step.extend(self._look(pair))
        return step.extend(self._check_done(slice_id))

    def finished_pair(self, pair: Pair) -> Step:
        """``pair.result`` was just set: one fewer unfinished pair in each slice that wanted it."""
        for slice_id in pair.slices:
            self._entries[slice_id].unfinished -= 1
        return self._look(pair)

    def probed(self, slice_id: str, user: str, values: dict[str, float | None]) -> Step:
        """A user's probes answered (``StopRule.key`` → the user's value): the user may now be fed."""
        entry = self._entries[slice_id]
        entry.probes_pending -= 1
        for key, value in values.items():
            entry.result.probed.setdefault(key, {})[user] = value
        if entry.done:
            return Step()
        step = self._feed_gate(slice_id) if entry.result.gate is not None else Step()
        return step.extend(self._check_done(slice_id))

    def cut_short(self, slice_id: str) -> Step:
        """The time budget ran out: decide the slice on its first users (seeded order) whose pairs are all
        in and orphan the rest.

        A prefix of the order, not every user that happens to be done: which later users finished depends
        on timing, and users are admitted in this order, so the prefix is what the budget bought. A
        sequential slice keeps the users its gate has seen (its fallback then decides)."""
        entry = self._entries[slice_id]
        result = entry.result
        if entry.done:
            return Step()
        if result.gate is not None:
            kept = result.users_fed
        else:
            kept = 0
            for user in result.users_order:
                if any(p.result is None for p in entry.by_user.get(user, [])):
                    break
                kept += 1
        result.out_of_time = (kept, len(result.users_order))
        return self._release(slice_id)

    def out_of_time(self) -> Step:
        """Every slice not finished yet cut short, in the order they were planned."""
        step = Step()
        for slice_id, entry in list(self._entries.items()):
            if not entry.done:
                step.extend(self.cut_short(slice_id))
        return step

    # --------------------------------------------------------------------------------- questions
    def is_done(self, slice_id: str) -> bool:
        return self._entries[slice_id].done

    def unfinished(self, slice_id: str) -> int:
        return self._entries[slice_id].unfinished

    # --------------------------------------------------------------------------------- the rules
    def _look(self, pair: Pair) -> Step:
        step = Step()
        for slice_id in list(pair.slices):
            step.extend(self._ask_probes(slice_id, pair.key.user_id))
            # A control too: it may be the user's last pair in, and a user is fed only once all are.
            if self._entries[slice_id].result.gate is not None:
                step.extend(self._feed_gate(slice_id))
            step.extend(self._check_done(slice_id))
        return step

    def _ask_probes(self, slice_id: str, user: str) -> Step:
        """The user's probes, once, as soon as all of the user's pairs are in (whatever their turn)."""
        entry = self._entries[slice_id]
        if entry.done or user in entry.probing or not entry.probes:
            return Step()
        mine = entry.by_user.get(user, [])
        if not mine or any(p.result is None for p in mine):
            return Step()
        entry.probing.add(user)
        entry.probes_pending += 1
        return Step(probes=[(slice_id, user, [p.result for p in mine if p.result is not None])])

    def _feed_gate(self, slice_id: str) -> Step:
        """Feed finished users to the sequential gate, strictly in the slice's seeded user order.

        Feeding in completion order would let latency (which tracks explanation length, and so the
        scores) choose the order and break the test's validity; a finished user waits for its turn.
        """
        entry = self._entries[slice_id]
        result, gate = entry.result, entry.result.gate
        assert gate is not None
        if entry.done:
            return Step()
        while not _settled(result) and result.users_fed < len(result.users_order):
            name = result.users_order[result.users_fed]
            mine = entry.by_user.get(name, [])
            if any(p.result is None for p in mine):
                return Step()
            if mine and any(name not in result.probed.get(rule.key, {}) for rule in entry.probes):
                return Step()  # fed when its probes answer (:meth:`probed`)
            result.users_fed += 1
            user = [reweighted(r, result.spec.weights)
                    for r in self._measured([p.result for p in mine if p.result is not None], result)]
            done = [r for r in user if not is_control(r.key.kind)]
            if done and not gate.decided:  # a user whose perturbations were all trivial has nothing to say
                gate.update({q: sum(r.metric(q) for r in done) / len(done) for q in gate.thresholds},
                            pairs=len(done))
            self._feed_stops(result, name, done, [r for r in user if r.key.kind == SWAP_KIND])
        return self._release(slice_id) if _settled(result) else Step()

    @staticmethod
    def _feed_stops(result: SliceResult, name: str, done: list[PairResult], swaps: list[PairResult]) -> None:
        """The user's value to each check's own test (same user, same order as the gate); the first test
        to reject ends the slice (``result.stopped``)."""
        from ..stats import Stopped  # lazy: loads numpy

        assert result.spec.sequential is not None
        for rule in result.spec.sequential.stops:
            if rule.value is not None:
                value = rule.value(done, swaps)
            else:
                value = result.probed.get(rule.key, {}).get(name)
            test = result.stops[rule.key]
            if value is not None and test.update(value) and rule.verdict == FAIL and result.stopped is None:
                result.stopped = Stopped(rule.check, result.users_fed, test.wealth, test.level,
                                         len(result.users_order), test.certainly)

    def _release(self, slice_id: str) -> Step:
        """A decided slice no longer needs its outstanding pairs: those no other slice needs are orphans.

        The loop counts them as cancelled before the slice is reported finished: counted later (when a
        task's cancellation landed, or when the window reached a queued pair) the run's record, written as
        soon as the last slice finished, could miss them — the count depended on timing."""
        orphans = []
        for pair in self._entries[slice_id].pairs:
            if pair.result is None and slice_id in pair.slices:
                pair.slices.discard(slice_id)
                if not pair.slices:
                    orphans.append(pair)
        return Step(orphans=orphans).extend(self._finish(slice_id))

    def _measured(self, results: list[PairResult], result: SliceResult) -> list[PairResult]:
        """``results`` with the slice's user metrics (none: as they are)."""
        if not result.spec.metrics or self._measure is None:
            return results
        return self._measure.measure(results, result.spec.metrics)

    def _check_done(self, slice_id: str) -> Step:
        entry = self._entries[slice_id]
        if not entry.done and entry.unfinished == 0 and entry.probes_pending == 0:
            return self._finish(slice_id)
        return Step()

    def _finish(self, slice_id: str) -> Step:
        entry = self._entries[slice_id]
        if entry.done:
            return Step()
        result, planned = entry.result, entry.pairs
        if result.gate is not None or result.out_of_time is not None:
            # A sequential verdict speaks for the users the gate saw, in order; pairs of later users
            # that happened to finish depend on timing and are left out (same result serial or xdist).
            # So does one cut short by the time budget, for the users it measured.
            kept = result.users_fed if result.out_of_time is None else result.out_of_time[0]
            seen = set(result.users_order[:kept])
            planned = [p for p in planned if p.key.user_id in seen]
        done = self._measured([p.result for p in planned if p.result is not None], result)
        result.scored = [r for r in done if not is_control(r.key.kind)]
        result.pairs = [reweighted(r, result.spec.weights) for r in result.scored]
        result.controls = [r for r in done if r.key.kind == CONTROL_KIND]
        result.swaps = [r for r in done if r.key.kind == SWAP_KIND]
        result.cancelled = len(entry.pairs) - len(done)
        if result.gate is not None and not result.gate.decided:
            result.gate.finish()  # every user seen, still undecided: the fixed-sample fallback decides
        entry.done = True
        return Step(finished=[slice_id])


def _settled(result: SliceResult) -> bool:
    """Whether a sequential slice needs no more users: a check's test failed it, ρ's gate failed it, or
    ρ's gate passed it, every check that must show PASS (a PASS rule) has, and every check that passes
    unless shown to fail has seen the users it needs (``SequentialConfig.hold``)."""
    gate, config = result.gate, result.spec.sequential
    if result.stopped is not None or gate is None:
        return True
    if not gate.decided:
        return False
    if gate.outcome != PASS or config is None:
        return True
    return result.users_fed >= config.hold and all(
        result.stops[r.key].rejected for r in config.stops if r.verdict == PASS)
