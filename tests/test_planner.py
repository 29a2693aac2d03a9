"""The pair planner is a pure function of the slices and the catalog: no event loop, explainer or scorer.
The sweep, a dry run's pricing and an unmarked test's perturbation list all use it."""

from __future__ import annotations

from dataclasses import replace

from pytest_robustexplain.data import default_dataset
from pytest_robustexplain.perturbations import DILUTION, NOISE, SHUFFLE, apply_perturbation
from pytest_robustexplain.perturbations.donors import DonorPool
from pytest_robustexplain.results import CONTROL_KIND, SWAP_KIND
from pytest_robustexplain.sweep import PairPlanner, SliceSpec, perturbations_of

DATA = default_dataset()
CASES = DATA.cases[:4]


def _spec(slice_id: str, kinds: tuple[str, ...] = (NOISE, SHUFFLE), **kw: object) -> SliceSpec:
    fields = {"model": "m", "cases": CASES, "kinds": kinds, "severities": (1, 5), "repeats": 2, "seed": 7}
    fields.update(kw)
    return SliceSpec(slice_id=slice_id, **fields)  # type: ignore[arg-type]


def test_a_slice_is_its_cases_times_kinds_times_severities_times_repeats_in_user_order() -> None:
    spec = _spec("a")
    order = [c.user_id for c in reversed(CASES)]
    planned = PairPlanner(DATA.catalog).plan(spec, order)
    assert len(planned.pairs) + planned.trivial == 4 * 2 * 2 * 2
    users = [p.key.user_id for p in planned.pairs]
    assert users == sorted(users, key=order.index)  # user by user, in the order given
    first = [(p.key.kind, p.key.severity, p.key.repeat) for p in planned.pairs if p.key.user_id == order[0]]
    assert first == sorted(first, key=lambda k: ((NOISE, SHUFFLE).index(k[0]), k[1], k[2]))


def test_trivial_perturbations_are_skipped_and_counted_in_every_slice_that_asks() -> None:
    # Shuffling a history of one interaction changes nothing.
    one = replace(CASES[0], history=replace(CASES[0].history, interactions=CASES[0].history.interactions[:1]))
    planner = PairPlanner(DATA.catalog)
    spec = _spec("a", kinds=(SHUFFLE,), cases=(one,))
    assert apply_perturbation(one.history, SHUFFLE, 5, catalog=DATA.catalog, seed=7, item_id=one.item_id,
                              repeat=0).identical
    first = planner.plan(spec, [one.user_id])
    second = planner.plan(replace(spec, slice_id="b"), [one.user_id])
    assert first.pairs == second.pairs == [] and first.trivial == second.trivial == 4


def test_pairs_two_slices_share_are_one_pair_and_controls_are_planned_once_per_case() -> None:
    donors = DonorPool(DATA.histories, DATA.catalog).donors(CASES, 7)
    planner = PairPlanner(DATA.catalog)
    both = planner.plan(_spec("both", noise_floor=True, donors=donors), [c.user_id for c in CASES])
    noise = planner.plan(_spec("noise", kinds=(NOISE,), noise_floor=True, donors=donors),
                         [c.user_id for c in CASES])
    shared = {id(p) for p in both.pairs} & {id(p) for p in noise.pairs}
    assert shared == {id(p) for p in noise.pairs}  # every pair of the narrower slice is the wider one's
    controls = [p for p in both.pairs if p.key.kind == CONTROL_KIND]
    swaps = [p for p in both.pairs if p.key.kind == SWAP_KIND]
    assert len(controls) == 4 * 2 and len(swaps) == 4  # per case: one per repeat, and one cross-user control
    assert all(s.donor is donors[(s.key.user_id, s.key.item_id)] for s in swaps)
    assert len(planner.pairs) == len(both.pairs)  # the second slice added nothing new


