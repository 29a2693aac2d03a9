"""Statistics tests: hand-checked against direct scipy calls, plus vectorised error-rate simulations."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from pytest_robustexplain import stats as st
from pytest_robustexplain.errors import ConfigError
from pytest_robustexplain.results import (
    CONTROL_KIND,
    FAIL,
    INCONCLUSIVE,
    METRICS,
    PASS,
    GateCheck,
    Interval,
    PairKey,
    PairResult,
    Verdict,
)
from pytest_robustexplain.stats.confident import users_needed
from pytest_robustexplain.stats.intervals import _UNSEEN_FAILURE, _UNSEEN_WEIGHT
from pytest_robustexplain.stats.sequential import _log_wealth

KINDS = ("noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values")
ALL5 = {"combined": 0.5, "semantic": 0.35, "keyword": 0.35, "structural": 0.35, "length": 0.35}


def pair(user: str, value: float = 0.5, *, item: str = "i1", kind: str = "noise_injection", severity: int = 1,
         repeat: int = 0, model: str = "m", failure: str | None = None, history_length: int = 10,
         history_diversity: float | None = None, **scores: float) -> PairResult:
    """A pair whose scores all equal ``value`` unless given one by one."""
    metric = {m: float(scores.get(m, value)) for m in METRICS}
    combined = float(scores.get("combined", value))
    return PairResult(PairKey(model, user, item, kind, severity, repeat), combined=combined,
                      original="o", perturbed="p", failure=failure, history_length=history_length,
                      history_diversity=history_diversity, **metric)


def grid_pairs(user_values: dict[str, Sequence[float]], *, model: str = "m", quantity: str | None = None,
               base: float = 0.5) -> list[PairResult]:
    """Pairs for each user over kinds × severities, in order, with the given per-pair values."""
    out = []
    for user, values in user_values.items():
        for i, v in enumerate(values):
            kind, severity = KINDS[i % 5], 1 + (i // 5) % 5
            repeat = i // 25
            if quantity is None:
                out.append(pair(user, v, kind=kind, severity=severity, repeat=repeat, model=model))
            else:
                out.append(pair(user, base, kind=kind, severity=severity, repeat=repeat, model=model,
                                **{quantity: v}))
    return out


def noisy_users(rng: np.random.Generator, centre: float, between: float, n_users: int,
                pairs_per_user: int = 5) -> dict[str, list[float]]:
    """Per-user pair values: a user level around ``centre`` plus pair noise, clipped to [0, 1]."""
    levels = centre + rng.normal(0, between, n_users)
    return {f"u{i}": list(np.clip(level + rng.normal(0, 0.05, pairs_per_user), 0, 1))
            for i, level in enumerate(levels)}


def cr1(values: Sequence[float], clusters: Sequence[str]) -> tuple[float, float, int]:
    """CR1 cluster-robust SE of a mean, written out longhand."""
    y = np.asarray(values, float)
    mean = y.mean()
    groups = sorted(set(clusters))
    g = len(groups)
    score = [sum(v - mean for v, c in zip(y, clusters, strict=True) if c == k) for k in groups]
    return float(mean), math.sqrt(g / (g - 1) * sum(s * s for s in score) / len(y) ** 2), g


def beta_means(rng: np.random.Generator, mean: float, sd: float, size: tuple[int, ...]) -> np.ndarray:
    k = mean * (1 - mean) / sd**2 - 1
    return rng.beta(mean * k, (1 - mean) * k, size=size)


def at_most_alpha(count: int, runs: int, alpha: float = 0.05) -> bool:
    """Is ``count`` errors in ``runs`` consistent with an error rate ≤ alpha (one-sided, 0.1 % level)?"""
    return count <= sps.binom.ppf(0.999, runs, alpha)


def strict_json(obj: Any) -> str:
    return json.dumps(obj.to_dict(), allow_nan=False)


# --------------------------------------------------------------------------------------------------
# cluster_interval


def with_unseen(x: np.ndarray, end: float, extra: float = 0.0) -> tuple[float, float]:
    """Mean and sd of ``x`` weighted together with the unseen pseudo-user (weight w·√(G/10) + ``extra``) at
    ``end``."""
    w = _UNSEEN_WEIGHT * math.sqrt(x.size / 10) + extra
    values, weights = np.append(x, end), np.append(np.ones(x.size), w)
    mean = float(np.average(values, weights=weights))
    return mean, math.sqrt(float(np.sum(weights * (values - mean) ** 2)) / (x.size + w - 1))


def hall_statistic(x: np.ndarray, mu: float, gamma: float, end: float | None = None,
                   extra: float = 0.0) -> float:
    """Hall's (1992) transformed Studentized mean √n·(θ + γθ²/3 + γ²θ³/27 + γ/(6n)), θ = (x̄ − μ)/s.

    With ``end`` the mean and sd are those of the sample with the unseen pseudo-user at ``end`` (its weight
    raised by ``extra``: the confident rule's allowance for unseen failures).
    """
    n = x.size
    mean, sd = (float(x.mean()), float(x.std(ddof=1))) if end is None else with_unseen(x, end, extra)
    theta = (mean - mu) / sd
    return math.sqrt(n) * (theta + gamma * theta**2 / 3 + gamma**2 * theta**3 / 27 + gamma / (6 * n))


def test_cluster_interval_matches_the_cr1_formula() -> None:
    values = [0.2, 0.4, 0.3, 0.9, 0.7, 0.5, 0.6, 0.1]
    clusters = ["a", "a", "b", "b", "c", "c", "d", "d"]
    mean, se, g = cr1(values, clusters)
    got = st.cluster_interval(values, clusters, confidence=0.9, skew_corrected=False)
    half = sps.t.ppf(0.95, g - 1) * se
    assert got.mean == pytest.approx(mean)
    assert (got.low, got.high) == pytest.approx((mean - half, mean + half))
    assert (got.n, got.n_clusters, got.confidence) == (8, 4, 0.9)


def test_cluster_interval_bounds_invert_halls_statistic_with_an_unseen_user_beyond_each() -> None:
    # One pair per user, so the CR1 SE is the SE of the user means and Hall's statistic applies directly.
    x = np.array([0.95, 0.93, 0.97, 0.90, 0.96, 0.92, 0.94, 0.70, 0.91, 0.98, 0.89, 0.95])
    users = [f"u{i}" for i in range(x.size)]
    got = st.cluster_interval(x.tolist(), users)
    gamma = sps.skew(x)
    assert gamma < -1  # one low user: a long tail below, as per-user means near the top have
    t = sps.t.ppf(0.975, x.size - 1)
    # The lower bound's γ is held above −0.9·√G/t, where Hall's transform is still well behaved; its mean and
    # sd are the sample's with a pseudo-user at 0, the upper bound's with one at 1.
    limit = 0.9 * math.sqrt(x.size) / t
    assert gamma < -limit
    assert hall_statistic(x, got.low, -limit, end=0.0) == pytest.approx(t)
    assert hall_statistic(x, got.high, gamma, end=1.0) == pytest.approx(-t)
    plain = st.cluster_interval(x.tolist(), users, skew_corrected=False)
    # Left skew and users bunched near the top: the lower bound reaches far below the plain t bound (the
    # tail below may be longer than the one low user shows); the upper one moves down.
    assert got.low < plain.low - (plain.mean - plain.low) and got.high < plain.high


def test_users_all_at_one_score_still_get_an_interval() -> None:
    # Ten users all at 1.0 (or all at 0.6) do not show that every user scores so: the pseudo-users at 0 and 1
    # give the bounds a spread where the sample has none.
    users = [f"u{i}" for i in range(10)]
    top = st.cluster_interval([1.0] * 10, users)
    assert top.high == 1.0 and 0.9 < top.low < 0.96
    middle = st.cluster_interval([0.6] * 10, users)
    assert middle.low < 0.6 < middle.high
    mean, sd = with_unseen(np.full(10, 0.6), 0.0)
    assert middle.low == pytest.approx(mean - sps.t.ppf(0.975, 9) * sd / math.sqrt(10))
    bottom = st.cluster_interval([0.0] * 10, users)
    assert bottom.low == 0.0 and bottom.high == pytest.approx(1 - top.low)


def test_t_quantile_is_scipy_stats_t_ppf_and_the_plugin_imports_no_scipy() -> None:
    q = np.concatenate([[0.0, 1.0, 0.5, 0.025, 0.975, 1e-9, 1 - 1e-9], np.linspace(0.001, 0.999, 999)])
    df = np.array([0.5, 1, 2, 3, 4, 5, 9, 19, 39, 99, 1e4, np.inf])
    qq, dd = np.meshgrid(q, df)
    ours, ref = st.t_quantile(qq, dd), sps.t.ppf(qq, dd)
    assert np.array_equal(np.isinf(ours), np.isinf(ref)) and np.array_equal(np.sign(ours), np.sign(ref))
    # scipy.special's stdtrit and scipy.stats' ppf take different roads: near q = ½ they differ by 2e-11
    assert np.allclose(ours, ref, rtol=2e-11, atol=0)
    assert float(st.t_quantile(0.975, 19)) == pytest.approx(sps.t.ppf(0.975, df=19), rel=1e-15)
    code = ("import sys; import pytest_robustexplain.plugin; "
            "assert 'scipy' not in sys.modules, 'scipy imported with the plugin'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cluster_interval_with_one_cluster_or_none_spans_the_range() -> None:
    one = st.cluster_interval([0.3, 0.5], ["u", "u"])
    assert (one.mean, one.low, one.high, one.n_clusters) == (0.4, 0.0, 1.0, 1)
    empty = st.cluster_interval([], [])
    assert math.isnan(empty.mean) and (empty.low, empty.high, empty.n) == (0.0, 1.0, 0)
    with pytest.raises(ValueError, match="3 values but 2 cluster labels"):
        st.cluster_interval([0.1, 0.2, 0.3], ["a", "b"])


# --------------------------------------------------------------------------------------------------
# gate: mean mode


def test_mean_gate_passes_and_fails_on_the_mean_with_cluster_intervals() -> None:
    levels = {"u1": (0.6, 0.3), "u2": (0.5, 0.2), "u3": (0.55, 0.25)}
    pairs = [pair(user, rho, item=f"i{j}", structural=low)
             for user, (rho, low) in levels.items() for j in range(5)]
    verdict = st.gate(pairs, thresholds={"combined": 0.5, "structural": 0.35}, alpha=0.1)
    assert verdict.outcome == FAIL and verdict.mode == "mean"
    combined, structural = verdict.checks
    assert combined.outcome == PASS and structural.outcome == FAIL
    users = [p.key.user_id for p in pairs]
    expected = st.cluster_interval([p.structural for p in pairs], users, confidence=0.9)
    assert structural.interval == expected
    assert verdict.failed_checks == (structural,)
    # The message names the failed threshold with the measured value and its interval.
    assert f"structural {expected.fmt()} is below its threshold 0.35" in verdict.message
    assert verdict.message.startswith(f"FAIL (mean rule): structural {expected.fmt()} is below its "
                                      "threshold 0.35. ")


def test_mean_gate_flags_a_straddling_interval_as_fragile_with_a_flip_probability() -> None:
    rng = np.random.default_rng(3)
    pairs = grid_pairs(noisy_users(rng, 0.51, 0.1, 12))
    verdict = st.gate(pairs, thresholds={"combined": 0.5})
    check = verdict.checks[0]
    assert check.interval.low < 0.5 < check.interval.high
    assert check.fragile
    mean, se, _ = cr1([p.combined for p in pairs], [p.key.user_id for p in pairs])
    assert check.flip_probability == pytest.approx(sps.t.cdf(-abs(mean - 0.5) / se, df=11))  # 12 users
    assert "Fragile: ρ (combined)" in verdict.message
    assert st.apply_policy(verdict, "fail") == (verdict.outcome == PASS, verdict.outcome == PASS)


def test_a_fragile_check_never_says_a_rerun_cannot_flip_it() -> None:
    """3 users, an interval straddling the threshold: the chance is t's, not a normal tail's "≈ 0 %"."""
    pairs = grid_pairs({"u0": [0.6] * 5, "u1": [0.55] * 5, "u2": [0.65] * 5})  # 3.5 SE above 0.5
    verdict = st.gate(pairs, thresholds={"combined": 0.5})
    check = verdict.checks[0]
    assert check.fragile and check.flip_probability is not None and check.flip_probability >= 0.02
    assert "chance ≈ 0 %" not in verdict.message and "(t approximation)" in verdict.message


def test_mean_gate_is_not_fragile_when_the_interval_clears_the_threshold() -> None:
    pairs = grid_pairs({f"u{i}": [0.8 + 0.01 * i] * 5 for i in range(6)})
    check = st.gate(pairs, thresholds={"combined": 0.5}).checks[0]
    assert check.outcome == PASS and not check.fragile
    assert check.flip_probability is not None and check.flip_probability < 1e-6


def test_fragile_flag_appears_exactly_when_the_interval_straddles() -> None:
    rng = np.random.default_rng(11)
    seen = set()
    for _ in range(60):
        n_users = int(rng.integers(6, 16))
        centre = rng.uniform(0.40, 0.60)
        users = {f"u{i}": list(np.clip(centre + rng.normal(0, 0.08) + rng.normal(0, 0.05, 3), 0, 1))
                 for i in range(n_users)}
        check = st.gate(grid_pairs(users), thresholds={"combined": 0.5}).checks[0]
        straddles = check.interval.low < 0.5 < check.interval.high
        assert check.fragile == straddles
        seen.add(straddles)
    assert seen == {True, False}


def test_gate_ignores_controls_and_counts_failures_as_zero() -> None:
    pairs = grid_pairs({"u1": [0.6] * 4, "u2": [0.6] * 4})
    failure = pair("u1", 0.0, kind="category_drift", severity=3, failure="refusal")
    control = pair("u2", 0.0, kind=CONTROL_KIND, severity=0)
    verdict = st.gate([*pairs, failure, control], thresholds={"combined": 0.5})
    assert verdict.checks[0].interval.n == 9
    assert verdict.checks[0].interval.mean == pytest.approx(0.6 * 8 / 9)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"thresholds": {"bleu": 0.3}}, "thresholds\\['bleu'\\]: unknown quantity"),
    ({"thresholds": {"combined": 1.5}}, "thresholds\\['combined'\\]=1.5: must lie in \\[0, 1\\]"),
    ({"thresholds": {"combined": "high"}}, "not a number"),
    ({"thresholds": {}}, "at least one gated quantity"),
    ({"thresholds": {"combined": 0.5}, "mode": "median"}, "mode='median'"),
    ({"thresholds": {"combined": 0.5}, "alpha": 0}, "alpha=0"),
    ({"thresholds": {"combined": 0.5}, "inconclusive_policy": "ignore"}, "inconclusive_policy='ignore'"),
])
def test_gate_rejects_bad_settings_by_name(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        st.gate(grid_pairs({"u1": [0.5], "u2": [0.6]}), **kwargs)


def test_gate_rejects_empty_mixed_or_broken_input() -> None:
    with pytest.raises(ValueError, match="no perturbation pairs"):
        st.gate([pair("u1", kind=CONTROL_KIND, severity=0)], thresholds={"combined": 0.5})
    with pytest.raises(ValueError, match="several models"):
        st.gate([pair("u1", model="a"), pair("u2", model="b")], thresholds={"combined": 0.5})
    with pytest.raises(ValueError, match="field 'combined' is nan"):
        st.gate([pair("u1"), pair("u2", combined=math.nan)], thresholds={"combined": 0.5})


# --------------------------------------------------------------------------------------------------
# gate: confident mode


def test_confident_bounds_allow_an_unseen_user_beyond_each_side() -> None:
    # Symmetric user means: zero measured skewness, so each bound is the t bound of the sample with the
    # pseudo-user at 0 (lower) or 1 (upper), and both lie outside the plain one-sided t bounds.
    pairs = grid_pairs({f"u{i}": [0.50 + 0.03 * i] * 5 for i in range(11)})
    verdict = st.gate(pairs, thresholds={"combined": 0.5, "semantic": 0.5}, mode="confident", alpha=0.05)
    x = 0.50 + 0.03 * np.arange(11)
    interval = verdict.checks[0].interval
    # Five pairs a user: the lower bound's pseudo-user also stands for unseen failures (0.3 / 5² of a user).
    assert hall_statistic(x, interval.low, 0.0, end=0.0, extra=_UNSEEN_FAILURE / 5**2) == pytest.approx(
        sps.t.ppf(0.95, 10))
    assert hall_statistic(x, interval.high, 0.0, end=1.0) == pytest.approx(-sps.t.ppf(1 - 0.05 / 2, 10))
    mean, se, g = cr1([p.combined for p in pairs], [p.key.user_id for p in pairs])
    assert interval.low < mean - sps.t.ppf(0.95, g - 1) * se
    assert interval.high > mean + sps.t.ppf(1 - 0.05 / 2, g - 1) * se
    assert interval.confidence == pytest.approx(1 - 0.05 - 0.025)
    assert verdict.outcome == PASS and "PASS (confident rule)" in verdict.message


def test_confident_lower_bound_inverts_halls_skew_corrected_statistic() -> None:
    means = [0.20, 0.22, 0.25, 0.26, 0.30, 0.31, 0.45, 0.60, 0.21, 0.24, 0.28, 0.23]  # right-skewed
    pairs = grid_pairs({f"u{i}": [m] * 3 for i, m in enumerate(means)})
    low = st.gate(pairs, thresholds={"combined": 0.2}, mode="confident", alpha=0.05).checks[0].interval.low
    x = np.array(means)
    gamma = sps.skew(x)
    assert gamma > 1
    assert hall_statistic(x, low, gamma, end=0.0, extra=_UNSEEN_FAILURE / 3**2) == pytest.approx(
        sps.t.ppf(0.95, x.size - 1))
    plain = x.mean() - sps.t.ppf(0.95, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    assert low > plain  # right skew: the mean is less likely to sit far above the truth


def test_few_users_and_a_large_skewness_keep_the_bounds_near_the_data() -> None:
    # Hall's transform is flat at θ = −3/γ; without a limit on γ five users at the top would give a lower
    # bound far below anything seen. With it the bound stays within 1.9 t half-widths of its own mean
    # (1.8 from the limit, a little more from the γ/(6G) term at five users).
    x = np.array([0.99, 0.98, 0.99, 0.97, 0.60])
    got = st.cluster_interval(x.tolist(), [f"u{i}" for i in range(5)])
    plain = st.cluster_interval(x.tolist(), [f"u{i}" for i in range(5)], skew_corrected=False)
    mean, sd = with_unseen(x, 0.0)
    assert mean - got.low <= 1.9 * sps.t.ppf(0.975, 4) * sd / math.sqrt(5)
    assert x.min() - 0.2 < got.low < plain.low


def test_confident_gate_fails_when_one_quantity_is_confidently_below() -> None:
    pairs = grid_pairs({f"u{i}": [0.2 + 0.01 * i] * 5 for i in range(8)}, quantity="keyword", base=0.8)
    verdict = st.gate(pairs, thresholds=ALL5, mode="confident")
    assert verdict.outcome == FAIL
    assert [c.quantity for c in verdict.failed_checks] == ["keyword"]
    assert "keyword" in verdict.message and "confidently below its threshold 0.35" in verdict.message
    assert verdict.users_needed is None


def test_confident_gate_inconclusive_estimates_users_needed() -> None:
    rng = np.random.default_rng(4)
    pairs = grid_pairs(noisy_users(rng, 0.53, 0.12, 10))
    verdict = st.gate(pairs, thresholds={"combined": 0.5}, mode="confident", inconclusive_policy="warn")
    assert verdict.outcome == INCONCLUSIVE
    mean, se, g = cr1([p.combined for p in pairs], [p.key.user_id for p in pairs])
    assert mean > 0.5
    z = sps.norm.ppf(0.95) + sps.norm.ppf(0.8)
    assert verdict.users_needed == math.ceil(g * (z * se / (mean - 0.5)) ** 2)
    assert verdict.users_needed > g
    assert f"About {verdict.users_needed} users in total (now {g})" in verdict.message
    assert "Inconclusive policy 'warn'" in verdict.message
    assert st.apply_policy(verdict, "warn") == (True, True)


def test_users_needed_heads_for_fail_when_a_quantity_sits_below() -> None:
    mean = np.array([0.6, 0.48, 0.45])
    se = np.array([0.05, 0.02, 0.02])
    thr = np.array([0.5, 0.5, 0.5])
    codes = np.array([0, 0, 0])
    needed = users_needed(mean, se, 10, thr, codes, 0.05)
    z = sps.norm.ppf(1 - 0.05 / 3) + sps.norm.ppf(0.8)
    assert needed == math.ceil(10 * (z * 0.02 / 0.05) ** 2)  # the quickest quantity to fail decides it


def test_apply_policy() -> None:
    interval = Interval(0.5, 0.4, 0.6, 10, 5)
    solid = GateCheck("combined", 0.5, interval, PASS)
    shaky = GateCheck("combined", 0.5, interval, PASS, fragile=True, flip_probability=0.4)
    assert st.apply_policy(Verdict.of(PASS, (solid,)), "fail") == (True, False)
    assert st.apply_policy(Verdict.of(PASS, (shaky,)), "fail") == (True, True)
    assert st.apply_policy(Verdict.of(FAIL, (solid,)), "pass") == (False, False)
    undecided = Verdict.of(INCONCLUSIVE, (solid,), mode="confident")
    assert st.apply_policy(undecided, "fail") == (False, False)
    assert st.apply_policy(undecided, "pass") == (True, False)
    assert st.apply_policy(undecided, "warn") == (True, True)
    with pytest.raises(ConfigError, match="inconclusive_policy='maybe'"):
        st.apply_policy(undecided, "maybe")


def test_gate_confident_equals_the_vectorised_rule_on_per_user_means() -> None:
    rng = np.random.default_rng(8)
    for _ in range(20):
        n_users = int(rng.integers(3, 15))
        x = beta_means(rng, 0.5, 0.1, (1, n_users, 2))
        pairs = []
        for i in range(n_users):
            for j in range(4):  # equal pairs per user, each pair at the user's mean
                pairs.append(pair(f"u{i}", item=f"i{j}", combined=x[0, i, 0], semantic=x[0, i, 1]))
        thresholds = {"combined": 0.5, "semantic": 0.45}
        verdict = st.gate(pairs, thresholds=thresholds, mode="confident")
        code = int(st.simulate_confident(x, thresholds)[0])
        assert verdict.outcome == {1: PASS, -1: FAIL, 0: INCONCLUSIVE}[code]


# --------------------------------------------------------------------------------------------------
# Simulations: error rates at the boundary, savings on clear cases (vectorised, a second or two in all)

RUNS = 4000


@pytest.mark.parametrize("threshold", [0.5, 0.35])
@pytest.mark.parametrize("n_users", [20, 60])
def test_false_pass_and_false_fail_stay_within_alpha_at_the_threshold(threshold: float, n_users: int) -> None:
    rng = np.random.default_rng(int(threshold * 100) + n_users)
    x = beta_means(rng, threshold, 0.1, (RUNS, n_users, 1))  # true mean exactly at the threshold
    thresholds = {"combined": threshold}
    confident = st.simulate_confident(x, thresholds)
    sequential, used = st.simulate_sequential(x, thresholds)
    for codes in (confident, sequential):
        assert at_most_alpha(int((codes == 1).sum()), RUNS)
        assert at_most_alpha(int((codes == -1).sum()), RUNS)
    assert used.max() <= n_users


def test_error_rates_with_five_gated_quantities() -> None:
    rng = np.random.default_rng(21)
    thr = np.array(list(ALL5.values()))
    # All five at their thresholds: the worst case for a false FAIL (any of five may trip).
    at = np.stack([beta_means(rng, t, 0.1, (RUNS, 20)) for t in thr], axis=-1)
    assert at_most_alpha(int((st.simulate_confident(at, ALL5) == -1).sum()), RUNS)
    assert at_most_alpha(int((st.simulate_sequential(at, ALL5)[0] == -1).sum()), RUNS)
    # One at its threshold, the others far above: the worst case for a false PASS.
    lifted = thr + np.array([0.0, 0.3, 0.3, 0.3, 0.3])
    one = np.stack([beta_means(rng, t, 0.1, (RUNS, 20)) for t in lifted], axis=-1)
    assert at_most_alpha(int((st.simulate_confident(one, ALL5) == 1).sum()), RUNS)
    assert at_most_alpha(int((st.simulate_sequential(one, ALL5)[0] == 1).sum()), RUNS)


def test_thresholds_of_zero_take_no_share_of_alpha() -> None:
    # min_metric = 0 gates nothing: every score meets it. The four metrics must not split the FAIL alpha,
    # so the verdicts are exactly those of gating ρ alone (today's FAIL power, not half of it).
    rng = np.random.default_rng(12)
    combined = beta_means(rng, 0.45, 0.1, (RUNS, 20))
    metrics = rng.uniform(0, 1, (RUNS, 20, 4))
    x = np.concatenate([combined[..., None], metrics], axis=-1)
    zero = {"combined": 0.5, **{m: 0.0 for m in METRICS}}
    alone = {"combined": 0.5}
    assert np.array_equal(st.simulate_confident(x, zero), st.simulate_confident(x[..., :1], alone))
    seq_zero, used_zero = st.simulate_sequential(x, zero)
    seq_alone, used_alone = st.simulate_sequential(x[..., :1], alone)
    assert np.array_equal(seq_zero, seq_alone) and np.array_equal(used_zero, used_alone)
    # And the alpha split does bite when the metrics are gated: FAIL power drops.
    gated = {"combined": 0.5, **{m: 1e-9 for m in METRICS}}
    assert (st.simulate_confident(x, gated) == -1).sum() < (st.simulate_confident(x, zero) == -1).sum()


def test_the_confident_message_names_only_the_quantities_that_can_fail() -> None:
    pairs = grid_pairs({f"u{i}": [0.2 + 0.01 * i] * 5 for i in range(8)})
    thresholds = {"combined": 0.5, **{m: 0.0 for m in METRICS}}
    verdict = st.gate(pairs, thresholds=thresholds, mode="confident")
    assert verdict.outcome == FAIL
    assert "alpha split across the 1 quantity that can fail" in verdict.message
    assert verdict.checks[0].interval.confidence == pytest.approx(0.9)


@pytest.mark.parametrize(("threshold", "truth", "max_share"), [
    (0.5, 0.8, 0.55), (0.5, 0.2, 0.55), (0.35, 0.65, 0.45),
])
def test_sequential_stops_early_on_clear_cases_with_the_fixed_verdict(threshold: float, truth: float,
                                                                      max_share: float) -> None:
    rng = np.random.default_rng(5)
    x = beta_means(rng, truth, 0.1, (2000, 20, 1))  # the fixed protocol: 20 users
    thresholds = {"combined": threshold}
    fixed = st.simulate_confident(x, thresholds)
    sequential, used = st.simulate_sequential(x, thresholds)
    assert np.all(fixed == (1 if truth > threshold else -1))
    assert np.all(sequential == fixed)
    assert used.mean() / 20 <= max_share


@pytest.mark.parametrize("truth", [0.6, 0.4])
def test_sequential_agrees_with_the_fixed_protocol_at_a_gap_of_a_tenth(truth: float) -> None:
    rng = np.random.default_rng(6)
    x = beta_means(rng, truth, 0.1, (2000, 20, 1))
    fixed = st.simulate_confident(x, {"combined": 0.5})
    sequential, _ = st.simulate_sequential(x, {"combined": 0.5})
    # The fixed rule decides 99 % of these runs; the sequential test's fallback has half the alpha and
    # leaves about 3 % more undecided (97–98 % agreement with these seeds).
    assert np.mean(sequential == fixed) >= 0.96
    # Never the opposite verdict where both decided.
    assert not np.any((sequential != 0) & (sequential == -fixed))


def test_no_bounded_betting_test_can_stop_by_seven_users_at_a_gap_of_a_tenth() -> None:
    # Observations are only known to lie in [0, 1]: a bet must survive an observation of 0, so a user at
    # threshold + gap multiplies wealth by at most 1 + gap/threshold. Even the best bet on the kindest
    # data cannot reach 1/0.025 within 7 users (35 % of 20) near a 0.5 threshold.
    threshold, gap, users = 0.5, 0.1, 7
    assert (1 + gap / threshold) ** users < 1 / 0.025
    x = np.full((1, users, 1), threshold + gap)
    log_wealth = _log_wealth(x, np.array([threshold]), +1)
    assert np.all(np.diff(log_wealth[0, :, 0]) <= math.log(1 + gap / threshold) + 1e-12)
    assert log_wealth[0, -1, 0] < math.log(1 / 0.025)


# --------------------------------------------------------------------------------------------------
# SequentialGate


def test_wealth_follows_the_agrapa_bets_by_hand() -> None:
    gate = st.SequentialGate({"combined": 0.4})
    assert gate.wealth == {"combined": {"above": 1.0, "below": 1.0}}
    gate.update({"combined": 0.7, "semantic": 0.1})  # extra quantities are ignored
    # First bet: the prior (mean 0.5, var 0.25) gives λ = 0.1/(0.25+0.01) on "above" and nothing on
    # "below", but both open with at least half the cap (0.95) of the largest safe bet (1/0.4, 1/0.6).
    lam1 = max(0.1 / 0.26, 0.5 * 0.95 / 0.4)
    assert gate.wealth["combined"]["above"] == pytest.approx(1 + lam1 * 0.3)
    assert gate.wealth["combined"]["below"] == pytest.approx(1 - 0.5 * 0.95 / 0.6 * 0.3)
    gate.update({"combined": 0.6})
    mu1 = (0.5 * 0.25 + 0.7) / 1.25
    var1 = (0.25 * 0.25 + (0.7 - mu1) ** 2) / 1.25
    lam2 = min((mu1 - 0.4) / (var1 + (mu1 - 0.4) ** 2), 0.95 / 0.4)
    assert gate.wealth["combined"]["above"] == pytest.approx((1 + lam1 * 0.3) * (1 + lam2 * 0.2))
    assert gate.n_users == 2 and not gate.decided and gate.outcome is None


def test_sequential_gate_matches_the_vectorised_simulation() -> None:
    rng = np.random.default_rng(9)
    thresholds = {"combined": 0.5, "structural": 0.35}
    for truth in (0.3, 0.5, 0.52, 0.75):
        x = np.stack([beta_means(rng, truth, 0.12, (25, 15)), beta_means(rng, truth - 0.1, 0.12, (25, 15))],
                     axis=-1)
        codes, used = st.simulate_sequential(x, thresholds)
        for run in range(x.shape[0]):
            gate = st.SequentialGate(thresholds, max_users=15)
            for user in range(15):
                if gate.decided:
                    break
                gate.update({"combined": x[run, user, 0], "structural": x[run, user, 1]})
            assert gate.decided
            assert gate.outcome == {1: PASS, -1: FAIL, 0: INCONCLUSIVE}[int(codes[run])]
            assert gate.n_users == used[run]


def test_sequential_gate_decides_early_and_reports_a_verdict() -> None:
    gate = st.SequentialGate({"combined": 0.5, "length": 0.35}, max_users=20)
    pairs: list[PairResult] = []
    rng = np.random.default_rng(2)
    for i in range(20):
        if gate.decided:
            break
        value = float(np.clip(rng.normal(0.85, 0.05), 0, 1))
        user_pairs = [pair(f"u{i}", value, item=f"i{j}") for j in range(3)]
        pairs += user_pairs
        gate.update({"combined": value, "length": value})
    assert gate.decided and gate.outcome == PASS and gate.decided_by == "sequential"
    assert gate.n_users < 20
    assert all(w["above"] >= gate.rejection_levels["above"] or r["above"]
               for w, r in zip(gate.wealth.values(), gate.rejected.values(), strict=True))
    verdict = gate.verdict(pairs)
    assert verdict.mode == "sequential" and verdict.outcome == PASS
    assert verdict.checks[0].interval == st.cluster_interval([p.combined for p in pairs],
                                                             [p.key.user_id for p in pairs])
    assert f"decided after {gate.n_users} of at most 20 users" in verdict.message
    with pytest.raises(RuntimeError, match="already decided"):
        gate.update({"combined": 0.9, "length": 0.9})


def test_sequential_gate_falls_back_at_the_cap_and_on_finish() -> None:
    values = [0.55, 0.58, 0.54, 0.57, 0.56, 0.59, 0.55, 0.57]
    capped = st.SequentialGate({"combined": 0.5}, max_users=len(values))
    for v in values:
        capped.update({"combined": v})
    assert capped.decided and capped.decided_by == "fallback"
    x = np.array(values)
    # Fallback: confident rule on the user means at alpha·share = 0.025.
    expected = st.simulate_confident(x[None, :, None], {"combined": 0.5}, alpha=0.025)[0]
    assert capped.outcome == {1: PASS, -1: FAIL, 0: INCONCLUSIVE}[int(expected)] == PASS

    early = st.SequentialGate({"combined": 0.5})
    for v in (0.52, 0.48, 0.51):
        early.update({"combined": v})
    assert not early.decided
    pending = early.verdict([pair("u0", 0.52), pair("u1", 0.48), pair("u2", 0.51)])
    assert pending.outcome == INCONCLUSIVE and "no decision yet" in pending.message
    early.finish()
    assert early.decided and early.outcome == INCONCLUSIVE
    verdict = early.verdict([pair("u0", 0.52), pair("u1", 0.48), pair("u2", 0.51)])
    assert verdict.outcome == INCONCLUSIVE and verdict.users_needed is not None


def test_sequential_gate_rejects_bad_input() -> None:
    with pytest.raises(ConfigError, match="max_users=0"):
        st.SequentialGate({"combined": 0.5}, max_users=0)
    with pytest.raises(ConfigError, match="fallback_share=1"):
        st.SequentialGate({"combined": 0.5}, fallback_share=1)
    gate = st.SequentialGate({"combined": 0.5, "keyword": 0.3})
    with pytest.raises(ValueError, match="missing gated quantity 'keyword'"):
        gate.update({"combined": 0.5})
    with pytest.raises(ValueError, match=r"user_means\['keyword'\]=1.2"):
        gate.update({"combined": 0.5, "keyword": 1.2})
    assert gate.n_users == 0


def test_user_order_is_seeded_stable_and_independent_of_input_order() -> None:
    users = [f"user{i}" for i in range(30)]
    order = st.user_order(users, 42)
    assert sorted(order) == sorted(users) and order != sorted(users)
    assert st.user_order(reversed(users), 42) == order
    assert st.user_order(users, 43) != order
    code = ("from pytest_robustexplain.stats import user_order; "
            f"print(','.join(user_order({users!r}, 42)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().split(",") == order
    with pytest.raises(ValueError, match="duplicate user ids user1"):
        st.user_order(["user1", "user1"], 1)
    with pytest.raises(ConfigError, match="seed=-1"):
        st.user_order(users, -1)


# --------------------------------------------------------------------------------------------------
# Noise floor


def test_noise_floor_uses_control_pairs_only() -> None:
    pairs = [pair("u1", 0.5), pair("u1", 0.9, kind=CONTROL_KIND, severity=0),
             pair("u2", 0.8, kind=CONTROL_KIND, severity=0), pair("u3", 0.95, kind=CONTROL_KIND, severity=0)]
    floor = st.noise_floor(pairs)
    assert floor == st.cluster_interval([0.9, 0.8, 0.95], ["u1", "u2", "u3"])
    assert st.noise_floor(pairs[:1]) is None


# --------------------------------------------------------------------------------------------------
# Baseline regression


def _runs(shift: float, seed: int = 1) -> tuple[list[PairResult], list[PairResult]]:
    rng = np.random.default_rng(seed)
    base, cur = [], []
    for u in range(8):
        level = rng.uniform(0.4, 0.6)
        for j in range(5):
            b = float(np.clip(level + rng.normal(0, 0.05), 0, 1))
            c = float(np.clip(b + shift + rng.normal(0, 0.03), 0, 1))
            base.append(pair(f"u{u}", b, kind=KINDS[j], model="old"))
            cur.append(pair(f"u{u}", c, kind=KINDS[j], model="new"))
    return base, cur


def test_non_inferiority_matches_a_one_sample_t_test_on_user_differences() -> None:
    base, cur = _runs(shift=-0.01)
    base.append(pair("u0", 0.5, kind="category_drift", severity=4, model="old"))  # unmatched
    result = st.non_inferiority(base, cur, margin=0.05, alpha=0.05, quantities=("combined", "keyword"))
    d = []
    for u in range(8):
        b = np.mean([p.combined for p in base if p.key.user_id == f"u{u}" and p.key.severity == 1])
        c = np.mean([p.combined for p in cur if p.key.user_id == f"u{u}"])
        d.append(c - b)
    expected = sps.ttest_1samp(np.array(d) + 0.05, 0.0, alternative="greater").pvalue
    row = result.rows[0]
    assert row.p_value == pytest.approx(expected)
    assert row.diff.mean == pytest.approx(np.mean(d))
    assert row.diff.confidence == pytest.approx(0.9)
    assert row.passed == (expected < 0.05) and row.passed == (row.diff.low > -0.05)
    assert result.passed and result.n_matched == 40
    assert result.unmatched_baseline == (("u0", "i1", "category_drift", 4, 0),)
    assert result.unmatched_current == ()
    assert "1 only in the baseline" in result.message
    data = json.loads(strict_json(result))
    assert data["n_unmatched_baseline"] == 1


def test_non_inferiority_flags_a_regression_and_passes_identical_runs() -> None:
    base, cur = _runs(shift=-0.1)
    worse = st.non_inferiority(base, cur, margin=0.02)
    assert not worse.passed and len(worse.failed_rows) == len(worse.rows) == 5
    # A 0.1 drop, confidently beyond the 0.02 margin: said as a regression, not a "possible" one.
    # Said as the drop with its interval (issue 43: "changed by −0.445 … (p = 1.000)" read as "no change").
    assert worse.message.startswith("Regression beyond the margin 0.02: ρ (combined) dropped by 0.10")
    assert "shown to exceed 0.02" in worse.message and "p = " not in worse.message
    shaky = st.non_inferiority(*_runs(shift=-0.005), margin=0.02)  # within the noise: not shown either way
    assert shaky.passed or shaky.message.startswith("Possible regression")
    unsure = st.non_inferiority(*_runs(shift=-0.02), margin=0.02)  # at the margin itself: never shown
    assert not unsure.passed
    assert unsure.message.startswith("Possible regression: ρ (combined) changed by -0.0")
    assert "not shown to be within −0.02 of the baseline (one-sided p " in unsure.message
    copy = [pair(p.key.user_id, p.combined, kind=p.key.kind, model="new") for p in base]
    same = st.non_inferiority(base, copy, margin=0.01)
    assert same.passed and all(r.p_value == 0.0 for r in same.rows)


def _terms(rng: np.random.Generator, users: int, relative: float) -> dict[str, tuple[float, float]]:
    """Per-user (ρ_pert − ρ_swap, 1 − ρ_swap) whose ratio of sums is about ``relative``."""
    out = {}
    for u in range(users):
        swap = float(rng.uniform(0.4, 0.8))
        moved = (1 - swap) * float(np.clip(relative + rng.normal(0, 0.1), -1, 1))
        out[f"u{u}"] = (moved, 1 - swap)
    return out


def test_relative_robustness_beside_the_baseline_is_reported_and_never_decides() -> None:
    """R's change is the mean of the users' linearised R (exactly R_current − R_baseline), its interval
    the t interval of those values; a collapse of R fails nothing: the margin is in ρ, not in R."""
    base, cur = _runs(shift=0.0)
    rng = np.random.default_rng(3)
    before, after = _terms(rng, 8, 0.8), _terms(rng, 8, 0.1)
    result = st.non_inferiority(base, cur, margin=0.05, relative=(before, after))
    row = result.rows[-1]
    assert row.quantity == "relative" and not row.gated and not row.passed
    r_before = sum(n for n, _ in before.values()) / sum(d for _, d in before.values())
    r_after = sum(n for n, _ in after.values()) / sum(d for _, d in after.values())
    assert (row.before, row.after) == (pytest.approx(r_before), pytest.approx(r_after))
    assert row.diff.mean == pytest.approx(r_after - r_before)
    assert row.diff.high < -0.5  # confidently far lower ...
    assert result.passed and row not in result.failed_rows  # ... and still reported only
    assert f"Relative robustness R {r_before:.3f} → {r_after:.3f}" in result.message
    assert "reported, not gated" in result.message
    # The standard error is the guard's: the same linearisation as ratio_interval.
    alone = st.ratio_interval({u: n for u, (n, _) in after.items()}, {u: d for u, (_, d) in after.items()},
                              8, 0.1)
    paired = st.non_inferiority(base, cur, margin=0.05,
                                relative=(after, {u: (n + 0.0, d) for u, (n, d) in after.items()}))
    assert paired.rows[-1].diff.mean == pytest.approx(0.0, abs=1e-12) and paired.rows[-1].passed
    assert alone is not None and alone.mean == pytest.approx(r_after)
    # One user in common, or R undefined on a side: no row, the scores alone.
    assert len(st.non_inferiority(base, cur, margin=0.05, relative=({"u0": (0.1, 0.5)}, {"u0": (0.1, 0.5)}))
               .rows) == 5
    flat = {u: (0.0, 0.0) for u in after}
    assert len(st.non_inferiority(base, cur, margin=0.05, relative=(flat, after)).rows) == 5


def test_non_inferiority_rejects_bad_input() -> None:
    base, cur = _runs(shift=0.0)
    with pytest.raises(ConfigError, match=r"margin=-0\.1"):
        st.non_inferiority(base, cur, margin=-0.1)
    with pytest.raises(ConfigError, match="unknown quantity 'bleu'"):
        st.non_inferiority(base, cur, margin=0.1, quantities=("bleu",))
    with pytest.raises(ValueError, match="share no pairs"):
        st.non_inferiority(base, [pair("zz", model="new")], margin=0.1)
    with pytest.raises(ValueError, match="baseline: two pairs with the same key"):
        st.non_inferiority([*base, base[0]], cur, margin=0.1)


# --------------------------------------------------------------------------------------------------
# Model comparison


def test_holm_by_hand() -> None:
    assert st.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert st.holm([0.5, None, 0.01]) == [pytest.approx(0.5), None, pytest.approx(0.02)]


def _two_models(gain: float, seed: int = 3) -> tuple[list[PairResult], list[PairResult]]:
    rng = np.random.default_rng(seed)
    a, b = [], []
    for u in range(15):
        level = rng.uniform(0.35, 0.55)
        for j in range(5):
            scores_a = {m: float(np.clip(level + rng.normal(0, 0.05), 0, 1)) for m in METRICS}
            shift = {m: gain * 2 if m == "structural" else gain for m in METRICS}
            scores_b = {m: float(np.clip(v + shift[m] + rng.normal(0, 0.02), 0, 1))
                        for m, v in scores_a.items()}
            a.append(pair(f"u{u}", combined=float(np.mean(list(scores_a.values()))), kind=KINDS[j], model="a",
                          **scores_a))
            b.append(pair(f"u{u}", combined=float(np.mean(list(scores_b.values()))), kind=KINDS[j], model="b",
                          **scores_b))
    return a, b


def test_compare_models_matches_paired_t_tests_on_user_means() -> None:
    a, b = _two_models(gain=0.04)
    comp = st.compare_models(a, b, names=("small", "large"))
    assert [r.label for r in comp.rows] == ["Overall ρ", "Semantic", "Keyword", "Structural", "Length"]
    ua = np.array([np.mean([p.structural for p in a if p.key.user_id == f"u{u}"]) for u in range(15)])
    ub = np.array([np.mean([p.structural for p in b if p.key.user_id == f"u{u}"]) for u in range(15)])
    row = comp.rows[3]
    assert row.p_value == pytest.approx(sps.ttest_rel(ub, ua).pvalue)
    assert row.d_z == pytest.approx(np.mean(ub - ua) / np.std(ub - ua, ddof=1))
    mean_a = np.mean([p.structural for p in a])
    assert row.delta_pct == pytest.approx((np.mean([p.structural for p in b]) - mean_a) / mean_a * 100)
    assert row.p_holm == pytest.approx(st.holm([r.p_value for r in comp.rows])[3])
    assert all(r.significant for r in comp.rows)
    from pytest_robustexplain.report.comparison import conclusion

    assert conclusion(comp).startswith("large is more robust: overall ρ of large +")
    assert "largest metric difference: structural of large +" in conclusion(comp)
    json.loads(strict_json(comp))


def test_compare_models_on_pairs_reproduces_the_papers_analysis() -> None:
    a, b = _two_models(gain=0.04)
    comp = st.compare_models(a, b, unit="pair")
    va, vb = np.array([p.combined for p in a]), np.array([p.combined for p in b])
    assert comp.rows[0].p_value == pytest.approx(sps.ttest_rel(vb, va).pvalue)
    assert comp.rows[0].n_units == 75 and comp.unit == "pair"


def test_compare_models_says_no_significant_difference() -> None:
    a, b = _two_models(gain=0.0, seed=12)
    comp = st.compare_models(a, b, names=("x", "y"))
    assert not any(r.significant for r in comp.rows)
    from pytest_robustexplain.report.comparison import conclusion

    assert conclusion(comp).startswith("No significant difference between x and y")
    same = st.compare_models(a, [pair(p.key.user_id, kind=p.key.kind, model="b", combined=p.combined,
                                      **{m: p.metric(m) for m in METRICS}) for p in a])
    assert all(r.p_value == 1.0 and r.d_z == 0.0 for r in same.rows)
    with pytest.raises(ConfigError, match="unit='cluster'"):
        st.compare_models(a, b, unit="cluster")


# --------------------------------------------------------------------------------------------------
# The paper's analyses


def test_severity_degradation_relative_change_from_l1_to_l5() -> None:
    pairs = [pair("u1", 0.533, severity=1), pair("u2", 0.533, severity=1), pair("u1", 0.524, severity=5),
             pair("u1", 0.1, severity=3), pair("u1", 0.0, kind=CONTROL_KIND, severity=5)]
    assert st.severity_degradation(pairs) == pytest.approx((0.524 - 0.533) / 0.533 * 100)
    assert st.severity_degradation(pairs[:2]) is None


def _kind_pairs(seed: int = 7) -> list[PairResult]:
    rng = np.random.default_rng(seed)
    effects = dict(zip(KINDS, (0.02, -0.03, 0.0, 0.05, -0.01), strict=True))
    out = []
    for u in range(10):
        level = rng.uniform(0.4, 0.6)
        for kind in KINDS:
            for sev in range(1, 4):
                value = float(level + effects[kind] + rng.normal(0, 0.03))
                out.append(pair(f"u{u}", value, kind=kind, severity=sev))
    return out


def test_kind_differences_match_scipy() -> None:
    pairs = _kind_pairs()
    result = st.kind_differences(pairs)
    kinds = tuple(sorted(KINDS))
    assert result.kinds == kinds
    samples = [[np.mean([p.combined for p in pairs if p.key.user_id == f"u{u}" and p.key.kind == k])
                for u in range(10)] for k in kinds]
    fr = sps.friedmanchisquare(*samples)
    assert result.friedman == pytest.approx((fr.statistic, fr.pvalue))
    groups = [[p.combined for p in pairs if p.key.kind == k] for k in kinds]
    f = sps.f_oneway(*groups)
    assert result.anova is not None
    assert (result.anova.f, result.anova.p) == pytest.approx((f.statistic, f.pvalue))
    assert (result.anova.df_between, result.anova.df_within) == (4, 145)
    grand = np.mean(np.concatenate(groups))
    ss_b = sum(len(g) * (np.mean(g) - grand) ** 2 for g in groups)
    ss_w = sum(np.sum((np.array(g) - np.mean(g)) ** 2) for g in groups)
    assert result.anova.partial_eta_sq == pytest.approx(ss_b / (ss_b + ss_w))
    tk = sps.tukey_hsd(*groups)
    assert len(result.tukey) == 10
    first = result.tukey[0]
    assert (first.kind_a, first.kind_b) == (kinds[0], kinds[1])
    assert (first.diff, first.p) == pytest.approx((tk.statistic[0, 1], tk.pvalue[0, 1]))
    assert first.low == pytest.approx(tk.confidence_interval(0.95).low[0, 1])
    json.loads(strict_json(result))


def test_kind_differences_with_too_little_data_says_why() -> None:
    pairs = [pair("u1", 0.5, kind="a"), pair("u1", 0.6, kind="b")]
    result = st.kind_differences(pairs)
    assert result.friedman is None and result.anova is None and result.tukey == ()
    assert any("Friedman needs" in n for n in result.notes)


def test_a_kind_with_one_pair_has_no_tukey_table_and_the_report_says_why() -> None:
    # A shard of a few users (or a small run) can hold one pair of a kind: scipy's Tukey HSD raised on it,
    # and the JSON report, which reads the table, could not be written.
    pairs = [pair("u1", 0.5, kind="a"), pair("u2", 0.7, kind="a"), pair("u1", 0.6, kind="b")]
    result = st.kind_differences(pairs)
    assert result.anova is not None and result.tukey == ()
    assert "Tukey HSD needs at least 2 pairs of each kind." in result.notes
    json.loads(strict_json(result))


def test_metric_correlations_match_pearsonr_and_skip_failures() -> None:
    rng = np.random.default_rng(1)
    pairs = []
    for i in range(30):
        sem = rng.uniform(0.3, 0.9)
        pairs.append(pair(f"u{i % 6}", item=f"i{i}", semantic=sem, keyword=sem * 0.8 + rng.normal(0, 0.05),
                          structural=rng.uniform(0.1, 0.5), length=rng.uniform(0.5, 0.9)))
    pairs.append(pair("u1", 0.0, item="fail", failure="empty"))
    result = st.metric_correlations(pairs)
    scored = pairs[:-1]
    r = sps.pearsonr([p.semantic for p in scored], [p.keyword for p in scored])
    assert result.r["semantic"]["keyword"] == pytest.approx(r.statistic)
    assert result.r["keyword"]["semantic"] == result.r["semantic"]["keyword"]
    assert result.p["semantic"]["keyword"] == pytest.approx(r.pvalue)
    assert result.r["length"]["length"] == 1.0 and result.n == 30
    flat = st.metric_correlations([pair("u1", 0.5, item="a"), pair("u1", 0.5, item="b"), pair("u2", 0.5)])
    assert flat.r["semantic"]["keyword"] is None
    json.loads(strict_json(flat))


def test_user_spread_stratifies_by_history_length_only_when_wide() -> None:
    narrow = [pair(f"u{i}", 0.5 + 0.01 * i) for i in range(6)]
    spread = st.user_spread(narrow)
    assert not spread.stratified and spread.strata == ()
    assert spread.sd == pytest.approx(np.std([0.5 + 0.01 * i for i in range(6)], ddof=1))
    wide = []
    lengths = [10, 12, 14, 30, 32, 34, 50, 52, 54]
    values = [0.1, 0.15, 0.2, 0.5, 0.55, 0.6, 0.85, 0.9, 0.95]
    for i, (length, value) in enumerate(zip(lengths, values, strict=True)):
        wide += [pair(f"u{i}", value, item=f"i{j}", history_length=length) for j in range(2)]
    spread = st.user_spread(wide)
    assert spread.sd is not None and spread.sd > 0.2 and spread.stratified
    assert [s.label for s in spread.strata] == ["short", "medium", "long"]
    short = spread.strata[0]
    assert (short.min_length, short.max_length, short.n_users) == (10, 14, 3)
    assert short.mean.mean == pytest.approx(0.15)
    assert spread.user_means["u8"] == pytest.approx(0.95)
    json.loads(strict_json(spread))


def test_user_spread_also_stratifies_by_interaction_diversity_when_the_pairs_record_it() -> None:
    """The guide's advice: strata by history length *and* interaction diversity (the effective number of a
    history's categories). Here diversity, not length, carries the spread: narrow histories explain stably."""
    wide = []
    diversity = [1.0, 1.2, 1.4, 2.5, 2.7, 2.9, 4.0, 4.2, 4.4]
    values = [0.95, 0.9, 0.85, 0.6, 0.55, 0.5, 0.2, 0.15, 0.1]
    for i, (d, value) in enumerate(zip(diversity, values, strict=True)):
        wide += [pair(f"u{i}", value, item=f"i{j}", history_length=30, history_diversity=d) for j in range(2)]
    spread = st.user_spread(wide)
    assert [s.label for s in spread.strata] == ["short"]  # one length: one stratum of it
    assert [(s.label, s.by, s.n_users) for s in spread.diversity_strata] == [
        ("narrow", "diversity", 3), ("middle", "diversity", 3), ("wide", "diversity", 3)]
    narrow, _, spread_wide = spread.diversity_strata
    assert (narrow.min_length, narrow.max_length) == (1.0, 1.4) and narrow.mean.mean == pytest.approx(0.9)
    assert spread_wide.mean.mean == pytest.approx(0.15)
    json.loads(strict_json(spread))
    from types import SimpleNamespace

    from pytest_robustexplain.report.summary.findings import spread_text

    said = spread_text(SimpleNamespace(user_spread=spread))  # type: ignore[arg-type]
    assert said is not None and "; by interaction diversity narrow (1.0–1.4 categories in effect, 3 users) " \
        "0.900" in said
    # A report written before pairs recorded their diversity: the length strata alone, as before.
    old = [dataclasses.replace(p, history_diversity=None) for p in wide]
    assert st.user_spread(old).diversity_strata == ()


def test_a_history_s_diversity_is_its_effective_number_of_categories() -> None:
    from pytest_robustexplain.data import Interaction, UserHistory

    def history(*categories: str | None) -> UserHistory:
        return UserHistory("u", tuple(Interaction(f"i{n}", c) for n, c in enumerate(categories)))

    assert history("Books", "Books", "Books").diversity == pytest.approx(1.0)
    assert history("Books", "Toys", "Home", "Sports").diversity == pytest.approx(4.0)
    assert 1.0 < history("Books", "Books", "Books", "Toys").diversity < 2.0  # one dominates
    assert history("Books", None).diversity == pytest.approx(2.0)  # no category counts as one
    assert history().diversity == 0.0


def test_a_non_inferiority_row_passes_exactly_when_its_interval_clears_the_margin() -> None:
    # The row's interval is the one-sided test's bound, so the two can never disagree, skewed or not.
    rng = np.random.default_rng(14)
    for _ in range(30):
        n_users = int(rng.integers(4, 15))
        base = {f"u{i}": [0.7] * 3 for i in range(n_users)}
        shift = rng.uniform(-0.08, 0.04) + rng.exponential(0.03, n_users) * rng.choice([-1, 1])
        current = {f"u{i}": [float(np.clip(0.7 + shift[i], 0, 1))] * 3 for i in range(n_users)}
        result = st.non_inferiority(grid_pairs(base), grid_pairs(current), margin=0.02,
                                    quantities=("combined",))
        row = result.rows[0]
        assert row.passed == (row.diff.low > -0.02)


def test_comparisons_treat_rounding_noise_as_no_spread() -> None:
    # Per-user means summed in another order differ in the last bit; scipy's t tests would warn of
    # catastrophic cancellation into the user's own test run (pytest shows it in its warnings summary).
    import warnings

    from pytest_robustexplain.stats.compare import _one_sided_greater, _paired_test

    a = np.array([0.5, 0.5, 0.5])
    b = np.array([0.8, 0.1 + 0.7, 0.8])
    assert np.ptp(b - a) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _paired_test(a, b) == (0.0, None)
        assert _one_sided_greater(b - a) == 0.0
        assert _paired_test(a, a + 1e-17) == (1.0, 0.0)
    assert _paired_test(a, np.array([0.8, 0.7, 0.9]))[0] is not None


def test_a_gate_that_failed_its_thresholds_still_says_the_regression() -> None:
    """Failing on its thresholds does not hide the baseline: the message says both (issue 27 point 16)."""
    from pathlib import Path

    from pytest_robustexplain.engine.decide import with_regression
    from pytest_robustexplain.results import Verdict

    base, cur = _runs(shift=-0.1)
    found = st.non_inferiority(base, cur, margin=0.02)
    failed = Verdict(FAIL, message="FAIL (mean rule): ρ (combined) 0.31 is below its threshold 0.5.")
    said = with_regression(failed, found, Path("baseline.json"))
    assert said.outcome == FAIL and said.message.startswith(failed.message)
    assert "Also against baseline baseline.json: Regression beyond the margin 0.02" in said.message
