"""Calibration of every interval and verdict rule on skewed, clipped, heavy-tailed per-user means.

Every statistical figure in README "Verdicts" and docs/statistics.md comes from this script. Each cell
draws ``--runs`` simulated gated runs from :mod:`pytest_robustexplain.stats.calibration` (user levels from
a Beta distribution with sd 0.10, 25 pairs per user with normal or t₃ noise, 5 % generation failures
scored 0, clipped to [0, 1]; ``none`` = the Beta draws are the user means) and applies the rules
themselves, vectorised: the interval ``cluster_interval`` reports, ``gate(mode="confident")`` and the
sequential test (``SequentialGate``) with its fallback, alpha 0.05. Columns:

- ``cover``: share of 95 % intervals that contain the true mean μ (computed by quadrature);
- ``fP``/``fF``: false PASS / false FAIL with the threshold at the truth (τ = μ), confident and sequential;
- ``pwP``/``pwF``: PASS power at τ = μ − 0.1 and FAIL power at τ = μ + 0.1 (blank off the scale);
- ``users``: mean users the sequential test used at τ = μ − 0.1 (of G).

Then the sequential test on the clear case (ρ ≈ 0.93, gate 0.5, 20 users) against the fewest users any
valid bet could need, that floor at a gap of 0.1, and FAIL power of ρ with the four metrics at
``min_metric = 0`` (they take no share of alpha) and at 0.05 (they do).

    .venv/bin/python benchmarks/bench_calibration.py [--runs 10000] [--seed 1] [--quick] [--candidates]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from pytest_robustexplain.stats import DEFAULT_FALLBACK_SHARE, simulate_confident, simulate_sequential
from pytest_robustexplain.stats.calibration import Cell, bet_floor, simulate_interval, true_mean, user_means

ALPHA = 0.05
GAP = 0.1
LEVELS = (0.05, 0.3, 0.5, 0.7, 0.89, 0.95)
USERS = (10, 20, 40)
NOISES = ("none", "normal", "t3")
HEADER = (f"{'noise':6} {'level':>5} {'μ':>5} {'G':>3} {'cover':>6} | {'conf fP':>7} {'fF':>6} {'pwP':>5} "
          f"{'pwF':>5} | {'seq fP':>6} {'fF':>6} {'pwP':>5} {'pwF':>5} {'users':>5}")


def _rates(x: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confident codes, sequential codes, sequential users) at threshold ``tau``."""
    thresholds = {"combined": tau}
    seq, used = simulate_sequential(x[..., None], thresholds, alpha=ALPHA)
    return simulate_confident(x[..., None], thresholds, alpha=ALPHA), seq, used


def _power(x: np.ndarray, tau: float, code: int) -> tuple[str, str, np.ndarray | None]:
    if not 0 < tau < 1:
        return "", "", None
    conf, seq, used = _rates(x, tau)
    return f"{np.mean(conf == code):.3f}", f"{np.mean(seq == code):.3f}", used


def cell_row(cell: Cell, runs: int, rng: np.random.Generator) -> str:
    mu = true_mean(cell)
    x = user_means(cell, runs, rng)
    low, high = simulate_interval(x)
    cover = np.mean((low <= mu) & (mu <= high))
    conf, seq, _ = _rates(x, mu)
    c_pass, s_pass, used = _power(x, mu - GAP, 1)
    c_fail, s_fail, _ = _power(x, mu + GAP, -1)
    users = f"{used.mean():.1f}" if used is not None else ""
    return (f"{cell.noise:6} {cell.level_mean:5.2f} {mu:5.3f} {cell.n_users:3d} {cover:6.3f} | "
            f"{np.mean(conf == 1):7.3f} {np.mean(conf == -1):6.3f} {c_pass:>5} {c_fail:>5} | "
            f"{np.mean(seq == 1):6.3f} {np.mean(seq == -1):6.3f} {s_pass:>5} {s_fail:>5} {users:>5}")