def test_another_seed_or_model_is_another_pair() -> None:
    planner = PairPlanner(DATA.catalog)
    a = planner.plan(_spec("a"), [c.user_id for c in CASES])
    b = planner.plan(_spec("b", seed=8), [c.user_id for c in CASES])
    c = planner.plan(_spec("c", model="other"), [c.user_id for c in CASES])
    assert not {id(p) for p in a.pairs} & ({id(p) for p in b.pairs} | {id(p) for p in c.pairs})


def test_the_perturbation_list_is_the_planned_pairs_perturbations() -> None:
    spec = _spec("a", kinds=(NOISE, DILUTION))
    planned = PairPlanner(DATA.catalog).plan(spec, [c.user_id for c in CASES])
    listed = perturbations_of(CASES, spec.kinds, spec.severities, spec.repeats, seed=7, catalog=DATA.catalog)
    assert [p.perturbation for p in planned.pairs] == listed


# --------------------------------------------------------------------------------------- balanced design
def test_the_balanced_design_runs_one_severity_per_kind_rotated_so_every_cell_is_covered() -> None:
    from pytest_robustexplain.engine.plan import max_calls
    from pytest_robustexplain.perturbations import KINDS

    cases = DATA.cases[:10]
    severities = (1, 2, 3, 4, 5)
    spec = _spec("all", kinds=KINDS, cases=cases, severities=severities, repeats=1, design="balanced")
    planner = PairPlanner(DATA.catalog)
    planned = planner.plan(spec, [c.user_id for c in cases])
    cells: dict[tuple[str, int], set[str]] = {}
    for pair in planned.pairs:
        cells.setdefault((pair.key.kind, pair.key.severity), set()).add(pair.key.user_id)
    per_user: dict[tuple[str, str], set[int]] = {}
    for pair in planned.pairs:
        per_user.setdefault((pair.key.user_id, pair.key.kind), set()).add(pair.key.severity)
    assert all(len(s) == 1 for s in per_user.values())  # one severity of each kind per user
    # Every (kind, severity) is run by every fifth user: 10 users, 2 each (none trivial on this data).
    assert planned.trivial == 0 and {k: len(u) for k, u in cells.items()} == {
        (k, s): 2 for k in KINDS for s in severities}
    # Each user meets every severity once across the five kinds (the rotation is shifted per kind).
    for case in cases:
        assert sorted(next(iter(per_user[(case.user_id, k)])) for k in KINDS) == list(severities)
    assert len(planned.pairs) == 10 * 5 and max_calls([spec]) == 10 * 5 + 10  # and the originals
    # A kind's own slice runs the same pairs as the overall slice: the same objects, run once.
    noise = planner.plan(replace(spec, slice_id="noise", kinds=(NOISE,)), [c.user_id for c in cases])
    assert {id(p) for p in noise.pairs} <= {id(p) for p in planned.pairs}
    # The same list an unmarked test gets, and the full design is the default and unchanged.
    listed = perturbations_of(cases, KINDS, severities, 1, seed=7, catalog=DATA.catalog, design="balanced")
    assert [(r.kind, r.severity) for r in listed] == [(p.key.kind, p.key.severity) for p in planned.pairs]
    full = PairPlanner(DATA.catalog).plan(replace(spec, design="full"), [c.user_id for c in cases])
    assert len(full.pairs) + full.trivial == 10 * 5 * 5


def test_the_rotation_does_not_depend_on_the_order_users_are_fed() -> None:
    from pytest_robustexplain.perturbations import KINDS

    cases = DATA.cases[:7]
    spec = _spec("all", kinds=KINDS, cases=cases, severities=(1, 3, 5), repeats=1, design="balanced")
    forward = PairPlanner(DATA.catalog).plan(spec, [c.user_id for c in cases])
    backward = PairPlanner(DATA.catalog).plan(spec, [c.user_id for c in reversed(cases)])
    assert sorted(p.key for p in forward.pairs) == sorted(p.key for p in backward.pairs)
