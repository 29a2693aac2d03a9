"""How often the run history's change test (``stats.trend.change_point``) says "changed" when nothing did, how
often it finds a real drop, and where it puts it.

Each cell draws ``runs`` values of ρ for one test in run order and calls the package's own test at alpha
0.05. Without a change the values are exchangeable draws from populations shaped like run-to-run ρ: clipped
normal (0.7 ± 0.05), skewed (Beta(8, 2)), heavy-tailed (0.7 + 0.03·t₂, clipped to [0, 1]), piled at the top
(0.97 + N(0, 0.05) clipped at 1: many runs at exactly 1.0), and rounded to two decimals (ties, as a warm
cache repeats a value). Two shapes the test does not assume are measured too, to say how far the claim
goes: runs correlated with the previous one (AR(1), φ = 0.5) and a slow slide (−0.003 a run, no step).
With a step the population's level drops by 0.05 or 0.10 (its spread 0.05) in the middle of the history
or at 80 % of it; "found" is a change at p ≤ 0.05, "placed" one whose first run after the change is within
one run of the true one.

    .venv/bin/python benchmarks/bench_history_trend.py [--reps 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from pytest_robustexplain.stats.trend import change_point

RUNS = (8, 10, 15, 20, 30, 50)
Draw = Callable[[np.random.Generator, int], np.ndarray]


def _clip(values: np.ndarray) -> np.ndarray:
    return np.clip(values, 0.0, 1.0)


NULLS: dict[str, Draw] = {
    "clipped normal": lambda rng, n: _clip(rng.normal(0.7, 0.05, n)),
    "skewed Beta(8,2)": lambda rng, n: rng.beta(8, 2, n),
    "heavy-tailed t2": lambda rng, n: _clip(0.7 + 0.03 * rng.standard_t(2, n)),
    "piled at 1.0": lambda rng, n: _clip(rng.normal(0.97, 0.05, n)),
    "rounded (ties)": lambda rng, n: np.round(_clip(rng.normal(0.7, 0.05, n)), 2),
}


def _ar1(rng: np.random.Generator, n: int, phi: float = 0.5) -> np.ndarray:
    noise = rng.normal(0, 0.05 * np.sqrt(1 - phi ** 2), n)
    out = np.empty(n)
    out[0] = rng.normal(0, 0.05)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + noise[i]
    return _clip(0.7 + out)


OUTSIDE: dict[str, Draw] = {
    "AR(1) phi=0.5": _ar1,
    "slide -0.003/run": lambda rng, n: _clip(rng.normal(0.7, 0.05, n) - 0.003 * np.arange(n)),
}


def rate(draw: Draw, n: int, reps: int, rng: np.random.Generator) -> float:
    return sum(_changed(change_point(list(draw(rng, n)))) for _ in range(reps)) / reps


def _changed(found: object) -> bool:
    return found is not None and found.significant  # type: ignore[attr-defined]


def step(rng: np.random.Generator, n: int, at: int, drop: float) -> np.ndarray:
    values = rng.normal(0.7, 0.05, n)
    values[at:] -= drop
    return _clip(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    reps = args.reps
    se = 100 * np.sqrt(0.05 * 0.95 / reps)
    print(f"False 'changed' at alpha 0.05 (% of {reps} histories; ±{se:.1f} one SE at 5 %)")
    print(f"{'population':<20}" + "".join(f"{n:>8}" for n in RUNS))
    for name, draw in {**NULLS, **OUTSIDE}.items():
        if name in OUTSIDE and name == next(iter(OUTSIDE)):
            print("-- outside what the test assumes:")
        print(f"{name:<20}" + "".join(f"{100 * rate(draw, n, reps, rng):>8.1f}" for n in RUNS))
    print()
    print(f"A drop (spread 0.05): found at p <= 0.05 / placed within one run (% of {reps // 2} histories)")
    print(f"{'drop, where':<20}" + "".join(f"{n:>12}" for n in RUNS))
    for drop in (0.05, 0.10):
        for where, share in (("middle", 0.5), ("at 80 %", 0.8)):
            cells = []
            for n in RUNS:
                at = min(n - 1, max(1, round(n * share)))
                found = placed = 0
                for _ in range(reps // 2):
                    got = change_point(list(step(rng, n, at, drop)))
                    if _changed(got):
                        found += 1
                        placed += abs(got.at - at) <= 1  # type: ignore[union-attr]
                cells.append(f"{100 * found / (reps // 2):.0f}/{100 * placed / (reps // 2):.0f}")
            print(f"{f'{drop:.2f}, {where}':<20}" + "".join(f"{c:>12}" for c in cells))


if __name__ == "__main__":
    main()
