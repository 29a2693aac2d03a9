"""The balanced design against the full one: at equal calls, how often does each decide, and is α kept?

Every figure about ``design=balanced`` in README and docs/statistics.md comes from this script. One kind's
gate under the confident rule (alpha 0.05), on runs drawn like the calibration benchmark's
(``benchmarks/simulation.py``): user levels from a Beta distribution with sd 0.10, pair
noise normal or Student t₃ (sd 0.15), 5 % generation failures scored 0, scores clipped to [0, 1] — plus a
severity effect: a pair at severity s scores δ·(3 − s) above its user's level (severity degradation 4δ from
L1 to L5).

- ``full``: G users, each the kind at all five severities (5 pairs a user; 27 calls a user on the paper's
  five kinds, with the original and the cross-user control);
- ``balanced``: each user the kind at one severity, rotated over the users (7 calls a user), with as many
  users as the full design's calls buy (rounded to a multiple of five, so every severity has as many users;
  the calls column says what each spent), and with the full design's own G (a quarter of its calls).

Columns: ``decided`` at τ = μ − 0.1 and μ + 0.1 (PASS and FAIL power: the share of runs that decide, and
decide right); ``fP``/``fF``: false PASS / FAIL with the threshold at the truth (τ = μ, by Monte Carlo over
2,000,000 pairs). The balanced design wins when users differ more than the severities do: its variance is
(σ_user² + σ_sev² + σ_pair²)/G_b against (σ_user² + σ_pair²/5)/G.

    .venv/bin/python benchmarks/bench_design.py [--runs 20000] [--seed 1] [--fail-rate 0.05]
        [--show t3,0.89,0.02]
    .venv/bin/python benchmarks/bench_design.py --failure-weights [--runs 5000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from simulation import Cell

from pytest_robustexplain.stats import intervals, simulate_confident

ALPHA = 0.05
GAP = 0.1
SEVERITIES = 5
CALLS_FULL, CALLS_BALANCED = 27, 7  # per user on the five kinds: originals, pairs, cross-user control
SIZES = (3, 5, 10, 20)
FAIL_RATE = 0.05


def _offsets(delta: float) -> np.ndarray:
    return delta * (3 - np.arange(1, SEVERITIES + 1))


def _noise(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    if kind == "normal":
        return rng.normal(0.0, 0.15, shape)
    return np.asarray(rng.standard_t(3, shape) * (0.15 / math.sqrt(3.0)))


def _scores(rng: np.random.Generator, levels: np.ndarray, offsets: np.ndarray, noise: str) -> np.ndarray:
    scores = np.clip(levels + offsets + _noise(rng, levels.shape, noise), 0.0, 1.0)
    scores[rng.random(levels.shape) < FAIL_RATE] = 0.0
    return scores


def user_means(rng: np.random.Generator, cell: Cell, runs: int, users: int, delta: float,
               design: str) -> np.ndarray:
    """Per-user means (runs, users) of one kind's slice under ``design``."""
    a, b = cell.beta
    levels = rng.beta(a, b, (runs, users))
    if design == "full":  # every user at every severity
        offsets = _offsets(delta)[None, None, :]
        return _scores(rng, np.repeat(levels[..., None], SEVERITIES, axis=-1), offsets, cell.noise).mean(-1)
    offsets = _offsets(delta)[np.arange(users) % SEVERITIES][None, :]  # the rotation, one pair a user
    return _scores(rng, levels, offsets, cell.noise)


def truth(rng: np.random.Generator, cell: Cell, delta: float) -> float:
    means = user_means(rng, cell, 400, 5000, delta, "balanced")  # 5000 users: every severity 1000 times
    return float(means.mean())


def rates(means: np.ndarray, mu: float, pairs: int) -> tuple[float, float, float, float]:
    """(PASS power at μ − gap, FAIL power at μ + gap, false PASS, false FAIL at μ), users having ``pairs``
    pairs each (the rule's allowance for unseen failures depends on it)."""
    def codes(tau: float) -> np.ndarray:
        return simulate_confident(means[..., None], {"combined": tau}, alpha=ALPHA, pairs_per_user=pairs)

    pass_power = float(np.mean(codes(mu - GAP) == 1)) if mu - GAP > 0 else math.nan
    fail_power = float(np.mean(codes(mu + GAP) == -1)) if mu + GAP < 1 else math.nan
    at = codes(mu)
    return pass_power, fail_power, float(np.mean(at == 1)), float(np.mean(at == -1))