def grid(runs: int, seed: int, quick: bool) -> None:
    rng = np.random.default_rng(seed)
    print(f"{runs} runs per cell, alpha {ALPHA}; binomial sd of a rate near 0.05: "
          f"{math.sqrt(ALPHA * (1 - ALPHA) / runs):.4f}")
    print(HEADER)
    for noise in NOISES[1:2] if quick else NOISES:
        for level in (0.89,) if quick else LEVELS:
            for n_users in USERS:
                print(cell_row(Cell(level, n_users, noise=noise), runs, rng), flush=True)


def clear_case(runs: int, seed: int) -> None:
    """Sequential users on ρ ≈ 0.93 (users' sd 0.05), gate 0.5, 20 users, against the all-in bet's floor."""
    rng = np.random.default_rng(seed)
    x = user_means(Cell(0.93, 20, user_sd=0.05, noise="none"), runs, rng)
    codes, used = simulate_sequential(x[..., None], {"combined": 0.5}, alpha=ALPHA)
    alpha_bets = ALPHA * (1 - DEFAULT_FALLBACK_SHARE)
    floor = bet_floor(x, 0.5, alpha_bets).mean()
    floor_all = bet_floor(x, 0.5, ALPHA).mean()
    ratio = used.mean() / floor
    print(f"\nclear case (ρ ≈ 0.93, gate 0.5, 20 users): PASS {np.mean(codes == 1):.3f}, "
          f"users {used.mean():.2f}; floor {floor:.2f} at the bets' alpha {alpha_bets:g} "
          f"(ratio {ratio:.2f}, target ≤ 1.25: {'OK' if ratio <= 1.25 else 'MISSED'}); "
          f"{floor_all:.2f} if all of alpha {ALPHA:g} went to bets")
    for a in (ALPHA, alpha_bets):
        need = math.ceil(math.log(1 / a) / math.log(1 + GAP / 0.5))
        print(f"gap {GAP} at gate 0.5: any valid bet needs ≥ {need} users to reach 1/{a:g}")


def alpha_split(runs: int, seed: int) -> None:
    """FAIL power of ρ alone, with the four metrics at threshold 0, and with them gated (passing easily)."""
    rng = np.random.default_rng(seed)
    print("\nFAIL power at gate 0.5, true mean of ρ 0.45 / 0.40 (user means Beta, sd 0.10), by min_metric:")
    for level, n_users in ((0.45, 20), (0.40, 40)):
        rho = user_means(Cell(level, n_users, noise="none"), runs, rng)[..., None]
        metrics = user_means(Cell(0.6, n_users), runs * 4, rng).reshape(runs, 4, n_users).transpose(0, 2, 1)
        x = np.concatenate([rho, metrics], axis=-1)
        for label, metric_threshold in (("ρ alone", None), ("metrics at 0", 0.0), ("metrics at 0.05", 0.05)):
            thresholds = {"combined": 0.5}
            if metric_threshold is not None:
                thresholds |= {m: metric_threshold for m in ("semantic", "keyword", "structural", "length")}
            data = x[..., :1] if metric_threshold is None else x
            conf = simulate_confident(data, thresholds, alpha=ALPHA)
            seq, used = simulate_sequential(data, thresholds, alpha=ALPHA)
            print(f"  G={n_users:2d} level {level:.2f} {label:16}: confident {np.mean(conf == -1):.3f}, "
                  f"sequential {np.mean(seq == -1):.3f} using {used.mean():.1f} users")


def _t_bounds(x: np.ndarray, tail: float) -> tuple[np.ndarray, np.ndarray]:
    from scipy import stats as sps

    n = x.shape[1]
    half = sps.t.ppf(1 - tail, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n)
    return x.mean(axis=1) - half, x.mean(axis=1) + half


