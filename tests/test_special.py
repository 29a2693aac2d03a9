"""The gate's special functions in pure Python (``stats/special.py``) against independent references.

Two kinds of reference: values computed to 40 digits with mpmath (written here: mpmath is not a
dependency), which ours must match to a few units in the last place, and scipy's functions on grids over
the ranges the rules use, which ours must match to 1e-13 or to scipy's own error where that is larger
(shown by the 40-digit values: near q = ½ scipy's t quantile is off by 2e-11, and so is its t distribution
near 0)."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import numpy as np
import pytest
from scipy import special as sp

from pytest_robustexplain.stats import special

# (function, arguments, the value to 20 digits by mpmath at 40 digits' working precision)
REFERENCES = [
    (special.stdtrit, (19, 0.975), 2.0930240544083093201),
    (special.stdtrit, (4, 0.499), -0.0026666706172941368299),  # scipy: −0.002666670617245677
    (special.stdtrit, (1999, 0.95), 1.6456162481872622295),
    (special.stdtr, (1, -1e-5), 0.4999968169011382682),  # scipy: 0.49999681690100645
    (special.stdtr, (19, -2.3), 0.016476291231697437681),
    (special.betaincinv, (10, 11, 0.05), 0.30195391128649350273),
    (special.betaincinv, (0.5, 2000.5, 0.9), 0.0006760726756232631113),
    (special.betaincinv, (50.5, 0.5, 1e-6), 0.78815194195138877101),
    (special.betaincinv, (1, 2000, 0.05), 0.000025646318321330623585),  # 1 − 0.95^(1/2000)
    (special.smirnovi, (20, 0.05), 0.26473358733724451475),
    (special.smirnovi, (2000, 0.9), 0.0050498733834920164393),  # 2,000 terms' rounding: 2e-13 (below)
]
# Ours to a few units in the last place; the Kolmogorov–Smirnov sum at 2,000 users to 5e-13 (its 2,000
# exponents each carry a rounding of about 1e-16 times the thousands they add up to).
TOLERANCE = {special.smirnovi: 5e-13}


@pytest.mark.parametrize(("fn", "args", "expected"), REFERENCES,
                         ids=[f"{fn.__name__}{args}" for fn, args, _ in REFERENCES])
def test_matches_forty_digit_references(fn, args, expected) -> None:
    tolerance = TOLERANCE.get(fn, 5e-15) if args[0] > 100 else 5e-15
    assert fn(*args) == pytest.approx(expected, rel=tolerance, abs=0)


def _rel(ours: float, ref: float) -> float:
    return abs(ours - ref) / abs(ref) if ref else abs(ours)


def test_beta_quantile_is_scipys_over_the_exact_share_bounds() -> None:
    # the guard's Clopper–Pearson bounds: k (a sum of users' shares) of n users, every alpha it spends
    worst = 0.0
    for n in (1, 2, 3, 5, 8, 10, 20, 50, 100, 300, 1000, 2000):
        for k in sorted({0.5, 1, 2, 3, n / 3, n / 2, 0.3 * n + 0.25, n - 1, n - 0.5, n}):
            if not 0 < k <= n:
                continue
            for alpha in (1e-6, 1e-4, 0.001, 0.0125, 0.025, 0.05, 0.1, 0.2, 0.5, 0.9, 0.999):
                worst = max(worst, _rel(special.betaincinv(k, n - k + 1, alpha),
                                        float(sp.betaincinv(k, n - k + 1, alpha))))
                if k < n:
                    worst = max(worst, _rel(special.betaincinv(k + 1, n - k, alpha),
                                            float(sp.betaincinv(k + 1, n - k, alpha))))
    assert worst < 1e-13


def test_t_distribution_and_quantile_are_scipys_away_from_its_own_error() -> None:
    worst_q = worst_p = 0.0
    for df in [*range(1, 60), 99, 199, 499, 999, 1999, 4999, 0.5, 2.5, 37.3]:
        for q in (1e-6, 0.001, 0.025, 0.05, 0.1, 0.25, 0.75, 0.9, 0.95, 0.975, 0.99, 0.999, 1 - 1e-6):
            worst_q = max(worst_q, _rel(special.stdtrit(df, q), float(sp.stdtrit(df, q))))
        for t in (-30, -5, -2.1, -1, -0.3, 0.2, 1.7, 4, 12):
            worst_p = max(worst_p, _rel(special.stdtr(df, t), float(sp.stdtr(df, t))))
    assert worst_q < 1e-13 and worst_p < 1e-13


def test_ks_critical_value_is_scipys_for_every_user_count_it_is_asked() -> None:
    for n in (1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50, 100, 200, 500, 1000, 2000):
        for alpha in (1e-6, 1e-4, 0.001, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.9):
            assert special.smirnovi(n, alpha) == pytest.approx(float(sp.smirnovi(n, alpha)), rel=5e-13)
            d = special.smirnovi(n, alpha)
            assert special.smirnov(n, d) == pytest.approx(alpha, rel=1e-12)


def test_edges_are_scipys() -> None:
    assert special.stdtrit(5, 0.0) == -math.inf and special.stdtrit(5, 1.0) == math.inf
    assert special.stdtrit(5, 0.5) == 0.0 and special.stdtr(5, 0.0) == 0.5
    assert special.stdtrit(math.inf, 0.975) == pytest.approx(1.959963984540054, rel=1e-15)
    assert special.stdtr(3, math.inf) == 1.0 and special.stdtr(3, -math.inf) == 0.0
    assert special.betaincinv(2, 3, 0.0) == 0.0 and special.betaincinv(2, 3, 1.0) == 1.0
    assert special.smirnovi(10, 0.0) == 1.0 and special.smirnovi(10, 1.0) == 0.0
    for value in (special.stdtrit(0, 0.5), special.stdtrit(3, 1.5), special.betaincinv(0, 1, 0.5),
                  special.betaincinv(1, 1, -0.1), special.smirnovi(0, 0.5), special.stdtr(-1, 0.3)):
        assert math.isnan(value)


def test_the_rules_never_import_scipy() -> None:
    code = ("import sys; from pytest_robustexplain import guard; from pytest_robustexplain.stats import "
            "cluster_interval, free_lower_bound; "
            "cluster_interval([0.2, 0.4, 0.9, 0.7], ['a', 'b', 'c', 'd']); "
            "guard.share_lower_bound(3, 20, 0.05); guard.share_upper_bound(3, 20, 0.05); "
            "free_lower_bound([0.1, 0.3, 0.2], 0.05, -1.0); "
            "assert 'scipy' not in sys.modules, sorted(m for m in sys.modules if m.startswith('scipy'))")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_beta_quantile_far_outside_the_rules_ranges_never_raises_and_stays_scipys() -> None:
    # shapes 0.01–100,000 and tails down to 1e-15 (a user's share can be a small fraction; a run can have
    # many users): the log scale's bracket, an overflowing density and an underflowing tail all once raised
    rng = random.Random(2)
    worst = 0.0
    for _ in range(1500):
        a, b = (math.exp(rng.uniform(math.log(0.01), math.log(1e5))) for _ in range(2))
        p = math.exp(rng.uniform(math.log(1e-15), math.log(0.5)))
        p = 1 - p if rng.random() < 0.5 else p
        ref = float(sp.betaincinv(a, b, p))
        if ref > 1e-300:  # below, both give the smallest normal double (scipy) or near it
            worst = max(worst, _rel(special.betaincinv(a, b, p), ref))
    assert worst < 1e-10


def test_every_share_bound_of_a_thousand_users_is_scipys() -> None:
    # every k (in halves: shares of users with two cases) of 60 and of 1,000 users at the alphas the guard
    # spends: the first version raised a math domain error on 130 of these (k = 966 of 1,000 at 5 %, …),
    # where x sat far from the mean of a Beta whose shapes were both past 30
    worst = 0.0
    for n in (60, 1000):
        for k in (h / 2 for h in range(2, 2 * n)):
            for alpha in (0.05, 0.0125, 1e-3):
                for a, b, p in ((k, n - k + 1, alpha), (k + 1, n - k, 1 - alpha)):
                    if b > 0:
                        worst = max(worst, _rel(special.betaincinv(a, b, p), float(sp.betaincinv(a, b, p))))
    assert worst < 2e-13


def test_numpy_integers_count_users_as_python_ints_do() -> None:
    # the exact binomials of the Kolmogorov–Smirnov sum overflowed a numpy int64 (C(2000, 1000) ≈ 1e600)
    # (counts no other test asks for, so that nothing is remembered from a Python int first)
    expected = float(sp.smirnovi(1999, 0.0421))
    assert special.smirnovi(np.int64(1999), 0.0421) == pytest.approx(expected, rel=5e-13)
    assert special.smirnov(np.int32(77), 0.1234) == special.smirnov(77, 0.1234)
    assert special.betaincinv(np.int64(3), np.int64(18), np.float64(0.05)) == special.betaincinv(3, 18, 0.05)
