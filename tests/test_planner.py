"""The pair planner is a pure function of the slices and the catalog: no event loop, explainer or scorer.
The sweep, a dry run's pricing and an unmarked test's perturbation list all use it."""

from __future__ import annotations

from dataclasses import replace

from pytest_robustexplain.data import default_dataset
from pytest_robustexplain.donors import DonorPool
from pytest_robustexplain.perturbations import DILUTION, NOISE, SHUFFLE, apply_perturbation
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
