"""Simulation for calibrating the package's rules (benchmarks and tests only; not shipped).

Two parts. **The calibration generator**: realistic per-user means. Each simulated user has a true level
drawn from a Beta distribution (skewed near either end of the scale, as good models' users are), and
answers ``pairs`` perturbation pairs: a pair is a generation failure scored 0 with probability
``fail_rate``, otherwise the level plus noise (normal, or Student t on 3 degrees of freedom scaled to the
same sd: heavy tails), clipped to [0, 1]. What the rules see is each user's mean over their pairs; with
equally many pairs per user the cluster-robust SE of the pair mean equals the plain SE of these user means,
so simulating user means is simulating the rules exactly.

The quantity every rule tests is the expected pair score, which clipping and failures pull away from the
Beta mean: :func:`true_mean` computes it by quadrature (to about 1e-6), so coverage and error rates are
judged against the real target. ``noise="none"`` skips pairs: the user means are the Beta draws themselves
(the most skewed case, and the one whose true mean is exactly the Beta mean).

**The guard's rules vectorised** (:func:`simulate`, :func:`simulate_relative`): ``guard.evaluate``'s outcome
for many simulated runs at once; ``tests/test_guard.py`` checks that the two agree.

Benchmarks import it as ``simulation`` (they run as ``python benchmarks/bench_x.py``); tests load it by
path (``tests/helpers.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_robustexplain.checks.controls import FIELLER_SHARE, SHARE_RULES, GuardSettings
from pytest_robustexplain.results import INCONCLUSIVE, INSENSITIVE, PASS
from pytest_robustexplain.stats.intervals import (
    FloatArray,
    IntArray,
    free_lower_bounds,
    mean_bounds,
    skewness,
)

NOISES: tuple[str, ...] = ("none", "normal", "t3")
# Draw the pair matrix in blocks of this many runs, so a 24,000-run cell never holds 24,000×40×25 floats.
_BLOCK = 2000


@dataclass(frozen=True)
class Cell:
    """One simulated setting: the user-level Beta(mean, sd), the pair noise, and how many users."""

    level_mean: float
    n_users: int
    user_sd: float = 0.10
    noise: str = "normal"
    noise_sd: float = 0.15
    fail_rate: float = 0.05
    pairs: int = 25

    def __post_init__(self) -> None:
        if self.noise not in NOISES:
            raise ValueError(f"noise={self.noise!r}: expected one of {', '.join(NOISES)}")
        if not 0 < self.user_sd**2 < self.level_mean * (1 - self.level_mean):
            raise ValueError(f"no Beta distribution has mean {self.level_mean} and sd {self.user_sd}")

    @property
    def beta(self) -> tuple[float, float]:
        """The Beta shape parameters (a, b) with this mean and sd."""
        m, v = self.level_mean, self.user_sd**2
        k = m * (1 - m) / v - 1
        return m * k, (1 - m) * k


def _noise_survival(z: FloatArray, noise: str) -> FloatArray:
    """P(noise/sd > z) for the standardised pair noise."""
    from scipy import special

    if noise == "normal":
        return np.asarray(0.5 * special.erfc(z / math.sqrt(2.0)), dtype=float)
    # Student t3 scaled to unit sd: noise = t·(1/√3), so P(noise > z) = P(t > z·√3).
    return np.asarray(special.stdtr(3, -z * math.sqrt(3.0)), dtype=float)


def _expected_pair_score(levels: FloatArray, cell: Cell) -> FloatArray:
    """E[clip(level + noise, 0, 1)] for each level: ∫₀¹ P(level + noise > y) dy by Gauss–Legendre."""
    nodes, weights = np.polynomial.legendre.leggauss(400)
    y, w = (nodes + 1) / 2, weights / 2
    z = (y[None, :] - levels[:, None]) / cell.noise_sd
    return np.asarray((_noise_survival(z, cell.noise) * w).sum(axis=1), dtype=float)


@functools.cache
def true_mean(cell: Cell) -> float:
    """The expected gated score of a user drawn at random: what every rule's verdict is about (cached)."""
    from scipy import special

    a, b = cell.beta
    # E[h(U)] = ∫₀¹ h(F⁻¹(p)) dp on a fine midpoint grid: h is bounded and smooth, F⁻¹ handles the skew.
    p = (np.arange(40_000) + 0.5) / 40_000
    levels = np.asarray(special.betaincinv(a, b, p), dtype=float)
    if cell.noise == "none":
        return float(levels.mean())
    return float((1 - cell.fail_rate) * _expected_pair_score(levels, cell).mean())


def _pair_noise(rng: np.random.Generator, shape: tuple[int, ...], cell: Cell) -> FloatArray:
    if cell.noise == "normal":
        return rng.normal(0.0, cell.noise_sd, shape)
    return np.asarray(rng.standard_t(3, shape) * (cell.noise_sd / math.sqrt(3.0)), dtype=float)


def user_means(cell: Cell, runs: int, rng: np.random.Generator) -> FloatArray:
    """Per-user means, shape (runs, n_users): what the rules see in ``runs`` independent gated runs."""
    a, b = cell.beta
    out = np.empty((runs, cell.n_users))
    for start in range(0, runs, _BLOCK):
        stop = min(runs, start + _BLOCK)
        levels = rng.beta(a, b, (stop - start, cell.n_users))
        if cell.noise == "none":
            out[start:stop] = levels
            continue
        shape = (stop - start, cell.n_users, cell.pairs)
        scores = np.clip(levels[..., None] + _pair_noise(rng, shape, cell), 0.0, 1.0)
        scores[rng.random(shape) < cell.fail_rate] = 0.0
        out[start:stop] = scores.mean(axis=-1)
    return out