def _hall_bounds(x: np.ndarray, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """Hall's correction with the measured skewness only (the confident rule before issue 17)."""
    from pytest_robustexplain.stats import intervals

    margin, limit = intervals._SKEW_MARGIN, intervals._SKEW_LIMIT
    intervals._SKEW_MARGIN, intervals._SKEW_LIMIT = 0.0, math.inf
    try:
        return simulate_interval(x, 1 - 2 * tail)
    finally:
        intervals._SKEW_MARGIN, intervals._SKEW_LIMIT = margin, limit


def _logit_bounds(x: np.ndarray, tail: float) -> tuple[np.ndarray, np.ndarray]:
    """t interval for logit(mean) by the delta method, mapped back."""
    from scipy import special
    from scipy import stats as sps

    n = x.shape[1]
    mean = np.clip(x.mean(axis=1), 1e-6, 1 - 1e-6)
    half = sps.t.ppf(1 - tail, n - 1) * x.std(axis=1, ddof=1) / math.sqrt(n) / (mean * (1 - mean))
    centre = special.logit(mean)
    return special.expit(centre - half), special.expit(centre + half)


def _bootstrap_t_bounds(x: np.ndarray, tail: float, rng: np.random.Generator,
                        resamples: int = 999) -> tuple[np.ndarray, np.ndarray]:
    """Cluster bootstrap-t: users resampled with replacement, quantiles of the Studentized mean."""
    runs, n = x.shape
    mean, se = x.mean(axis=1), x.std(axis=1, ddof=1) / math.sqrt(n)
    low, high = np.empty(runs), np.empty(runs)
    for start in range(0, runs, 250):
        block = x[start:start + 250]
        picks = np.take_along_axis(block[:, None, :], rng.integers(0, n, (block.shape[0], resamples, n)), 2)
        boot_se = picks.std(axis=2, ddof=1) / math.sqrt(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(boot_se > 0, (picks.mean(axis=2) - mean[start:start + 250, None]) / boot_se, 0.0)
        q_low, q_high = np.quantile(t, [tail, 1 - tail], axis=1)
        low[start:start + 250] = mean[start:start + 250] - q_high * se[start:start + 250]
        high[start:start + 250] = mean[start:start + 250] - q_low * se[start:start + 250]
    return low, high


def candidates(runs: int, seed: int) -> None:
    """The intervals considered for issue 17, on the skewed cells and the symmetric one (the price)."""
    rng = np.random.default_rng(seed)
    methods = {"t": _t_bounds, "Hall": _hall_bounds, "logit t": _logit_bounds,
               "bootstrap-t": lambda x, tail: _bootstrap_t_bounds(x, tail, rng),
               "chosen": lambda x, tail: simulate_interval(x, 1 - 2 * tail)}
    print("\ncandidate intervals: 95 % coverage / one-sided 5 % false PASS at τ = μ / "
          "PASS power at μ − 0.1 / mean width")
    for noise, level, n_users in (("normal", 0.89, 10), ("normal", 0.89, 20), ("none", 0.89, 10),
                                  ("none", 0.89, 20), ("normal", 0.5, 10), ("normal", 0.5, 20)):
        cell = Cell(level, n_users, noise=noise)
        mu, x = true_mean(cell), user_means(cell, runs, rng)
        print(f"  {noise:6} level {level:.2f} G={n_users:2d}:")
        for name, method in methods.items():
            low, high = method(x, 0.025)
            one_sided, _ = method(x, 0.05)
            low, high = np.clip(low, 0, 1), np.clip(high, 0, 1)
            cover, width = np.mean((low <= mu) & (mu <= high)), np.mean(high - low)
            print(f"    {name:12} {cover:.3f} / {np.mean(one_sided >= mu):.3f} / "
                  f"{np.mean(one_sided >= mu - GAP):.3f} / {width:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="simulated runs per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true",
                        help="the skewed cell only (level 0.89, normal noise)")
    parser.add_argument("--candidates", action="store_true",
                        help="also compare the intervals considered (t, Hall, logit, bootstrap-t)")
    args = parser.parse_args()
    grid(args.runs, args.seed, args.quick)
    clear_case(args.runs, args.seed)
    alpha_split(args.runs, args.seed)
    if args.candidates:
        candidates(min(args.runs, 4000), args.seed)


if __name__ == "__main__":
    main()
