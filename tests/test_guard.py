"""The guard's parts on their own: donors, grounding, the INSENSITIVE decision and its records."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import simulation

from pytest_robustexplain.checks import controls as guard
from pytest_robustexplain.data import Catalog, EvalCase, Interaction, Item, UserHistory, default_dataset
from pytest_robustexplain.metrics.mentions import Vocabulary, words
from pytest_robustexplain.perturbations.donors import CANDIDATES, DonorPool
from pytest_robustexplain.report.json_report import read_json, run_to_dict, write_json
from pytest_robustexplain.results import (
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    METRICS,
    PASS,
    SWAP_KIND,
    GateResult,
    PairKey,
    PairResult,
    RunResult,
    Verdict,
)
from pytest_robustexplain.stats import apply_policy


# ------------------------------------------------------------------------------------------- donors
def test_controls_show_another_users_interactions_under_the_users_identity_and_length() -> None:
    dataset = default_dataset()
    pool = DonorPool(dataset.histories, dataset.catalog)
    for case in dataset.cases:
        control = pool.donor_for(case, seed=42)
        assert control is not None and control.donor_id != case.user_id
        donor = dataset.histories[control.donor_id]
        assert case.item_id not in donor.item_ids
        shown = control.history
        # Who the user is stays; what the user did is the donor's most recent interactions.
        assert shown.user_id == case.user_id
        assert [i.timestamp for i in shown] == [i.timestamp for i in case.history][-len(shown):]
        assert shown.item_ids == donor.item_ids[-len(shown):]
        assert [(i.title, i.category, i.rating) for i in shown] == [
            (i.title, i.category, i.rating) for i in donor.interactions[-len(shown):]]
        if control.length_matched:
            assert len(shown) == len(case.history) <= len(donor)
        else:
            assert len(shown) == len(donor) < len(case.history)
    matched = [pool.donor_for(c, seed=42) for c in dataset.cases]
    assert sum(c is not None and c.length_matched for c in matched) >= len(dataset.cases) - 2


def test_donor_choice_is_a_function_of_seed_user_and_item_only() -> None:
    dataset = default_dataset()
    pool = DonorPool(dataset.histories, dataset.catalog)
    together = pool.donors(dataset.cases, seed=42)
    # Alone, in reverse order, from a pool built from the histories in another order: the same donors.
    shuffled = DonorPool(dict(reversed(list(dataset.histories.items()))), dataset.catalog)
    for case in reversed(dataset.cases):
        assert shuffled.donors([case], seed=42) == {(case.user_id, case.item_id):
                                                    together[(case.user_id, case.item_id)]}
    other_seed = pool.donors(dataset.cases, seed=7)
    assert other_seed != together  # the seed draws among the candidates


def test_donors_are_spread_over_many_users_not_one_outlier() -> None:
    dataset = default_dataset()
    donors = DonorPool(dataset.histories, dataset.catalog).donors(dataset.cases, seed=42)
    counts: dict[str, int] = {}
    for control in donors.values():
        counts[control.donor_id] = counts.get(control.donor_id, 0) + 1
    assert len(counts) >= len(dataset.cases) // 2 and max(counts.values()) <= 3


def _reference_donor(profiles: list[Any], case: Any, seed: int) -> str | None:
    """The donor rule as it was written before the pool became arrays (one Python pass over every user a
    case): eligible users, at least as long (else the 2·CANDIDATES longest), ranked by profile distance,
    ties by user id, one of the CANDIDATES most different drawn by seed."""
    from pytest_robustexplain.perturbations import donors as donors_module

    user = next((p for p in profiles if p.user_id == case.user_id), None)
    categories = user.categories if user is not None else {}
    eligible = [p for p in profiles
                if p.user_id != case.user_id and case.item_id not in p.items and len(p.history) > 0]
    if not eligible:
        return None
    long_enough = [p for p in eligible if len(p.history) >= len(case.history)]
    if len(long_enough) < donors_module.CANDIDATES:
        longest = sorted(eligible, key=lambda p: (-len(p.history), p.user_id))
        long_enough = longest[: 2 * donors_module.CANDIDATES]
    ranked = sorted(long_enough, key=lambda p: (-donors_module.profile_distance(categories, p.categories),
                                                p.user_id))[: donors_module.CANDIDATES]
    draw = donors_module._draw(seed, case.user_id, case.item_id, len(ranked))
    return str(ranked[draw].user_id)


@pytest.mark.parametrize(("users", "items", "data_seed"), [(20, 200, 1), (120, 200, 2), (400, 600, 3)])
def test_the_vectorised_donor_choice_is_the_python_rule_exactly(users: int, items: int,
                                                                 data_seed: int) -> None:
    """Planning 6,000 users took 4 minutes, most of it this choice (a Python loop over every user a case);
    as arrays it shortlists, then ranks by the same profile distance: the same donor for every case (also
    checked on 300 MovieLens cases against the rule as it was, identical)."""
    from pytest_robustexplain.data import generate_synthetic

    dataset = generate_synthetic(n_users=users, n_cases=users, n_items=items, seed=data_seed)
    pool = DonorPool(dataset.histories, dataset.catalog)
    profiles = pool._profiles
    for seed in (0, 42):
        for case in dataset.cases:
            control = pool.donor_for(case, seed)
            assert (control.donor_id if control else None) == _reference_donor(profiles, case, seed)


def _history(user: str, categories: list[str], start: int = 0) -> UserHistory:
    return UserHistory(user, tuple(
        Interaction(f"i{start + n}", c, 1_700_000_000 + n, 4.0, f"Title {start + n}")
        for n, c in enumerate(categories)))


def test_donor_differs_in_taste_is_long_enough_and_falls_back_to_the_longest() -> None:
    catalog = Catalog([Item("target", "Target Thing", "Books")])
    histories = {"me": _history("me", ["Books"] * 10)}
    for n in range(2 * CANDIDATES):  # half like me, half not; shorter and longer than me
        histories[f"same{n}"] = _history(f"same{n}", ["Books"] * 30, 100 * (n + 1))
        histories[f"diff{n}"] = _history(f"diff{n}", ["Toys"] * 30, 100 * (n + 50))
        histories[f"short{n}"] = _history(f"short{n}", ["Toys"] * 9, 100 * (n + 80))
    histories["seen"] = UserHistory("seen", (Interaction("target", "Toys", 1, 5.0, "Target Thing"),) * 10)
    pool = DonorPool(histories, catalog)
    case = EvalCase(histories["me"], catalog["target"])
    for seed in range(20):
        control = pool.donor_for(case, seed)
        # Most different taste among the users at least as long as me; cut to my length.
        assert control is not None and control.donor_id.startswith("diff"), control
        assert len(control.history) == 10 and control.length_matched
    # The longest user of all: nobody is long enough, so the longest others are drawn from.
    longest = EvalCase(_history("long", ["Books"] * 40), catalog["target"])
    control = pool.donor_for(longest, 0)
    assert control is not None and not control.length_matched
    assert control.donor_id.startswith("diff") and len(control.history) == 30
    assert [i.timestamp for i in control.history] == [i.timestamp for i in longest.history][-30:]
    lonely = DonorPool({"me": histories["me"]}, catalog)
    assert lonely.donor_for(case, 0) is None  # nobody else: no control, never the user itself


# ---------------------------------------------------------------------------------------- grounding
CATALOG = Catalog([
    Item("1", "Matrix, The (1999)", "Action", {"genres": ["Action", "Sci-Fi"]}),
    Item("2", "Heat (1995)", "Crime", {"genres": ["Crime"]}),
    Item("3", "Toy Story (1995)", "Animation", {"genres": ["Animation", "Children"]}),
    Item("4", "Science Fiction Double Feature (2001)", "Documentary"),
    Item("5", "Lumen Stunt Kite", "Toys", {"brand": "Lumen", "attributes": ["quick-dry", "hand made"]}),
])


def test_matching_is_case_insensitive_longest_first_and_on_word_boundaries() -> None:
    vocab = Vocabulary(CATALOG)
    found = vocab.mentions("You loved THE MATRIX and science fiction double feature; a sci-fi fan.")
    assert found == [words("The Matrix"), words("Science Fiction Double Feature"), words("Sci-Fi")]
    assert vocab.mentions("Heat and heated debates") == []  # one-word titles are too ambiguous
    # A one-word category also matches its plural or singular.
    assert vocab.mentions("crimes and toys") == [words("Crime"), words("Toys")]
    assert vocab.mentions("actionable") == []  # never inside a word


def test_grounding_sorts_history_item_and_unsupported_mentions() -> None:
    vocab = Vocabulary(CATALOG)
    history = UserHistory("u", (Interaction("2", "Crime", 1, 5.0, "Heat (1995)"),
                                Interaction("1", "Action", 2, 4.0, "Matrix, The (1999)")))
    item = CATALOG["3"]
    text = ("Toy Story is a great Animation film for fans of The Matrix and Crime stories, "
            "like the Lumen Stunt Kite.")
    g = vocab.ground(text, history, item)
    assert g.history == ("Crime", "The Matrix")
    assert g.item == ("Animation", "Toy Story")
    assert g.unsupported == ("Lumen Stunt Kite",)  # a catalog title from neither history nor item
    restated = vocab.ground("Toy Story is an Animation film.", history, item)
    assert not restated.references_history and restated.item  # restating the item is no reference


# ------------------------------------------------------------------------------------------- guard
def _pair(user: str, value: float, *, kind: str = "noise_injection", item: str = "i", severity: int = 1,
          original: str = "o", other: str = "p", changes: dict[str, object] | None = None) -> PairResult:
    return PairResult(PairKey("m", user, item, kind, severity if kind != SWAP_KIND else 0, 0),
                      **dict.fromkeys(METRICS, value), combined=value, original=original, perturbed=other,
                      changes=changes or {})


def _swap(user: str, value: float, *, same: bool = False, history: list[str] | None = None) -> PairResult:
    grounding = {"history": history or [], "item": [], "unsupported": []}
    return _pair(user, value, kind=SWAP_KIND, original=f"text {user}", other=f"text {user}" if same else "x",
                 changes={"donor": f"d{user}", "grounding": grounding})


def _evaluate(pert: dict[str, float], swap: dict[str, float], **kw: object) -> object:
    pairs = [_pair(u, v, severity=s) for u, v in pert.items() for s in (1, 3, 5)]
    swaps = [_swap(u, v, same=v == 1.0) for u, v in swap.items()]
    settings = guard.GuardSettings(**kw)  # type: ignore[arg-type]
    return guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=settings)


def test_a_constant_explainer_is_insensitive_on_every_user() -> None:
    users = [f"u{n}" for n in range(8)]
    g = _evaluate(dict.fromkeys(users, 1.0), dict.fromkeys(users, 1.0))
    assert g.outcome == INSENSITIVE  # type: ignore[attr-defined]
    assert g.insensitive_users == tuple(users) and g.identical == 8  # type: ignore[attr-defined]
    assert g.delta.mean == 0.0 and g.sensitivity.mean == 0.0  # type: ignore[attr-defined]
    assert g.share_low == pytest.approx(0.025 ** (1 / 8))  # alpha / 2: one of two rules  # type: ignore[attr-defined]
    assert g.example is not None and g.example.donor_id == "du0"  # type: ignore[attr-defined]
    assert "barely depend on the user's history" in g.message  # type: ignore[attr-defined]


def test_two_of_eight_users_ignored_is_reported_but_not_insensitive() -> None:
    """The SmolLM2 calibration: mean Δ 0.21, but 2 of 8 users got the identical text whatever the history.
    Not confidently above the share's limit (not INSENSITIVE), but above it: the readers' mean S does not
    rescue a PASS (issue 44 — it used to PASS here), one ignored user of eight does not stop one."""
    pert = {f"u{n}": 0.85 for n in range(8)}
    swap = {f"u{n}": (1.0 if n < 2 else 0.55) for n in range(8)}
    g = _evaluate(pert, swap)
    assert g.outcome == INCONCLUSIVE  # type: ignore[attr-defined]
    assert g.insensitive_users == ("u0", "u1") and g.identical == 2  # type: ignore[attr-defined]
    assert g.delta.mean == pytest.approx(0.85 - (2 + 6 * 0.55) / 8)  # type: ignore[attr-defined]
    assert "2 of 8 users get an explanation that barely depends" in g.message  # type: ignore[attr-defined]
    assert "above the limit, though not confidently" in g.message  # type: ignore[attr-defined]
    one = _evaluate(pert, {**swap, "u1": 0.55})
    assert one.outcome == PASS and one.insensitive_users == ("u0",)  # type: ignore[attr-defined]


def test_half_of_twenty_users_ignored_is_insensitive() -> None:
    pert = {f"u{n:02d}": 0.9 for n in range(20)}
    swap = {f"u{n:02d}": (0.98 if n % 2 else 0.5) for n in range(20)}
    assert _evaluate(pert, swap).outcome == INSENSITIVE  # type: ignore[attr-defined]


def test_without_evidence_of_sensitivity_the_guard_is_inconclusive_never_a_pass() -> None:
    """Two users cannot make a share confidently above a lenient limit; S confidently below 0.05 is no
    evidence of dependence either: INCONCLUSIVE with the reason (the run-level mean-S rule that used to
    call this INSENSITIVE broke the share rule's alpha when users bunch just above the threshold)."""
    g = _evaluate({"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 0.99}, max_insensitive_share=0.5)
    assert g.share_low < 0.5 and g.outcome == INCONCLUSIVE  # type: ignore[attr-defined]
    assert "no evidence that the explanations depend on the user's history" in g.message  # type: ignore[attr-defined]
    assert g.sensitivity_low is not None and g.sensitivity_low <= 0.05  # type: ignore[attr-defined]
    # A wide spread on two users: S 0.15 on average, but its lower bound is far below 0.05.
    spread = _evaluate({"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 0.7}, max_insensitive_share=0.5)
    assert spread.outcome == INCONCLUSIVE and spread.users_needed is not None  # type: ignore[attr-defined]
    assert f"about {spread.users_needed} users in total (now 2)" in spread.message  # type: ignore[attr-defined]
    # Eight users who all read the history clearly: shown, PASS.
    clear = _evaluate({f"u{n}": 0.9 for n in range(8)}, {f"u{n}": 0.6 + 0.02 * n for n in range(8)})
    assert clear.outcome == PASS and clear.sensitivity_low > 0.05  # type: ignore[attr-defined]


def test_identical_texts_for_another_users_interactions_are_insensitive_on_their_own() -> None:
    """Half-blind by length: 6 of 20 users get word for word the control's text, the other 14 read the
    history well, so the insensitive share (0.3) is not confidently above 0.2 — the identical share is
    confidently above 0.05."""
    pert = {f"u{n:02d}": 0.9 for n in range(20)}
    swap = {f"u{n:02d}": (1.0 if n < 6 else 0.6) for n in range(20)}
    g = _evaluate(pert, swap)
    assert g.share_low < 0.2 < g.identical_low + 0.2  # type: ignore[attr-defined]
    assert g.identical == 6 and g.identical_low > 0.05 and g.outcome == INSENSITIVE  # type: ignore[attr-defined]
    assert "6 of 20 explanations are word for word the same" in g.message  # type: ignore[attr-defined]
    one = _evaluate(pert, {f"u{n:02d}": (1.0 if n < 1 else 0.6) for n in range(20)})
    assert one.outcome == PASS  # one identical text of 20 is chance, not a property of the model


def test_unstable_output_is_not_insensitive() -> None:
    """A small Δ because the perturbed explanation is already far (ρ_pert below the gate) is a FAIL's
    business, not the guard's."""
    g = _evaluate({f"u{n}": 0.3 for n in range(8)}, {f"u{n}": 0.3 for n in range(8)})
    assert g.outcome == PASS and g.insensitive_users == ()  # type: ignore[attr-defined]


def test_the_noise_floor_sets_sensitivity_and_relative_robustness() -> None:
    pairs = [_pair(u, 0.8) for u in ("a", "b", "c")]
    swaps = [_swap("a", 0.6), _swap("b", 0.5), _swap("c", 0.7)]
    g = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=guard.GuardSettings(), floor=0.9)
    assert g.sensitivity.mean == pytest.approx(0.3)
    assert g.relative is not None and g.relative.mean == pytest.approx((0.8 - 0.6) / (0.9 - 0.6))
    assert g.relative.low < g.relative.mean < g.relative.high
    blind = guard.evaluate(pairs, [_swap(u, 0.88) for u in "abc"], combined_threshold=0.5,
                           settings=guard.GuardSettings(), floor=0.9)
    assert blind.outcome == INSENSITIVE  # resampling moves it as much as another user's history


def test_no_scored_control_is_inconclusive_and_failed_donor_calls_are_left_out() -> None:
    pairs = [_pair("a", 0.9)]
    failed = PairResult(PairKey("m", "a", "i", SWAP_KIND, 0, 0), 0, 0, 0, 0, 0, "o", "", failure="error")
    g = guard.evaluate(pairs, [failed], combined_threshold=0.5, settings=guard.GuardSettings())
    assert g.outcome == INCONCLUSIVE and "none scored" in g.message


def test_grounding_rates_and_the_gate_on_exact_bounds() -> None:
    """Both grounding rules are gated by default, so each decides at alpha / 2."""
    pairs = [_pair(u, 0.9) for u in "abcdefghij"]
    swaps = [_swap("a", 0.5, history=["Crime"]), *(_swap(u, 0.5) for u in "bcdefghij")]
    g = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=guard.GuardSettings())
    assert g.history_reference is not None and g.history_reference.mean == 0.1
    assert g.grounding_outcome == FAIL  # 1 of 10: exact upper bound at alpha / 2 0.45 < 0.5
    assert "10 % of explanations refer to something from the user's history" in guard.grounding_message(g)
    # 1 of 8 was a FAIL when each rule took the whole alpha (upper bound 0.47); at alpha / 2 it is 0.53.
    eight = guard.evaluate(pairs[:8], swaps[:8], combined_threshold=0.5, settings=guard.GuardSettings())
    assert eight.grounding_outcome == PASS
    alone = guard.GuardSettings(max_unsupported_rate=None)  # one rule gated: the whole alpha again
    one_rule = guard.evaluate(pairs[:8], swaps[:8], combined_threshold=0.5, settings=alone)
    assert one_rule.grounding_outcome == FAIL
    # 1 of 4 is not confidently below 0.5 (upper bound 0.75): not enough evidence to fail.
    four = guard.evaluate(pairs[:4], swaps[:4], combined_threshold=0.5, settings=guard.GuardSettings())
    assert four.grounding_outcome == PASS


def test_hedges_lists_and_copies_are_not_history_references() -> None:
    pairs = [_pair(u, 0.9) for u in "abcdefgh"]
    flags = [{"hedging": True}, {"listed": True}, {}, {}]
    swaps = []
    for n, u in enumerate("abcdefgh"):
        s = _swap(u, 0.5, history=["Crime"])
        changes = {**s.changes, "grounding": {**s.changes["grounding"], **flags[n % 4]},
                   "copied": 0.9 if n % 4 == 2 else 0.0}
        swaps.append(replace(s, changes=changes))
    g = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=guard.GuardSettings())
    assert g.history_reference is not None and g.history_reference.mean == 0.25  # only the plain ones
    # A list of the history is a copy too (issue 59): the two copies and the two lists, 4 of 8 — confidently
    # above 0.1; without the lists, 2 of 8 are not.
    assert g.copies == 4 and g.explained == 8 and g.copy_outcome == FAIL
    unlisted = [replace(s, changes={**s.changes, "grounding": {**s.changes["grounding"], "listed": False}})
                for s in swaps]
    two = guard.evaluate(pairs, unlisted, combined_threshold=0.5, settings=guard.GuardSettings())
    assert two.copies == 2 and two.copy_outcome == PASS
    copied = [replace(s, changes={**s.changes, "copied": 1.0}) for s in swaps]
    every = guard.evaluate(pairs, copied, combined_threshold=0.5, settings=guard.GuardSettings())
    assert every.copy_outcome == FAIL
    assert "8 of 8 explanations copy their prompt back" in guard.copy_message(every)


def test_insensitive_fails_whatever_the_inconclusive_policy_and_warn_passes_with_a_warning() -> None:
    g = _evaluate({"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 1.0, "b": 1.0, "c": 1.0})
    for policy in ("fail", "pass", "warn"):
        assert apply_policy(Verdict(INSENSITIVE, details={"guard": g}), policy) == (False, False)
    warned = replace(g, policy="warn")  # type: ignore[type-var]
    assert apply_policy(Verdict(PASS, details={"guard": warned}), "fail") == (True, True)


# ------------------------------------------------------------------------------------------- records
def _run_with_guard() -> RunResult:
    users = [f"u{n}" for n in range(4)]
    g = _evaluate(dict.fromkeys(users, 1.0), dict.fromkeys(users, 1.0))
    pairs = [_pair(u, 1.0, severity=s) for u in users for s in (1, 3)]
    swaps = [_swap(u, 1.0, same=True) for u in users]
    verdict = Verdict(INSENSITIVE, message="INSENSITIVE: …", details={"guard": g})
    return RunResult(signature="sig", seed=1, models=[{"name": "m", "backend": "template"}],
                     settings={"min_combined": 0.5, "guard": "fail"}, pairs=pairs + swaps,
                     gates=[GateResult("t.py::test[overall]", "overall", "m", verdict)])


def test_the_guard_round_trips_through_the_json_report(tmp_path: Path) -> None:
    run = _run_with_guard()
    back = read_json(write_json(run, tmp_path / "r.json"))
    assert back == run
    doc = run_to_dict(run)
    assert doc["aggregates"]["m"]["sensitivity"]["outcome"] == INSENSITIVE
    assert doc["aggregates"]["m"]["delta_by_kind"]["noise_injection"]["mean"] == 0.0


def test_a_version_1_report_is_still_read(tmp_path: Path) -> None:
    doc = run_to_dict(_run_with_guard())
    doc["schema_version"] = 1
    for gate in doc["gates"]:  # a verdict of schema 1: no details, no guard
        gate["verdict"].pop("details")
    doc["pairs"] = [p for p in doc["pairs"] if p["key"]["kind"] != SWAP_KIND]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    old = read_json(path)
    assert old.gates[0].verdict.guard is None and old.model_swaps("m") == []


def test_share_lower_bound_is_the_exact_clopper_pearson_bound() -> None:
    assert guard.share_lower_bound(0, 10, 0.05) == 0.0
    assert guard.share_lower_bound(8, 8, 0.05) == pytest.approx(0.05 ** (1 / 8))
    assert guard.share_lower_bound(1, 1, 0.05) == pytest.approx(0.05)
    assert math.isclose(guard.share_lower_bound(10, 20, 0.05), 0.3020, abs_tol=1e-3)


def test_the_vectorised_rule_is_the_rule_evaluate_applies() -> None:
    """bench_guard.py measures error rates with ``simulation.simulate``: it decides as ``evaluate`` does."""
    import numpy as np

    rng = np.random.default_rng(3)
    settings = guard.GuardSettings()
    for n in (1, 2, 3, 8, 20):
        # Rows from mostly ignored to mostly read, so that every outcome occurs at every size.
        readers = np.linspace(0.3, 1.0, 40)[:, None]  # each row's share of readers
        s = np.where(rng.random((40, n)) < readers, rng.choice([0.2, 0.5], size=(40, n)),
                     rng.choice([0.0, 0.01, 0.04], size=(40, n))) + rng.normal(0, 0.01, (40, n))
        s = np.clip(s, 0, 1)
        p = np.clip(rng.uniform(0.3, 1.0, size=(40, n)), 0, 1)
        s[:, : max(1, n // 4)] = np.where(rng.random((40, max(1, n // 4))) < 0.5, 0.0, s[:, : max(1, n // 4)])
        fast = simulation().simulate(s, p, combined_threshold=0.5, settings=settings)
        for row in range(40):
            users = [f"u{i:02d}" for i in range(n)]
            pairs = [_pair(u, float(p[row, i])) for i, u in enumerate(users)]
            # S exactly 0 stands for a word-for-word identical text in the simulation.
            swaps = [_swap(u, 1.0 - float(s[row, i]), same=s[row, i] == 0.0) for i, u in enumerate(users)]
            slow = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=settings)
            assert slow.outcome == fast[row], (n, row, s[row], p[row])
        assert {INSENSITIVE, PASS} <= set(fast) or n < 3  # both ways, not one outcome throughout


def test_the_vectorised_relative_rule_is_the_rule_evaluate_applies() -> None:
    """bench_guard.py measures false relative FAILs with ``simulation.simulate_relative``."""
    import numpy as np

    rng = np.random.default_rng(5)
    settings = guard.GuardSettings()
    seen = set()
    for n in (2, 3, 8, 20):
        s = np.clip(rng.lognormal(np.log(0.3), 0.5, (30, n)), 0.02, 1.0)
        d = np.clip(rng.choice([0.05, 0.5, 0.8], (30, 1)) * s + rng.normal(0, 0.05, (30, n)), -(1 - s), s)
        fast = simulation().simulate_relative(d, s, settings=settings)
        for row in range(30):
            users = [f"u{i:02d}" for i in range(n)]
            # ρ_swap = 1 − S and ρ_pert = ρ_swap + Δ, one case per user, at temperature 0.
            pairs = [_pair(u, float(1 - s[row, i] + d[row, i])) for i, u in enumerate(users)]
            swaps = [_swap(u, float(1 - s[row, i])) for i, u in enumerate(users)]
            slow = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=settings)
            assert (slow.relative_outcome == FAIL) == fast[row], (n, row)
            seen.add(fast[row])
    assert seen == {True, False}
