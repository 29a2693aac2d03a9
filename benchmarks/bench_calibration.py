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
valid bet could need, and that floor at a gap of 0.1.

    .venv/bin/python benchmarks/bench_calibration.py [--runs 10000] [--seed 1] [--quick]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="simulated runs per cell")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true",
                        help="the skewed cell only (level 0.89, normal noise)")
    args = parser.parse_args()
    grid(args.runs, args.seed, args.quick)
    clear_case(args.runs, args.seed)


if __name__ == "__main__":
    main()
