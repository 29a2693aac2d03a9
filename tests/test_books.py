"""The sweep's book-keeping is pure: slices finish when their last pair is in, a sequential slice is fed
users strictly in its seeded order and orphans what it no longer needs, a cancellation is named once, and
a slice cut short keeps a prefix of its users — all without an event loop, a thread or a model call."""

from __future__ import annotations

from dataclasses import replace

from pytest_robustexplain.data import default_dataset
from pytest_robustexplain.perturbations import NOISE, SHUFFLE
from pytest_robustexplain.results import CONTROL_KIND, PairResult
from pytest_robustexplain.stats import SequentialGate
from pytest_robustexplain.sweep import PairPlanner, SequentialConfig, SliceResult, SliceSpec
from pytest_robustexplain.sweep.books import Books
from pytest_robustexplain.sweep.records import Pair

DATA = default_dataset()
CASES = DATA.cases[:4]
ORDER = [c.user_id for c in CASES]


def _slice(planner: PairPlanner, books: Books, slice_id: str, *, kinds: tuple[str, ...] = (NOISE, SHUFFLE),
           sequential: SequentialConfig | None = None, cases: tuple = CASES) -> SliceResult:
    spec = SliceSpec(slice_id, "m", cases, kinds, (1, 5), 1, seed=7, sequential=sequential)
    result = SliceResult(spec=spec, users_order=[c.user_id for c in cases])
    if sequential is not None:
        result.gate = SequentialGate(sequential.thresholds, alpha=sequential.alpha,
                                     max_users=sequential.max_users)
    books.add(result, planner.plan(spec, result.users_order).pairs)
    return result


def _finish(books: Books, pair: Pair, combined: float = 0.9) -> list[str]:
    pair.result = PairResult(pair.key, combined, combined, combined, combined, combined, "e", "e'")
    step = books.finished_pair(pair)
    assert step.orphans == []  # finishing a pair orphans nothing unless it decides a sequential slice
    return step.finished


def _pairs(planner: PairPlanner, slice_id: str) -> list[Pair]:
    return [p for p in planner.pairs.values() if slice_id in p.slices]


def test_a_slice_finishes_with_its_last_pair_and_a_shared_pair_counts_for_both() -> None:
    planner, books = PairPlanner(DATA.catalog), Books()
    wide = _slice(planner, books, "wide")
    narrow = _slice(planner, books, "narrow", kinds=(NOISE,))
    assert books.settle("wide").finished == [] and books.settle("narrow").finished == []
    pairs = list(_pairs(planner, "wide"))
    assert books.unfinished("wide") == len(pairs) and books.unfinished("narrow") < len(pairs)
    finished: list[str] = []
    for pair in pairs:
        assert not books.is_done("wide")
        finished += _finish(books, pair)
    assert finished.count("narrow") == 1 and finished[-1] == "wide" and finished.count("wide") == 1
    assert len(wide.scored) == len(pairs) and wide.cancelled == 0
    assert {p.key for p in narrow.scored} == {p.key for p in pairs if p.key.kind == NOISE}


def test_a_slice_planned_after_its_pairs_finished_is_done_when_settled() -> None:
    planner, books = PairPlanner(DATA.catalog), Books()
    _slice(planner, books, "first", kinds=(NOISE,))
    for pair in list(_pairs(planner, "first")):
        _finish(books, pair)
    late = _slice(planner, books, "again", kinds=(NOISE,))
    assert books.unfinished("again") == 0 and not books.is_done("again")
    assert books.settle("again").finished == ["again"] and len(late.scored) == len(late.pairs) > 0
    assert books.settle("again").finished == []  # finished once, however often it is looked at


