"""Fixed-sample verdicts: the mean rule, the confident rule, and what a policy makes of them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import ConfigError
from ..results import (
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    PASS,
    GateCheck,
    Interval,
    PairResult,
    Verdict,
)
from .confident import combine_codes, confident_codes, users_needed
from .intervals import (
    CODE,
    GATE_MODES,
    POLICIES,
    check_alpha,
    check_thresholds,
    cluster_interval,
    cluster_stats,
    failable,
    fmt_threshold,
    pair_users,
    pair_values,
    perturbation_pairs,
    quantity_name,
    single_model,
)

# --------------------------------------------------------------------------------------------------
# Fixed-sample verdicts


def gate(pairs: Sequence[PairResult], *, thresholds: Mapping[str, float], mode: str = "mean",
         alpha: float = 0.05, inconclusive_policy: str = "fail") -> Verdict:
    """The verdict for one gated slice of one model's pairs.

    ``thresholds`` maps each gated quantity (``"combined"`` and/or metric names) to its minimum. Control
    pairs are ignored; generation failures count with their 0 scores.

    ``mode="mean"`` is the method's rule: a quantity passes when its mean reaches the threshold. A check
    whose (1−alpha) interval straddles the threshold is flagged ``fragile`` with the probability that a
    rerun lands on the other side.

    ``mode="confident"`` passes only when every quantity is confidently above its threshold and fails when
    any is confidently below; otherwise the verdict is INCONCLUSIVE, with an estimate of how many users
    would settle it. ``inconclusive_policy`` ("fail", "pass", "warn") is recorded in the message; the
    caller applies it with :func:`apply_policy`.
    """
    thr = check_thresholds(thresholds, {name for p in pairs for name in p.user_metrics})
    alpha = check_alpha(alpha)
    if mode not in GATE_MODES:
        raise ConfigError(f"mode={mode!r}: expected one of {', '.join(GATE_MODES)} "
                          "(sequential verdicts come from SequentialGate.verdict)")
    if inconclusive_policy not in POLICIES:
        raise ConfigError(f"inconclusive_policy={inconclusive_policy!r}: "
                          f"expected one of {', '.join(POLICIES)}")
    scored = perturbation_pairs(pairs)
    if not scored:
        raise ValueError("gate: no perturbation pairs to gate (control pairs are not gated)")
    single_model(scored, "gate")
    if mode == "mean":
        return _gate_mean(scored, thr, alpha)
    return _gate_confident(scored, thr, alpha, inconclusive_policy)


def _gate_mean(pairs: Sequence[PairResult], thr: dict[str, float], alpha: float) -> Verdict:
    users = pair_users(pairs)
    checks = []
    for quantity, threshold in thr.items():
        values = pair_values(pairs, quantity)
        interval = cluster_interval(values.tolist(), users, confidence=1 - alpha)
        cs = cluster_stats(values, users)
        outcome = PASS if interval.mean >= threshold else FAIL
        fragile = interval.low < threshold < interval.high
        checks.append(GateCheck(quantity, threshold, interval, outcome, fragile,
                                _flip_probability(interval.mean, cs.se, cs.n_clusters, threshold)))
    outcome = PASS if all(c.outcome == PASS for c in checks) else FAIL
    wide = [c for c in checks if _undecidable(c)]
    if wide and not any(c.interval.high < c.threshold for c in checks):
        # No check is confidently below, and one of them cannot tell PASS from FAIL: the mean rule's
        # verdict would be a coin toss that a rerun flips.
        needed = max(_users_to_narrow(c) for c in wide)
        return Verdict.of(INCONCLUSIVE, checks, mode="mean",
                          message=_undecidable_message(wide, checks, alpha, needed), users_needed=needed)
    return Verdict.of(outcome, checks, mode="mean", message=_mean_message(outcome, checks, alpha))


# The mean rule says INCONCLUSIVE when a check's interval straddles its threshold and spans more than this
# share of the 0-1 scale: such a run cannot tell PASS from FAIL (3 MovieLens users on SmolLM2 gave ρ
# 0.685 [0.000, 1.000], a PASS under the plain mean rule). Well-powered runs never reach it: in
# benchmarks/bench_calibration.py --undecidable it fires on 50-89 % of 3-user runs near the threshold, 3-53 %
# of 5-user runs and never from 10 users on (median widths 0.06-0.28 at 10-40 users).
WIDE_INTERVAL = 0.5


def _undecidable(check: GateCheck) -> bool:
    iv = check.interval
    return iv.low < check.threshold < iv.high and iv.high - iv.low > WIDE_INTERVAL


def _users_to_narrow(check: GateCheck) -> int:
    """Users in total for the interval to shrink to WIDE_INTERVAL (its width falls like 1/sqrt(users))."""
    iv = check.interval
    return max(iv.n_clusters + 1, math.ceil(iv.n_clusters * ((iv.high - iv.low) / WIDE_INTERVAL) ** 2))


def _undecidable_message(wide: Sequence[GateCheck], checks: Sequence[GateCheck], alpha: float,
                         needed: int) -> str:
    parts = [f"{describe(c)} spans more than half the scale across its threshold "
             f"{fmt_threshold(c.threshold)}" for c in wide]
    now = checks[0].interval.n_clusters
    return (f"INCONCLUSIVE (mean rule): the evidence cannot tell PASS from FAIL: {'; '.join(parts)}. About "
            f"{needed} users in total (now {now}) would narrow it to half the scale. "
            f"{100 * (1 - alpha):g} % intervals, {sample_note(checks)}")


def _flip_probability(mean: float, se: float, n_clusters: int, threshold: float) -> float | None:
    """Chance that a rerun's mean lands on the other side of the threshold.

    Treats the measured mean as the true one: a rerun's mean is taken as mean + se·T with the cluster-robust
    SE and Student's t on n_users − 1 degrees of freedom — the spread the interval itself uses — so the
    chance is P(T > |mean − threshold| / se). (A normal tail said "≈ 0 %" with 3 users beside an interval
    that straddles the threshold: t's tails are that interval's.) It ignores the uncertainty of the measured
    mean itself and is meant as a readable "how shaky is this" figure, not a test.
    """
    if n_clusters < 2 or not math.isfinite(se):
        return None
    if se == 0:
        return 0.0
    from scipy.special import stdtr  # lazy: loads numpy, scipy

    return float(stdtr(n_clusters - 1, -abs(mean - threshold) / se))


def _gate_confident(pairs: Sequence[PairResult], thr: dict[str, float], alpha: float,
                    policy: str) -> Verdict:
    users = pair_users(pairs)
    names = list(thr)
    stats = [cluster_stats(pair_values(pairs, q), users) for q in names]
    mean = np.array([s.mean for s in stats])
    se = np.array([s.se for s in stats])
    skew = np.array([s.skew for s in stats])
    n_clusters = stats[0].n_clusters
    thresholds = np.array([thr[q] for q in names])
    k = failable(thresholds)
    # PASS needs *every* quantity confidently above: an intersection–union test. A false PASS needs the
    # one quantity that is truly below to be declared above, which happens with probability ≤ alpha on its
    # own, so no multiplicity correction is due on this side. FAIL needs only *one* quantity confidently
    # below: a union of k tests, so Bonferroni splits alpha across them to keep false FAILs ≤ alpha. Only
    # quantities that can fail count: a threshold of 0 is met by every score, so it takes no share.
    codes, low, high = confident_codes(mean, se, np.full(len(names), float(n_clusters)), skew, thresholds,
                                        alpha, alpha / k, pairs_per_user=len(pairs) / max(n_clusters, 1))
    confidence = 1 - alpha - alpha / k  # low is a one-sided alpha bound, high a one-sided alpha/k bound
    checks = tuple(
        GateCheck(q, thr[q], Interval(float(mean[i]), float(low[i]), float(high[i]), len(pairs), n_clusters,
                                      confidence), CODE[int(codes[i])])
        for i, q in enumerate(names))
    outcome = CODE[int(combine_codes(codes))]
    needed = (users_needed(mean, se, n_clusters, thresholds, codes, alpha)
              if outcome == INCONCLUSIVE else None)
    message = _confident_message(outcome, checks, alpha, k, n_clusters, needed, policy)
    return Verdict.of(outcome, checks, mode="confident", message=message, users_needed=needed)


def describe(check: GateCheck) -> str:
    return f"{quantity_name(check.quantity)} {check.interval.fmt()}"


def sample_note(checks: Sequence[GateCheck]) -> str:
    interval = checks[0].interval
    return (f"{interval.n} pairs from {interval.n_clusters} users; intervals are cluster-robust by user "
            "(generation failures count as 0).")


def _mean_message(outcome: str, checks: Sequence[GateCheck], alpha: float) -> str:
    failed = [c for c in checks if c.outcome == FAIL]
    if failed:
        parts = [f"{describe(c)} is below its threshold {fmt_threshold(c.threshold)}" for c in failed]
        head = f"FAIL (mean rule): {'; '.join(parts)}."
    else:
        parts = [f"{describe(c)} ≥ {fmt_threshold(c.threshold)}" for c in checks]
        head = f"PASS (mean rule): every gated quantity meets its threshold ({'; '.join(parts)})."
    fragile = []
    for c in checks:
        if c.fragile:
            chance = ("unknown" if c.flip_probability is None
                      else "< 1 %" if c.flip_probability < 0.005 else f"≈ {100 * c.flip_probability:.0f} %")
            fragile.append(f"{quantity_name(c.quantity)} — its interval straddles "
                           f"{fmt_threshold(c.threshold)}, "
                           f"a rerun lands on the other side with chance {chance} (t approximation)")
    tail = f" Fragile: {'; '.join(fragile)}." if fragile else ""
    level = f"{100 * (1 - alpha):g} %"
    return f"{head}{tail} {level} intervals, {sample_note(checks)}"


def _confident_message(outcome: str, checks: Sequence[GateCheck], alpha: float, k: int, n_users: int,
                       needed: int | None, policy: str) -> str:
    bounds = (f"Bounds: one-sided {100 * (1 - alpha):g} % lower, one-sided {100 * (1 - alpha / k):g} % "
              f"upper (alpha split across the {_count(k)} that can fail); {sample_note(checks)}")
    if outcome == FAIL:
        parts = [f"{describe(c)} is confidently below its threshold {fmt_threshold(c.threshold)}"
                 for c in checks if c.outcome == FAIL]
        return f"FAIL (confident rule): {'; '.join(parts)}. {bounds}"
    if outcome == PASS:
        parts = [f"{describe(c)} ≥ {fmt_threshold(c.threshold)}" for c in checks]
        return ("PASS (confident rule): every gated quantity is confidently above its threshold "
                f"({'; '.join(parts)}). {bounds}")
    parts = [f"{describe(c)} vs {fmt_threshold(c.threshold)}" for c in checks if c.outcome == INCONCLUSIVE]
    if needed is None:
        more = ("No realistic number of users would settle it (a mean sits on its threshold or the spread "
                "is unknown).")
    else:
        more = (f"About {needed} users in total (now {n_users}) would likely settle it (80 % power if the "
                "measured means hold).")
    return ("INCONCLUSIVE (confident rule): not confidently above nor below the threshold: "
            f"{'; '.join(parts)}. {more} Inconclusive policy {policy!r}: {_policy_effect(policy)} {bounds}")


def _count(k: int) -> str:
    return f"{k} quantity" if k == 1 else f"{k} quantities"


def _policy_effect(policy: str) -> str:
    return {"fail": "this counts as a failure.", "pass": "this counts as a pass.",
            "warn": "this passes with a warning."}[policy]


def apply_policy(verdict: Verdict, policy: str) -> tuple[bool, bool]:
    """``(passed, warn)`` for a verdict under an inconclusive policy ("fail", "pass", "warn").

    PASS passes and FAIL and INSENSITIVE fail whatever the policy. INCONCLUSIVE fails under "fail", passes
    under "pass", and passes with a warning under "warn". A PASS with a fragile check (mean mode) also asks
    for a warning: a rerun could well flip it; so does a passing verdict whose guard found the
    explanations insensitive under ``guard="warn"``.
    """
    if policy not in POLICIES:
        raise ConfigError(f"inconclusive_policy={policy!r}: expected one of {', '.join(POLICIES)}")
    guard = verdict.guard
    guard_warns = guard is not None and guard.policy == "warn" and guard.flagged
    if verdict.outcome == PASS:
        return True, guard_warns or any(c.fragile for c in verdict.checks)
    if verdict.outcome in (FAIL, INSENSITIVE):
        return False, False
    if verdict.outcome != INCONCLUSIVE:
        raise ValueError(f"verdict outcome {verdict.outcome!r}: expected PASS, FAIL, INCONCLUSIVE or "
                         "INSENSITIVE")
    return policy != "fail", policy == "warn" or (policy == "pass" and guard_warns)