def balanced_users(users: int) -> int:
    """Users the full design's calls buy in the balanced one, a multiple of five (at least five)."""
    return max(SEVERITIES, SEVERITIES * round(users * CALLS_FULL / CALLS_BALANCED / SEVERITIES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fail-rate", type=float, default=0.05,
                        help="share of generation failures, scored 0 (default 0.05)")
    parser.add_argument("--failure-weights", action="store_true",
                        help="instead: the confident rule's allowance for unseen failures (weight / "
                             "pairs²) at several weights and failure rates (worst false PASS, cells won, "
                             "power at equal calls)")
    parser.add_argument("--show", metavar="NOISE,LEVEL,DELTA",
                        help="print only this population's rows (the summary still covers every cell): "
                             "what docs/statistics.md holds, t3,0.89,0.02")
    args = parser.parse_args()
    global FAIL_RATE
    rng = np.random.default_rng(args.seed)
    if args.failure_weights:
        _failure_weights(rng, args.runs)
        return
    FAIL_RATE = args.fail_rate
    print(f"{'noise':6} {'level':>5} {'δ':>4} {'μ':>5} {'design':>14} {'G':>3} {'calls':>5} | "
          f"{'decided at μ−0.1':>16} {'μ+0.1':>6} | {'fP':>5} {'fF':>5}")
    worst_pass, worst_fail, wins, total, _ = _grid(rng, args.runs, show=args.show or True)
    print(f"\nbalanced at equal calls decides at least as often as full in {wins} of {total} cells; "
          f"largest false PASS of any design: {100 * worst_pass:.1f} %, false FAIL {100 * worst_fail:.1f} % "
          f"(alpha {100 * ALPHA:g} %)")


def _grid(rng: np.random.Generator, runs: int, *,
          show: bool | str) -> tuple[float, float, int, int, list[float]]:
    """Every cell: (largest false PASS, largest false FAIL, cells where balanced at equal calls decides at
    least as often as full, cells, balanced's power at equal calls in each). ``show``: print every row
    (True), none (False) or one population's ("t3,0.89,0.02")."""
    worst_pass = worst_fail = 0.0
    wins = total = 0
    powers = []
    for noise in ("normal", "t3"):
        for level in (0.5, 0.7, 0.89):
            for delta in (0.02, 0.05):
                cell = Cell(level, 10, noise=noise)
                mu = truth(rng, cell, delta)
                for g in SIZES:
                    rows = (("full", g, "full"), ("balanced", balanced_users(g), "equal calls"),
                            ("balanced", g, "equal users"))
                    found = {}
                    for design, users, label in rows:
                        means = user_means(rng, cell, runs, users, delta, design)
                        found[label] = rates(means, mu, SEVERITIES if design == "full" else 1)
                        calls = users * (CALLS_FULL if design == "full" else CALLS_BALANCED)
                        p, f, fp, ff = found[label]
                        worst_pass, worst_fail = max(worst_pass, fp), max(worst_fail, ff)
                        if show is True or show == f"{noise},{level},{delta}":
                            print(f"{noise:6} {level:>5} {delta:>4} {mu:>5.3f} {label:>14} {users:>3} "
                                  f"{calls:>5} | {_pct(p):>16} {_pct(f):>6} | {100 * fp:>4.1f}% "
                                  f"{100 * ff:>4.1f}%", flush=True)
                    for index in (0, 1):
                        full, equal = found["full"][index], found["equal calls"][index]
                        if not math.isnan(full):
                            total += 1
                            wins += equal >= full - 0.005
                            powers.append(equal)
    return worst_pass, worst_fail, wins, total, powers


def _failure_weights(rng: np.random.Generator, runs: int) -> None:
    """The allowance's weight (``intervals._UNSEEN_FAILURE``) against the failure rate."""
    global FAIL_RATE
    chosen = intervals._UNSEEN_FAILURE
    print(f"{'weight':>6} {'failures':>8} | {'worst fP':>8} {'fF':>5} {'cells won':>9} {'power':>6}")
    try:
        for weight in (0.0, 0.15, chosen, 0.5):
            intervals._UNSEEN_FAILURE = weight
            for rate in (0.0, 0.02, 0.05, 0.1, 0.2):
                FAIL_RATE = rate
                worst_pass, worst_fail, wins, total, powers = _grid(rng, runs, show=False)
                mark = " (chosen)" if weight == chosen else ""
                print(f"{weight:>6g} {100 * rate:>7g}% | {100 * worst_pass:>7.1f}% {100 * worst_fail:>4.1f}% "
                      f"{wins:>4}/{total:<4} "
                      f"{100 * float(np.mean(powers)):>5.1f}%{mark}", flush=True)
    finally:
        intervals._UNSEEN_FAILURE = chosen


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{100 * value:.1f}%"


if __name__ == "__main__":
    main()