def test_a_sequential_slice_is_fed_in_seeded_order_and_orphans_only_what_no_one_else_needs() -> None:
    planner, books = PairPlanner(DATA.catalog), Books()
    rule = SequentialConfig({"combined": 0.5}, alpha=0.05, max_users=2)
    seq = _slice(planner, books, "seq", kinds=(NOISE, SHUFFLE), sequential=rule)
    other = _slice(planner, books, "noise", kinds=(NOISE,))
    by_user = {u: [p for p in _pairs(planner, "seq") if p.key.user_id == u] for u in ORDER}
    # The second user finishing first feeds nothing: the gate waits for the first user's turn.
    for pair in by_user[ORDER[1]]:
        _finish(books, pair)
    assert seq.users_fed == 0
    finished, orphans = [], []
    for pair in by_user[ORDER[0]]:
        pair.result = PairResult(pair.key, .9, .9, .9, .9, .9, "e", "e'")
        step = books.finished_pair(pair)
        finished += step.finished
        orphans += step.orphans
    assert seq.users_fed == 2 and seq.gate is not None and seq.gate.decided and finished == ["seq"]
    # Orphans: the users after the decision, of the kind only this slice asked for; noise pairs stay.
    assert orphans and {p.key.kind for p in orphans} == {SHUFFLE}
    assert {p.key.user_id for p in orphans} == set(ORDER[2:])
    assert all(not p.slices for p in orphans) and not books.is_done("noise")
    assert {p.key.user_id for p in seq.scored} == set(ORDER[:2])  # later users' pairs are left out
    assert seq.cancelled == sum(len(by_user[u]) for u in ORDER[2:])
    assert books.cut_short("seq").orphans == []  # a decided slice releases nothing twice
    assert other.out_of_time is None


def test_cut_short_keeps_the_prefix_of_users_whose_pairs_are_all_in() -> None:
    planner, books = PairPlanner(DATA.catalog), Books()
    result = _slice(planner, books, "s", kinds=(NOISE,))
    by_user = {u: [p for p in _pairs(planner, "s") if p.key.user_id == u] for u in ORDER}
    for user in (ORDER[0], ORDER[2]):  # the third is in, the second is not: only the first counts
        for pair in by_user[user]:
            _finish(books, pair)
    step = books.out_of_time()
    assert step.finished == ["s"] and result.out_of_time == (1, 4)
    assert {p.key.user_id for p in result.scored} == {ORDER[0]}
    assert {p.key.user_id for p in step.orphans} == {ORDER[1], ORDER[3]}
    assert books.out_of_time().finished == []  # nothing left to cut


def test_a_user_whose_perturbations_were_all_trivial_is_passed_over_by_the_gate() -> None:
    one = replace(CASES[0], history=replace(CASES[0].history, interactions=CASES[0].history.interactions[:1]))
    planner, books = PairPlanner(DATA.catalog), Books()
    rule = SequentialConfig({"combined": 0.5}, alpha=0.05, max_users=3)
    seq = _slice(planner, books, "seq", kinds=(SHUFFLE,), sequential=rule, cases=(one, *CASES[1:3]))
    assert books.settle("seq").finished == []
    for pair in _pairs(planner, "seq"):
        _finish(books, pair)
    assert seq.users_fed == 3 and books.is_done("seq")
    assert {p.key.user_id for p in seq.scored} == {c.user_id for c in CASES[1:3]}


def test_a_user_whose_control_finishes_last_is_still_fed_to_the_sequential_gate() -> None:
    # A user counts as finished only once its controls are in; when a control is the user's last pair,
    # its arrival must feed the gate too — else the slice finished with the user never seen, and how many
    # users a sequential verdict spoke for depended on which of a user's calls happened to finish last.
    planner, books = PairPlanner(DATA.catalog), Books()
    rule = SequentialConfig({"combined": 0.5}, alpha=0.05, max_users=len(ORDER))
    spec = SliceSpec("seq", "m", CASES, (NOISE,), (1, 5), 1, seed=7, noise_floor=True, sequential=rule)
    seq = SliceResult(spec=spec, users_order=list(ORDER))
    seq.gate = SequentialGate(rule.thresholds, alpha=rule.alpha, max_users=rule.max_users)
    books.add(seq, planner.plan(spec, seq.users_order).pairs)
    pairs = _pairs(planner, "seq")
    controls = [p for p in pairs if p.key.kind == CONTROL_KIND]
    assert controls and len(controls) < len(pairs)
    for pair in [p for p in pairs if p.key.kind != CONTROL_KIND]:
        _finish(books, pair, combined=0.52)  # close to the threshold: the gate stays undecided
    assert seq.users_fed == 0  # every user still waits for its control
    finished: list[str] = []
    for pair in controls:
        finished += _finish(books, pair)
    assert finished == ["seq"] and seq.users_fed == len(ORDER)
    assert {p.key.user_id for p in seq.scored} == set(ORDER)


