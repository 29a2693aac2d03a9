"""The four special functions the gate's rules need, in pure Python: Student t's distribution and quantile,
the Beta quantile (exact Clopper–Pearson bounds) and the one-sided Kolmogorov–Smirnov critical value.

Why not ``scipy.special``: importing it costs 0.2 s and 9,000–11,000 objects the garbage collector walks on
every full pass (pytest and the interpreter's exit make four) — on a rerun that takes every answer from
the cache that was a sixth of the run (docs/performance.md). The rules call these functions with a few
dozen distinct arguments a run, so pure-Python versions, remembered, cost a few milliseconds a run.

They agree with scipy 1.17's ``stdtr``, ``stdtrit``, ``betaincinv`` and ``smirnovi`` to about 1e-13
relative over the ranges the rules use (``tests/test_special.py`` checks grids against scipy): every number
a report prints is the same; only the last digits of a float written in full may differ.

Methods: the regularized incomplete beta by its continued fraction (modified Lentz), from whichever tail
converges; its inverse by Newton's method on the log of the smaller tail, kept inside a bracket, then
polished in the variable itself; the t distribution through the incomplete beta; the Kolmogorov–Smirnov
tail by the Birnbaum–Tingey sum and its inverse by Brent's method.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from functools import lru_cache
from statistics import NormalDist

_EPS = 2.220446049250313e-16
_TINY = 1e-300  # the continued fraction's guard against a zero denominator (modified Lentz)
_SMALLEST = 2.2250738585072014e-308  # the smallest normal double: the lowest root the quantile returns
_CF_STEPS = 10_000  # the continued fraction converges in O(sqrt(max(a, b))) steps; this is a safety net


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_STIRLING_FROM = 30.0  # the series below is exact to 1e-19 from here on


def _stirling_rest(x: float) -> float:
    """lgamma(x) − ((x − ½) log x − x + ½ log 2π): Stirling's series, for x ≥ 30."""
    x2 = 1.0 / (x * x)
    return (1 / 12 - x2 * (1 / 360 - x2 * (1 / 1260 - x2 * (1 / 1680 - x2 / 1188)))) / x


def _log_beta(a: float, b: float) -> float:
    """log B(a, b). Beside a large argument, lgamma(b) − lgamma(a + b) is taken from Stirling's series
    directly: the difference of two lgammas near 13,000 (2,000 users) kept only 1e-12 of it."""
    small, big = min(a, b), max(a, b)
    if big < _STIRLING_FROM:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    shift = (-(big - 0.5) * math.log1p(small / big) - small * math.log(big + small) + small
             + _stirling_rest(big) - _stirling_rest(big + small))  # lgamma(big) − lgamma(big + small)
    if small < _STIRLING_FROM:
        return math.lgamma(small) + shift
    return ((small - 0.5) * math.log(small) - small + _HALF_LOG_2PI + _stirling_rest(small)) + shift


