"""How often the guard calls a run INSENSITIVE, by how many users truly ignore the history.

Every number about the guard's error rates in docs/guard.md comes from this script. It draws simulated
runs user by user — S = ρ_floor − ρ_swap (how far another user's history moves the explanation) and
ρ_pert — from distributions shaped like measured scores (clipped to [0, 1], right-skewed, heavy-tailed;
see ``population`` below), and applies the guard's own rule (``guard.simulate``, which the tests check
against ``guard.evaluate``) with the default settings: min_sensitivity 0.05, max_insensitive_share 0.2,
alpha 0.05, combined threshold 0.5.

A user "truly ignores the history" when their S is below min_sensitivity; the population share of such
users is ``q``. The guard should say INSENSITIVE at most alpha of the time when q ≤ 0.2 (a false
INSENSITIVE) and as often as possible when q is well above it (power).

    .venv/bin/python benchmarks/bench_guard.py [--runs 20000] [--seed 1]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np

from pytest_robustexplain.guard import GuardSettings, simulate

Rng = np.random.Generator
Draw = Callable[[Rng, tuple[int, int]], tuple[np.ndarray, np.ndarray]]
SETTINGS = GuardSettings()
THRESHOLD = 0.5


def _sensitive_s(rng: Rng, shape: tuple[int, int], median: float) -> np.ndarray:
    """S of users who read the history: log-normal (right-skewed) with Student-t(3) log-noise (heavy
    tails both ways), clipped to [0, 1]. Median 0.18–0.38 matches the fake stable model and the template
    explainer (measured 0.13–0.42 per user)."""
    log_s = np.log(median) + 0.45 * rng.standard_t(3, size=shape)
    return np.clip(np.exp(log_s), 0.0, 1.0)


def _ignoring_s(rng: Rng, shape: tuple[int, int]) -> np.ndarray:
    """S of users whose explanation ignores the history: half identical texts (S = 0, as SmolLM2's long
    prompts and the constant explainer gave), half a few words apart (|t3| · 0.01)."""
    words = np.abs(rng.standard_t(3, size=shape)) * 0.01
    return np.clip(np.where(rng.random(shape) < 0.5, 0.0, words), 0.0, 1.0)


def _perturbed(rng: Rng, shape: tuple[int, int], ignoring: np.ndarray) -> np.ndarray:
    """ρ_pert: Beta(6, 2) (mean 0.75, left-skewed) for readers, near 1 for users whose text is ignored."""
    readers = rng.beta(6.0, 2.0, size=shape)
    blind = 1.0 - np.abs(rng.standard_t(3, size=shape)) * 0.01
    return np.clip(np.where(ignoring, blind, readers), 0.0, 1.0)


def population(q: float, median: float = 0.25) -> Draw:
    """A share ``q`` of users ignore the history; the others read it with median S ``median``."""
    def draw(rng: Rng, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        ignoring = rng.random(shape) < q
        s = np.where(ignoring, _ignoring_s(rng, shape), _sensitive_s(rng, shape, median))
        return s, _perturbed(rng, shape, ignoring)
    return draw


def true_share(draw: Draw, rng: Rng) -> float:
    """The population share of users with S below min_sensitivity (what the guard estimates)."""
    s, _ = draw(rng, (1, 400_000))
    return float((s < SETTINGS.min_sensitivity).mean())


SCENARIOS: list[tuple[str, Draw]] = [
    ("every user read (template-like, median S 0.38)", population(0.0, 0.38)),
    ("every user read (fake stable model, median S 0.18)", population(0.0, 0.18)),
    ("weak readers only (median S 0.10, heavy low tail)", population(0.0, 0.10)),
    ("10 % of users ignored", population(0.10)),
    ("at the limit: 20 % ignored (incl. the low tail)", population(0.185)),
    ("25 % ignored (SmolLM2 on 8 users: 2 of 8)", population(0.25)),
    ("35 % ignored", population(0.35)),
    ("50 % ignored", population(0.50)),
    ("every user ignored (constant or item-only)", population(1.0)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20_000, help="simulated runs per cell")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    sizes = (3, 8, 20, 50)
    print(f"P(INSENSITIVE) over {args.runs} simulated runs per cell; defaults min_sensitivity "
          f"{SETTINGS.min_sensitivity}, max_insensitive_share {SETTINGS.max_insensitive_share}, "
          f"alpha {SETTINGS.alpha}")
    print(f"{'population':<52}{'true q':>8}" + "".join(f"{f'{n} users':>11}" for n in sizes))
    worst_false = 0.0
    for label, draw in SCENARIOS:
        q = true_share(draw, rng)
        cells = []
        for n in sizes:
            s, p = draw(rng, (args.runs, n))
            rate = float(np.mean(simulate(s, p, combined_threshold=THRESHOLD, settings=SETTINGS)))
            cells.append(rate)
            if q <= SETTINGS.max_insensitive_share:
                worst_false = max(worst_false, rate)
        print(f"{label:<52}{q:>8.3f}" + "".join(f"{100 * c:>10.1f}%" for c in cells))
    verdict = "OK" if worst_false <= SETTINGS.alpha + 0.005 else "MISSED"
    print(f"\nlargest false INSENSITIVE rate (true q ≤ {SETTINGS.max_insensitive_share}): "
          f"{100 * worst_false:.1f} % — target ≤ {100 * SETTINGS.alpha:g} % (ratio "
          f"{worst_false / SETTINGS.alpha:.2f}) {verdict}")


if __name__ == "__main__":
    main()
