"""The guard's fixed rules hold their alpha where issue 44's independent simulation broke them: the mean-S
bound assumes no shape, R's bound is Fieller's, shares take users as the unit, grounding's two rules split
alpha, and a failed reply leaves its case on both sides of R. Error rates at every G are in
benchmarks/bench_guard.py (docs/guard.md); these tests pin each rule on cases small enough to check by hand
and on seeded simulations of the shapes that broke the old rules."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from helpers import simulation

from pytest_robustexplain.checks import controls as guard
from pytest_robustexplain.results import FAIL, INCONCLUSIVE, METRICS, PASS, SWAP_KIND, PairKey, PairResult
from pytest_robustexplain.stats import (
    fieller_interval,
    free_lower_bound,
    free_lower_bounds,
    free_users_needed,
)
from pytest_robustexplain.stats.intervals import ks_band, ratio_interval


def _pair(user: str, value: float, *, kind: str = "noise_injection", item: str = "i", severity: int = 1,
          failure: str | None = None, changes: dict[str, object] | None = None, same: bool = False
          ) -> PairResult:
    return PairResult(PairKey("m", user, item, kind, severity if kind != SWAP_KIND else 0, 0),
                      **dict.fromkeys(METRICS, value), combined=value, original=f"text {user}",
                      perturbed=f"text {user}" if same else "x", changes=changes or {}, failure=failure)


def _swap(user: str, value: float, *, item: str = "i", copied: float = 0.0, refers: bool = True,
          same: bool = False) -> PairResult:
    grounding = {"history": ["Crime"] if refers else [], "item": [], "unsupported": []}
    return _pair(user, value, kind=SWAP_KIND, item=item, same=same,
                 changes={"donor": f"d{user}", "grounding": grounding, "copied": copied})


# ------------------------------------------------------------------------------ the distribution-free bound
def test_the_bound_is_andersons_by_hand() -> None:
    """floor + Σ gap_i · max(0, 1 − (i − 1)/n − ε) over the sorted values."""
    eps = ks_band(4, 0.05)
    values = [0.4, 0.1, 0.3, 0.2]
    by_hand = sum(0.1 * max(0.0, 1 - i / 4 - eps) for i in range(4))  # every gap is 0.1 from floor 0
    assert free_lower_bound(values, 0.05, 0.0) == pytest.approx(by_hand)
    assert free_lower_bound(values, 0.05, 0.0) < min(values)  # a few users cannot rule out mass at 0
    assert free_lower_bound([0.3] * 400, 0.05, 0.0) == pytest.approx(0.3 * (1 - ks_band(400, 0.05)))


def test_the_band_is_exact_then_massarts_and_narrows_with_users() -> None:
    from scipy.special import smirnovi

    exact = [ks_band(n, 0.05) for n in (1, 2, 5, 20, 100, 2000)]
    assert exact == sorted(exact, reverse=True) and exact[-1] == pytest.approx(float(smirnovi(2000, 0.05)))
    assert ks_band(2001, 0.05) == pytest.approx(math.sqrt(math.log(20) / 4002))
    assert ks_band(2001, 0.05) > ks_band(10_000, 0.05)
    assert ks_band(2001, 0.05) >= float(smirnovi(2001, 0.05))  # wider than the exact band: still valid


@pytest.mark.parametrize("ignored", [0.15, 0.25])
def test_no_pass_when_a_minority_ignored_makes_the_mean_exactly_the_threshold(ignored: float) -> None:
    """Issue 44's cell: users at 0 and readers bunched so the mean S is 0.05. A plain t bound passed 12-20 %
    of 5-user runs (a sample without the minority looks like a tight cluster above the limit)."""
    rng = np.random.default_rng(44)
    readers = 0.05 / (1 - ignored)
    for n in (3, 5, 10, 20):
        s = np.where(rng.random((4000, n)) < ignored, 0.0, readers * rng.uniform(0.95, 1.05, (4000, n)))
        assert (free_lower_bounds(s, 0.05, 0.0) > 0.05).mean() <= 0.05
        mean, sd = s.mean(axis=1), s.std(axis=1, ddof=1)
        from scipy import stats as sps

        t_low = mean - sps.t.ppf(0.95, n - 1) * sd / math.sqrt(n)
        if n == 5:  # the rule it replaces, on the same runs: well above alpha
            assert (t_low > 0.05).mean() > 0.10


def test_users_needed_is_where_the_same_spread_clears_the_target() -> None:
    values = [0.04, 0.06, 0.07, 0.08, 0.09]
    needed = free_users_needed(values, 0.05, 0.0, 0.05)
    assert needed is not None and needed > len(values)
    assert free_lower_bound(values * needed, 0.05, 0.0) > 0.05 * 0.99  # the same shape, that many users
    assert free_users_needed([0.01, 0.02, 0.03], 0.05, 0.0, 0.05) is None  # mean not above: never


# ------------------------------------------------------------------------------------------- Fieller
def test_fieller_agrees_with_the_delta_method_when_the_denominator_is_sure() -> None:
    rng = np.random.default_rng(1)
    users = [f"u{n:03d}" for n in range(400)]
    den = {u: float(v) for u, v in zip(users, rng.uniform(0.3, 0.5, 400), strict=True)}
    num = {u: 0.6 * den[u] + float(rng.normal(0, 0.05)) for u in users}
    a, b = fieller_interval(num, den, 400, 0.1), ratio_interval(num, den, 400, 0.1)
    assert a is not None and b is not None and a.mean == b.mean
    assert a.low == pytest.approx(b.low, abs=2e-3) and a.high == pytest.approx(b.high, abs=2e-3)


def test_rs_gate_holds_alpha_where_niche_users_skew_its_terms() -> None:
    """Issue 63: a perturbation whose move does not grow with S and 15 % niche users (their control far away)
    skew R's terms right, and Fieller's bound at alpha fails more than alpha of 10-user runs at R = 0.5; the
    gate's, at ``FIELLER_SHARE`` of alpha, fails at most alpha (``simulate_relative`` is the rule
    ``evaluate`` applies: test_guard.py). No clipping, so R is 0.5 exactly: E[ρ_pert] = 0.5 + E[ρ_swap]/2."""
    def beta(mean: float, sd: float, shape: tuple[int, int]) -> np.ndarray:
        k = mean * (1 - mean) / sd**2 - 1
        return rng.beta(mean * k, (1 - mean) * k, shape)

    rng = np.random.default_rng(4)
    shape = (20_000, 10)
    swap = np.where(rng.random(shape) < 0.15, rng.uniform(0.05, 0.35, shape), beta(0.55, 0.12, shape))
    kept = 1 - beta(1 - (0.5 + (0.85 * 0.55 + 0.15 * 0.2) / 2), 0.08, shape)
    settings = guard.GuardSettings()
    at_alpha, gated = (float(np.mean(simulation().simulate_relative(kept - swap, 1 - swap, settings=settings,
                                                                    share=share)))
                       for share in (1.0, guard.FIELLER_SHARE))
    assert at_alpha > settings.alpha >= gated


def test_fieller_is_unbounded_when_the_denominator_could_be_zero() -> None:
    interval = fieller_interval({"a": 0.1, "b": 0.0, "c": 0.05}, {"a": 0.6, "b": 0.01, "c": 0.0}, 3, 0.1)
    assert interval is not None and interval.low == -math.inf and interval.high == math.inf


# ------------------------------------------------------------------------------ shares with users as the unit
def test_one_user_copying_every_case_is_one_user_not_four_cases() -> None:
    """1 user of 8 copies on all four of their cases: 4 of 11 explanations, but one user in eight. Over
    cases the lower bound cleared the 0.1 limit; with users as the unit it does not."""
    swaps = [_swap("a", 0.5, item=f"i{k}", copied=0.95) for k in range(4)]
    swaps += [_swap(u, 0.5) for u in "bcdefgh"]
    pairs = [_pair(s.key.user_id, 0.9, item=s.key.item_id) for s in swaps]
    g = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=guard.GuardSettings())
    assert (g.copies, g.explained) == (4, 11)  # the counts stay counts of explanations
    assert guard.share_lower_bound(4, 11, 0.05) > 0.1  # what the old rule read: a FAIL
    assert g.copy_low == pytest.approx(guard.share_lower_bound(1, 8, 0.05)) and g.copy_outcome == PASS
    every = [replace(s, changes={**s.changes, "copied": 0.95}) for s in swaps]
    copier = guard.evaluate(pairs, every, combined_threshold=0.5, settings=guard.GuardSettings())
    assert copier.copy_outcome == FAIL


def test_a_user_share_is_their_fraction_and_one_case_a_user_is_the_plain_count() -> None:
    assert guard.user_share([("a", True), ("a", False), ("b", True), ("c", False)]) == (1.5, 3)
    assert guard.user_share([("a", True), ("b", False), ("c", True)]) == (2.0, 3)


def test_identical_texts_of_one_user_count_once() -> None:
    swaps = [_swap("a", 1.0, item=f"i{k}", same=True) for k in range(4)] + [_swap(u, 0.6) for u in "bcdefgh"]
    pairs = [_pair(s.key.user_id, 0.9, item=s.key.item_id) for s in swaps]
    g = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=guard.GuardSettings())
    assert g.identical == 4 and g.identical_low == pytest.approx(guard.share_lower_bound(1, 8, 0.025))


# ------------------------------------------------------------------------------------- failed replies
def test_a_failed_perturbed_reply_leaves_its_case_like_a_failed_control() -> None:
    users = [f"u{n}" for n in range(6)]
    swaps = [_swap(u, 0.6) for u in users]
    pairs = [_pair(u, 0.85, severity=s) for u in users for s in (1, 3)]
    clean = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=guard.GuardSettings())
    failed = [*pairs, _pair("u0", 0.0, severity=5, failure="timeout")]
    g = guard.evaluate(failed, swaps, combined_threshold=0.5, settings=guard.GuardSettings())
    assert g.relative == clean.relative and g.perturbed == clean.perturbed  # scored 0 it pulled R down
    assert g.failed == 1 and clean.failed == 0
    assert "1 failed reply was left out of both sides." in guard.relative_message(g)
    assert "left out" not in guard.relative_message(clean)


def test_a_case_whose_every_perturbed_reply_failed_is_not_a_case() -> None:
    swaps = [_swap(u, 0.6) for u in "abcd"]
    pairs = [_pair(u, 0.85) for u in "abc"] + [_pair("d", 0.0, failure="timeout")]
    g = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=guard.GuardSettings())
    assert g.n_cases == 3 and g.n_users == 3 and g.failed == 1


# ----------------------------------------------------------------------------------- the PASS rule
def test_readers_do_not_rescue_a_share_above_its_limit_nor_an_unshown_mean() -> None:
    users = [f"u{n:02d}" for n in range(20)]
    # 5 of 20 ignored (0.25 > 0.2, not confidently): INCONCLUSIVE however strongly the others read.
    swaps = [_swap(u, 1.0 if n < 5 else 0.4) for n, u in enumerate(users)]
    pairs = [_pair(u, 0.9) for u in users]
    g = guard.evaluate(pairs, swaps, combined_threshold=0.5, settings=guard.GuardSettings())
    assert g.sensitivity_low is not None and g.sensitivity_low > 0.05 and g.outcome == INCONCLUSIVE
    assert g.users_needed is None or g.users_needed > 20
    four = [replace(s, combined=0.4) if s.key.user_id == "u04" else s for s in swaps]
    assert guard.evaluate(pairs, four, combined_threshold=0.5, settings=guard.GuardSettings()).outcome == PASS


def test_the_judge_and_polarity_count_a_users_explanations_once() -> None:
    """The faithful rate, the judge's reorder agreement and the misattributed rate take users as the unit
    too: four unfaithful explanations of one user are one user in six, not four cases in nine."""
    from pytest_robustexplain.checks.judge import measure as faithfulness
    from pytest_robustexplain.checks.polarity import measure as polarity
    from pytest_robustexplain.results import JudgedText, MisattributionCase

    texts = [JudgedText("a", f"i{k}", "original", 0, 0, False) for k in range(4)]
    texts += [JudgedText(u, "i0", "original", 0, 0, True) for u in "bcdef"]
    found = faithfulness.summarise(texts, judge="j", scope="originals", min_rate=0.9, alpha=0.05)
    assert (found.faithful, found.judged) == (5, 9)
    assert (found.low, found.high) == guard.user_share_bounds([("a", False), *((u, True) for u in "bcdef")],
                                                              0.05)
    assert found.high == pytest.approx(guard.share_upper_bound(5, 6, 0.05))
    cases = [MisattributionCase("a", f"i{k}", 0, True, ("Horror",)) for k in range(4)]
    cases += [MisattributionCase(u, "i0", 0, True) for u in "bcdef"]
    result = polarity.summarise_polarity(cases, max_rate=0.15, alpha=0.05)
    assert result is not None and (result.misattributed, result.eligible) == (4, 9)
    assert result.low == pytest.approx(guard.share_lower_bound(1, 6, 0.05)) and result.outcome == PASS
    assert guard.share_lower_bound(4, 9, 0.05) > 0.15  # over cases it was a FAIL