def _log_front(a: float, b: float, x: float, y: float, log_x: float, log_y: float) -> float:
    """log(x^a y^b / B(a, b)), the factor before both tails' continued fractions (x + y = 1).

    With both a and b large the three terms are each in the thousands and cancel to a few units; written
    around the mean instead (DiDonato & Morris 1992), each term is small: a log1p((x b − y a)/a) + …"""
    if min(a, b) < _STIRLING_FROM:
        return a * log_x + b * log_y - _log_beta(a, b)
    lead = x * b - y * a  # x (a + b) − a = −(y (a + b) − b)
    total = a + b
    # log(x (a + b) / a) as log1p near the mean, where it is small; far from it (x near 0 or 1) directly,
    # where log1p's argument would round to −1
    log_xa = math.log1p(lead / a) if abs(lead) < 0.5 * a else log_x + math.log(total / a)
    log_yb = math.log1p(-lead / b) if abs(lead) < 0.5 * b else log_y + math.log(total / b)
    return (a * log_xa + b * log_yb + 0.5 * math.log(a * b / total)
            - _HALF_LOG_2PI - _stirling_rest(a) - _stirling_rest(b) + _stirling_rest(total))


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (Numerical Recipes' ``betacf``, modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _CF_STEPS):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            step = d * c
            h *= step
        if abs(step - 1.0) < _EPS:
            break
    return h


def _logs(x: float, y: float) -> tuple[float, float]:
    """(log x, log y) for x + y = 1, each from the smaller of the two so that neither loses precision."""
    return (math.log(x) if x <= 0.5 else math.log1p(-y)), (math.log(y) if y <= 0.5 else math.log1p(-x))


def _tails(a: float, b: float, x: float, y: float) -> tuple[float, float]:
    """(I_x(a, b), 1 − I_x(a, b)) with x + y = 1, each tail from the fraction that converges (the other
    as its complement). Both x and y are passed so that the smaller one keeps its full precision."""
    if x <= 0.0:
        return 0.0, 1.0
    if y <= 0.0:
        return 1.0, 0.0
    front = math.exp(_log_front(a, b, x, y, *_logs(x, y)))
    if x < (a + 1.0) / (a + b + 2.0):
        low = front * _continued_fraction(a, b, x) / a
        return low, 1.0 - low
    high = front * _continued_fraction(b, a, y) / b
    return 1.0 - high, high


def _density(a: float, b: float, v: float, w: float) -> float:
    """The Beta(a, b) density at v (w = 1 − v)."""
    log_v, log_w = _logs(v, w)
    return math.exp(_log_front(a, b, v, w, log_v, log_w) - log_v - log_w)


def _root(a: float, b: float, target: float, upper: bool) -> float:
    """v in (0, 0.5] where I_v(a, b) = target (``upper`` False: the lower tail, rising with v) or
    1 − I_v(a, b) = target (``upper`` True: the upper tail, falling), the caller having checked that the root
    lies there and chosen the tail that is the smaller one at it, so that the target keeps its precision.

    Newton's method on log v for log tail − log target (nearly linear: I_v ≈ v^a / (a B(a, b)) for small
    v), kept in a bracket by halving it when a step leaves it; then Newton steps in v itself, which the log
    scale cannot resolve below its own rounding."""
    side = 1 if upper else 0
    sign = -1.0 if upper else 1.0

    def tail(v: float) -> float:
        return _tails(a, b, v, 1.0 - v)[side]

    low, high = math.log(_SMALLEST), math.log(0.5)
    log_target = math.log(target)
    w = (min(high, max(low, (log_target + math.log(a) + _log_beta(a, b)) / a)) if not upper
         else math.log(0.25))
    for _ in range(200):
        v = math.exp(w)
        value = tail(v)
        if value <= 0.0:  # the tail underflowed: the root is further in
            low, high = (w, high) if not upper else (low, w)
            w = (low + high) / 2
            continue
        gap = sign * (math.log(value) - log_target)  # rises with w in both cases
        low, high = (low, w) if gap > 0 else (w, high)
        try:
            slope = v * _density(a, b, v, 1.0 - v) / value
        except OverflowError:  # a density of 1e308 and more (a < 1, v near 0): halve the bracket instead
            slope = math.inf
        nxt = w - gap / slope if 0.0 < slope < math.inf else math.nan
        if not low < nxt < high:  # also NaN
            nxt = (low + high) / 2
        done = abs(nxt - w) <= 1e-9 * max(1.0, abs(w))
        w = nxt
        if done:
            break
    v = max(_SMALLEST, math.exp(w))
    for _ in range(3):
        try:
            pdf = _density(a, b, v, 1.0 - v)
        except OverflowError:
            break
        if not 0.0 < pdf < math.inf:
            break
        nxt = v - sign * (tail(v) - target) / pdf
        if not _SMALLEST <= nxt <= 0.5 or nxt == v:
            break
        v = nxt
    return v


@lru_cache(maxsize=4096)
def _betaincinv_pair(a: float, b: float, p: float, q: float) -> tuple[float, float]:
    """(x, 1 − x) with I_x(a, b) = p and 1 − I_x(a, b) = q (p + q = 1, both passed so that a caller who
    knows the smaller one exactly keeps it): the smaller of x and 1 − x is solved for, against the smaller
    of the two tails, so that neither is taken as the complement of a number near 1."""
    if p <= 0.0:
        return 0.0, 1.0
    if q <= 0.0:
        return 1.0, 0.0
    if p <= _tails(a, b, 0.5, 0.5)[0]:  # x ≤ ½
        x = _root(a, b, p, upper=False) if p <= q else _root(a, b, q, upper=True)
        return x, 1.0 - x
    # x > ½: solve for y = 1 − x, where I_y(b, a) = q
    y = _root(b, a, q, upper=False) if q <= p else _root(b, a, p, upper=True)
    return 1.0 - y, y


def betaincinv(a: float, b: float, p: float) -> float:
    """x with I_x(a, b) = p, the Beta(a, b) quantile (``scipy.special.betaincinv``)."""
    if not (a > 0 and b > 0 and 0.0 <= p <= 1.0):
        return math.nan
    return _betaincinv_pair(float(a), float(b), float(p), 1.0 - float(p))[0]


def stdtr(df: float, t: float) -> float:
    """P(T ≤ t) for Student's t on ``df`` degrees of freedom (``scipy.special.stdtr``)."""
    if not df > 0 or math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    if math.isinf(df):
        return NormalDist().cdf(t)
    tt = t * t
    x, y = df / (df + tt), tt / (df + tt)  # x + y = 1, each computed directly
    tail = 0.5 * _tails(df / 2.0, 0.5, x, y)[0]  # P(T ≥ |t|)
    return tail if t < 0 else 1.0 - tail


@lru_cache(maxsize=4096)
def stdtrit(df: float, q: float) -> float:
    """The t quantile: t with P(T ≤ t) = q on ``df`` degrees of freedom (``scipy.special.stdtrit``)."""
    if not df > 0 or not 0.0 <= q <= 1.0:
        return math.nan
    if q == 0.5:
        return 0.0
    if q == 0.0:
        return -math.inf
    if q == 1.0:
        return math.inf
    if math.isinf(df):
        return NormalDist().inv_cdf(q)
    # P(T ≥ |t|) = I_x(df/2, 1/2) / 2 with x = df / (df + t²); 1 − 2 P(T ≥ |t|) = 2 |q − ½| is exact
    tail = q if q < 0.5 else 1.0 - q
    x, y = _betaincinv_pair(df / 2.0, 0.5, 2.0 * tail, 2.0 * abs(q - 0.5))
    t = math.sqrt(df * (y / x))
    return -t if q < 0.5 else t


@lru_cache(maxsize=64)
def _log_binomials(n: int) -> tuple[float, ...]:
    """log C(n, j) for j = 0..n from the exact integers (lgamma's differences lose 1e-12 at n = 2,000)."""
    out, c = [], 1
    for j in range(n + 1):
        out.append(math.log(c))
        c = c * (n - j) // (j + 1)
    return tuple(out)


def smirnov(n: int, d: float) -> float:
    """P(D_n⁺ ≥ d), the one-sided Kolmogorov–Smirnov tail for n points, exactly (Birnbaum & Tingey 1951):
    d Σ_{j ≤ n(1−d)} C(n, j) (1 − d − j/n)^(n−j) (d + j/n)^(j−1) (``scipy.special.smirnov``)."""
    n = operator.index(n)  # a numpy integer would overflow the exact binomials below
    if d <= 0.0:
        return 1.0
    if d >= 1.0:
        return 0.0
    log_c = _log_binomials(n)
    terms = []
    for j in range(math.floor(n * (1.0 - d)) + 1):
        gap = ((n - j) - n * d) / n
        if gap <= 0.0:
            break
        terms.append(math.exp(log_c[j] + (n - j) * math.log(gap) + (j - 1) * math.log(d + j / n)))
    return min(1.0, d * math.fsum(terms))


def _brentq(f: Callable[[float], float], a: float, b: float, rtol: float = 4 * _EPS,
            xtol: float = 1e-300, steps: int = 200) -> float:
    """A root of f in [a, b] (f(a), f(b) of opposite signs) by Brent's method, as scipy's ``brentq``."""
    xpre, xcur = a, b
    fpre, fcur = f(xpre), f(xcur)
    if fpre == 0.0:
        return xpre
    if fcur == 0.0:
        return xcur
    xblk = fblk = spre = scur = 0.0
    for _ in range(steps):
        if fpre != 0.0 and fcur != 0.0 and (fpre < 0.0) != (fcur < 0.0):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0.0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):
                spre, scur = scur, stry
            else:
                spre = scur = sbis
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = f(xcur)
    return xcur


def smirnovi(n: int, p: float) -> float:
    """d with P(D_n⁺ ≥ d) = p (``scipy.special.smirnovi``)."""
    return _smirnovi(operator.index(n), float(p))


@lru_cache(maxsize=4096)
def _smirnovi(n: int, p: float) -> float:
    if not n >= 1 or not 0.0 <= p <= 1.0:
        return math.nan
    if p == 0.0:
        return 1.0
    if p == 1.0:
        return 0.0
    if n == 1:
        return 1.0 - p  # P(D_1⁺ ≥ d) = 1 − d
    return _brentq(lambda d: smirnov(n, d) - p, 0.0, 1.0)