def simulate_interval(user_means_: FloatArray, confidence: float = 0.95) -> tuple[FloatArray, FloatArray]:
    """:func:`cluster_interval`'s bounds for many runs of equally many pairs per user, shape (runs, users).

    With equal pairs per user the per-cluster residual sums are proportional to the user means' residuals,
    so the CR1 SE and the skewness are those of the user means (a test checks this against the pairs).
    """
    x = np.asarray(user_means_, dtype=float)
    n = x.shape[-1]
    tail = (1 - confidence) / 2
    se = x.std(axis=-1, ddof=1) / math.sqrt(n)
    return mean_bounds(x.mean(axis=-1), se, np.full(x.shape[:-1], float(n)), skewness(x), tail, tail)


def bet_floor(user_means_: FloatArray, threshold: float, alpha: float) -> IntArray:
    """Per run, the fewest users after which *any* valid bet on "mean > threshold" could reach 1/alpha.

    A bet must survive a user at 0, so its stake is at most 1/threshold and a user at x multiplies its
    wealth by at most x/threshold: the all-in bet's wealth is an upper bound on every strategy's. Runs it
    never takes over 1/alpha count as one past the last user.
    """
    x = np.asarray(user_means_, dtype=float)
    with np.errstate(divide="ignore"):
        log_wealth = np.cumsum(np.log(x / threshold), axis=-1)
    reached = log_wealth >= math.log(1 / alpha)
    first = np.argmax(reached, axis=-1) + 1
    return np.asarray(np.where(reached.any(axis=-1), first, x.shape[-1] + 1), dtype=np.int64)


def simulate(sensitivity: Sequence[Sequence[float]], perturbed: Sequence[Sequence[float]], *,
             combined_threshold: float, settings: GuardSettings) -> list[str]:
    """``guard.evaluate``'s outcome (INSENSITIVE, INCONCLUSIVE or PASS) for many simulated runs at once
    (benchmarks, tests).

    Row ``r`` of ``sensitivity`` / ``perturbed`` holds one run's per-user S = ρ_floor − ρ_swap and ρ_pert
    (one case per user; S exactly 0 stands for a word-for-word identical text). The same rule as
    ``guard.evaluate``, vectorised (tests check that the two agree).
    """
    from scipy import stats as sps

    s = np.asarray(sensitivity, dtype=float)
    p = np.asarray(perturbed, dtype=float)
    _, n = s.shape

    def lower(k: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(k > 0, sps.beta.ppf(settings.alpha / SHARE_RULES, np.maximum(k, 1), n - k + 1),
                            0.0)

    k = ((s < settings.min_sensitivity) & (p >= combined_threshold)).sum(axis=1)
    insensitive = ((lower(k) > settings.max_insensitive_share)
                   | (lower((s == 0).sum(axis=1)) > settings.max_identical_share))  # each at alpha / 2
    # PASS: the distribution-free bound of the mean S (floor 1, so S ≥ 0) and the share not above its limit
    low = free_lower_bounds(s, settings.alpha, 0.0)
    unshown = (low <= settings.min_sensitivity) | (k / n > settings.max_insensitive_share)
    return [INSENSITIVE if i else INCONCLUSIVE if u else PASS
            for i, u in zip(insensitive, unshown, strict=True)]


def simulate_relative(delta: Sequence[Sequence[float]], sensitivity: Sequence[Sequence[float]], *,
                      settings: GuardSettings, share: float = FIELLER_SHARE) -> list[bool]:
    """The relative-robustness FAIL of ``guard.evaluate`` for many simulated runs at once: row ``r`` holds
    one run's per-user mean Δ = ρ_pert − ρ_swap and S = ρ_floor − ρ_swap over the user's cases (NaN: a user
    with no measured case). True where R's one-sided upper bound at ``share`` of alpha is below
    ``settings.min_relative`` (tests check it against ``guard.evaluate``)."""
    from scipy import stats as sps

    d = np.asarray(delta, dtype=float)
    s = np.asarray(sensitivity, dtype=float)
    if settings.min_relative is None:
        return [False] * len(d)
    g = (~np.isnan(d)).sum(axis=1)
    total = np.nansum(s, axis=1)
    # Fieller's upper bound (stats.fieller_interval at 1 − 2·share·alpha two-sided): the larger root of
    # (d̄ − r·s̄)² = c·(v_dd − 2r·v_ds + r²·v_ss); unbounded when s̄² ≤ c·v_ss.
    with np.errstate(divide="ignore", invalid="ignore"):
        c = sps.t.ppf(1 - share * settings.alpha, g - 1) ** 2 / g
        dm, sm = np.nanmean(d, axis=1), np.nanmean(s, axis=1)
        v_dd, v_ss = np.nanvar(d, axis=1, ddof=1), np.nanvar(s, axis=1, ddof=1)
        v_ds = np.nansum((d - dm[:, None]) * (s - sm[:, None]), axis=1) / (g - 1)
        a, b, e = sm * sm - c * v_ss, dm * sm - c * v_ds, dm * dm - c * v_dd
        high = np.where(a > 0, (b + np.sqrt(np.maximum(0.0, b * b - a * e))) / a, np.inf)
    return [bool(v) for v in (g >= 2) & (total > 1e-12) & (high < settings.min_relative)]