async def _never_called(pairs: object) -> float | None:
    raise AssertionError("the books never await a probe: the sweep does")


def test_a_user_is_fed_only_once_its_probe_answered_and_the_slice_waits_for_every_probe_asked() -> None:
    """The judge's own test: a user's probe is asked once, as soon as all its pairs are in (whatever its
    turn); the user is fed in the seeded order only after the answer; a slice whose pairs are all in is
    not finished while a probe it asked has not answered — what it reports never depends on the judge's
    speed."""
    from pytest_robustexplain.stats import BELOW, StopRule

    planner, books = PairPlanner(DATA.catalog), Books()
    judged = StopRule("faithfulness", 0.5, BELOW, 0.025, None, probe=_never_called)
    rule = SequentialConfig({"combined": 0.5}, alpha=0.05, stops=(judged,))
    seq = _slice(planner, books, "seq", kinds=(NOISE,), sequential=rule)
    seq.stops = {judged.key: judged.test()}
    by_user = {u: [p for p in _pairs(planner, "seq") if p.key.user_id == u] for u in ORDER}
    asked: list[str] = []
    for user in (ORDER[1], ORDER[0]):
        for pair in by_user[user]:
            pair.result = PairResult(pair.key, 0.9, 0.9, 0.9, 0.9, 0.9, "e", "e'")
            step = books.finished_pair(pair)
            asked += [u for _, u, _ in step.probes]
    assert asked == [ORDER[1], ORDER[0]] and seq.users_fed == 0  # asked when ready, nobody fed yet
    books.probed("seq", ORDER[1], {judged.key: 0.0})
    assert seq.users_fed == 0  # the second user's answer waits for the first user's
    books.probed("seq", ORDER[0], {judged.key: 1.0})
    assert seq.users_fed == 2 and seq.stops[judged.key].n_users == 2
    assert seq.probed == {"faithfulness": {ORDER[0]: 1.0, ORDER[1]: 0.0}}
    try:  # never StopRule without exactly one of value and probe
        StopRule("faithfulness", 0.5, BELOW, 0.025, None)
    except TypeError as exc:
        assert "exactly one of value and probe" in str(exc)
    else:
        raise AssertionError("a rule without a value or a probe was accepted")


def test_a_slice_with_every_pair_in_is_not_finished_while_a_probe_is_out() -> None:
    from pytest_robustexplain.stats import BELOW, StopRule

    planner, books = PairPlanner(DATA.catalog), Books()
    judged = StopRule("faithfulness", 0.0, BELOW, 0.025, None, probe=_never_called)
    seq = _slice(planner, books, "seq", kinds=(NOISE,), cases=CASES[:2],
                 sequential=SequentialConfig({"combined": 0.5}, alpha=0.05, stops=(judged,)))
    seq.stops = {judged.key: judged.test()}
    finished: list[str] = []
    for pair in _pairs(planner, "seq"):
        pair.result = PairResult(pair.key, 0.9, 0.9, 0.9, 0.9, 0.9, "e", "e'")
        finished += books.finished_pair(pair).finished
    assert finished == [] and books.unfinished("seq") == 0 and not books.is_done("seq")
    assert books.probed("seq", ORDER[0], {judged.key: 0.5}).finished == []
    assert books.probed("seq", ORDER[1], {judged.key: None}).finished == ["seq"]
    assert seq.users_fed == 2 and seq.stops[judged.key].n_users == 1  # None: the user gave it nothing
