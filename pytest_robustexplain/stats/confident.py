"""The fixed rules: the confident rule, vectorised (shared by gate(mode="confident"), the sequential fallback,
simulations), and the users a check's fixed rule needs to catch a clear failure (a sequential PASS waits)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from statistics import NormalDist

import numpy as np

from ..errors import ConfigError
from .intervals import FloatArray, IntArray, check_alpha, check_thresholds, failable, mean_bounds, skewness

# Power assumed by the "how many users would decide it" estimate.
_PLANNING_POWER = 0.8


# --------------------------------------------------------------------------------------------------
# The confident rule, vectorised: shared by gate(mode="confident"), the sequential fallback and simulations


def confident_codes(mean: FloatArray, se: FloatArray, n: FloatArray, skew: FloatArray, thr: FloatArray,
                     alpha_pass: float, alpha_fail: float, *,
                     pairs_per_user: float | None = None) -> tuple[IntArray, FloatArray, FloatArray]:
    """Per-quantity codes (+1 PASS, −1 FAIL, 0 undecided) with the decision bounds.

    ``low`` is the one-sided level-``alpha_pass`` lower bound, ``high`` the one-sided level-``alpha_fail``
    upper bound, from ``n`` clusters (users): the bounds of :func:`_bounds`, the same that every reported
    interval uses. Per-user means of bounded scores are skewed near either end of the scale and may hide
    a thin tail the sample did not draw; the plain t bound then errs on one side two to four times as often
    as alpha there, these bounds (skewness-corrected, with an allowance for an unseen user) at most alpha.
    ``pairs_per_user`` (the gate's pairs over its users) sizes the lower bound's allowance for generation
    failures the sample did not draw: a user at 0 where users have one pair each.
    """
    low, high = mean_bounds(mean, se, n, skew, alpha_pass, alpha_fail, pairs_per_user=pairs_per_user)
    codes = np.where(low >= thr, 1, np.where(high < thr, -1, 0)).astype(np.int64)
    return codes, low, high


def combine_codes(codes: IntArray) -> IntArray:
    """Across the last axis: FAIL if any quantity fails, PASS if all pass, else undecided."""
    all_pass = np.where((codes == 1).all(axis=-1), 1, 0)
    return np.where((codes == -1).any(axis=-1), -1, all_pass).astype(np.int64)


def users_needed(mean: FloatArray, se: FloatArray, n_clusters: int, thr: FloatArray,
                  codes: IntArray, alpha: float) -> int | None:
    """Users in total that would likely settle an undecided confident verdict (normal approximation).

    The cluster-robust SE shrinks like 1/sqrt(users), so at n users it is ``se·sqrt(G/n)``. A quantity at
    distance ``gap`` from its threshold is settled with power 80 % once ``gap ≥ (z_a + z_0.8)·se_n``, i.e.
    ``n = G·((z_a + z_0.8)·se/gap)²``, assuming the measured means hold. If some undecided quantity sits
    below its threshold the likely verdict is FAIL and the first such quantity to settle decides it
    (minimum); otherwise PASS needs every undecided quantity settled (maximum).
    """
    if n_clusters < 2:
        return None
    k = failable(thr)
    undecided = np.flatnonzero(codes == 0)
    z_power = NormalDist().inv_cdf(_PLANNING_POWER)
    needs: list[tuple[bool, float]] = []
    for i in undecided:
        gap = float(mean[i] - thr[i])
        below = gap < 0
        z_a = NormalDist().inv_cdf(1 - (alpha / k if below else alpha))
        if gap == 0 or not math.isfinite(float(se[i])):
            needs.append((below, math.inf))
        else:
            needs.append((below, n_clusters * ((z_a + z_power) * float(se[i]) / abs(gap)) ** 2))
    if not needs:
        return None
    fail_side = [n for below, n in needs if below]
    total = min(fail_side) if fail_side else max(n for _, n in needs)
    if not math.isfinite(total):
        return None
    return max(n_clusters + 1, math.ceil(total))


def check_user_means(x: FloatArray) -> FloatArray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 3:
        raise ValueError(f"user_means: expected shape (runs, users, quantities), got {arr.shape}")
    if not np.all(np.isfinite(arr)) or arr.min(initial=0.0) < 0 or arr.max(initial=0.0) > 1:
        raise ValueError("user_means: every per-user mean must be a finite number in [0, 1]")
    return arr


def fallback_codes(x: FloatArray, thr: FloatArray, alpha_fix: float, per_quantity: bool = False, *,
                   pairs_per_user: float | None = None) -> IntArray:
    """The confident rule on per-user means at level ``alpha_fix`` (0 everywhere when it has no alpha),
    users having ``pairs_per_user`` pairs each (see :func:`confident_codes`)."""
    n = x.shape[1]
    if alpha_fix <= 0 or n < 2:
        shape = x.shape[::2] if per_quantity else x.shape[:1]
        return np.zeros(shape, dtype=np.int64)
    mean = x.mean(axis=1)
    se = x.std(axis=1, ddof=1) / math.sqrt(n)
    skew = skewness(np.moveaxis(x, 1, -1))
    codes, _, _ = confident_codes(mean, se, np.full_like(mean, float(n)), skew, thr,
                                   alpha_fix, alpha_fix / failable(thr), pairs_per_user=pairs_per_user)
    return codes if per_quantity else combine_codes(codes)


def simulate_confident(user_means: FloatArray, thresholds: Mapping[str, float], *,
                       alpha: float = 0.05, pairs_per_user: float | None = None) -> IntArray:
    """Vectorised ``gate(mode="confident")`` over many runs, from per-user means (codes as above).

    With equally many pairs per user the CR1 cluster-robust SE of the pair mean equals the ordinary SE of
    the per-user means, so this is exactly the confident rule on such runs when ``pairs_per_user`` says how
    many pairs each user's mean is of (None: the rule without its allowance for unseen failures).
    """
    thr = np.array(list(check_thresholds(thresholds).values()))
    x = check_user_means(user_means)
    return fallback_codes(x, thr, check_alpha(alpha), pairs_per_user=pairs_per_user)


# A check's fixed rule and its own anytime-valid test (``OneSidedTest``): the side of its limit on which the
# check fails.
ABOVE, BELOW = "above", "below"


def side_sign(side: str) -> int:
    """+1 for ``ABOVE`` (FAIL when the mean is above the limit), −1 for ``BELOW``."""
    if side not in (ABOVE, BELOW):
        raise ConfigError(f"side={side!r}: expected {ABOVE!r} (FAIL when the mean is above the limit) or "
                          f"{BELOW!r}")
    return +1 if side == ABOVE else -1


# A check that passes unless shown to fail holds a sequential PASS until its fixed rule has seen enough users
# to catch a clear failure — half way from its limit to the nearer wall of [0, 1], at least 0.05 past it
# (1.5× a limit below 0.5) — about as often as on every planned user: within POWER_GIVEN_UP at every rate from
# there to the wall (docs/statistics.md, "When a sequential slice may stop").
CLEAR_MARGIN, CLEAR_AT_LEAST, POWER_GIVEN_UP = 0.5, 0.05, 0.005


@functools.lru_cache(maxsize=256)
def users_to_catch(limit: float, side: str, alpha: float, planned: int) -> int:
    """The fewest users n such that a share rule's fixed rule on any n … ``planned`` users fails a clear
    failure at most :data:`POWER_GIVEN_UP` less often than on all ``planned`` (``planned`` when no fewer do).

    The rule is the checks' fixed rule with users as the trials: FAIL when the one-sided exact bound at
    ``alpha`` lies past ``limit`` on ``side``, its power the binomial chance of that many users flagged. Each
    user's share counts as 0 or 1 here: the clustered case (a user's cases go one way), the one where a few
    users say least."""
    from scipy.stats import binom  # lazy: loads numpy, scipy

    side_sign(side)
    if planned <= 1:
        return max(planned, 0)
    # On the failing side: the share of users past the limit, whose limit q fails when exceeded.
    q = float(limit) if side == ABOVE else 1.0 - float(limit)
    clear = min(1.0, q + max(CLEAR_MARGIN * min(q, 1.0 - q), CLEAR_AT_LEAST))
    users = np.arange(1, planned + 1)
    # Flagged users that fail: the exact lower bound above q, which is when P_q(X ≥ k) ≤ alpha.
    needed = binom.isf(alpha, users, q) + 1
    rates = np.linspace(clear, 1.0, 12)
    power = binom.sf(needed[:, None] - 1, users[:, None], rates[None, :])
    short = np.flatnonzero((power < power[-1] - POWER_GIVEN_UP).any(axis=1))
    return int(short[-1]) + 2 if short.size else 1
