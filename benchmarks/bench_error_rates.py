"""Every enforced check's error rates under both decisions, on the same draws (issue 63's table).

For each check: the false FAIL at its limit (for S, which must show PASS: the false PASS at its limit) and the
false PASS at a clear failure — the package's ``stats.users_to_catch`` definition, half way from the limit
to the nearer wall, 1.5× a limit below 0.5 (for S: half its limit) — at 5, 10, 20, 50 and 100 users, under
``decision=mean`` and ``decision=sequential``, with one case a user, four (independent or all alike), a fifth
of the replies lost (a user keeps at least one case), and for R niche users (their control lies far away).

- **mean**: the check's fixed rule on every user, at the alpha it has under ``decision=mean``;
- **sequential**: its anytime test (``stats.simulate_one_sided``, a tenth of the check's alpha; the attacks'
  half, beside their interval's other half) on the users in order, and its fixed rule on every user at what
  the test leaves (a slice of the default gate holds a PASS for every planned user: an enforced R). S, whose
  PASS test does not run there, is shown where R is not gated: its test at alpha/2 may end the slice once the
  copy rate's fixed rule has its users, and its bound at alpha/2 decides on the users measured.

Share rules come from ``bench_sequential_pass.RULES`` (their limits and alphas), R from
``bench_guard.moving_population`` (a perturbation whose move does not grow with S: the skewed case) through
``simulation.simulate_relative`` (Fieller's bound, as ``guard.evaluate``), S from ``bench_guard.at_mean``.

    .venv/bin/python benchmarks/bench_error_rates.py [--runs 4000] [--seed 1]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from bench_guard import SETTINGS, at_mean, at_r, moving_population
from bench_sequential_pass import RULES, Rule, fixed_fails
from simulation import simulate_relative

from pytest_robustexplain.checks.controls import FIELLER_SHARE, relative_excess_limit
from pytest_robustexplain.stats import ABOVE, BELOW, check_alphas, simulate_one_sided, users_to_catch
from pytest_robustexplain.stats.intervals import free_lower_bounds

SIZES = (5, 10, 20, 50, 100)
ALPHA = SETTINGS.alpha
Rng = np.random.Generator
# (label, cases a user, all alike, share of replies lost)
SHAPES = (("1 case a user", 1, False, 0.0), ("4 cases, independent", 4, False, 0.0),
          ("4 cases, all alike", 4, True, 0.0), ("4 cases, a fifth lost", 4, False, 0.2))


def shares(rng: Rng, rate: float, shape: tuple[int, int], cases: int, alike: bool, lost: float) -> np.ndarray:
    """Each user's share of flagged cases among those not lost (at least one kept)."""
    kept = np.maximum(rng.binomial(cases, 1 - lost, shape), 1)
    if alike:
        return (rng.random(shape) < rate).astype(float)
    return rng.binomial(kept, rate) / kept


def share_rates(rule: Rule, values: np.ndarray) -> tuple[float, float]:
    """(P(FAIL) under mean, under sequential) on the same users."""
    runs, planned = values.shape
    everyone = np.full(runs, planned)
    mean = fixed_fails(values, everyone, rule, rule.fixed)
    rejected, _ = simulate_one_sided(values, rule.limit, rule.side, alpha=rule.test)
    return float(mean.mean()), float((rejected | fixed_fails(values, everyone, rule, rule.kept)).mean())


def relative_rates(delta: np.ndarray, sens: np.ndarray) -> tuple[float, float]:
    """(P(FAIL) under mean, under sequential) of R ≥ 0.5: Fieller's bound at FIELLER_SHARE of the check's
    alpha (of what its test leaves, under sequential) and R's test on each user's rescaled excess."""
    mean = np.array(simulate_relative(delta, sens, settings=SETTINGS))
    kept = check_alphas(ALPHA)[1] / ALPHA
    fixed = np.array(simulate_relative(delta, sens, settings=SETTINGS, share=FIELLER_SHARE * kept))
    limit = relative_excess_limit(0.5)
    # A user whose every reply was lost gives the test nothing: fed at the limit, it moves no wealth.
    excess = np.where(np.isnan(delta), limit, np.clip((delta - 0.5 * sens + 1.0) / 1.5, 0.0, 1.0))
    rejected, _ = simulate_one_sided(excess, limit, BELOW, alpha=check_alphas(ALPHA)[0])
    return float(mean.mean()), float((rejected | fixed).mean())


def sensitivity_rates(s: np.ndarray) -> tuple[float, float]:
    """(P(PASS) under mean, under sequential where R is not gated) of S > 0.05: the distribution-free bound
    and the ignored share's point rule, on every user (mean) or on the users until S's test rejected, no
    sooner than the copy rate's fixed rule needs (sequential, each at alpha/2)."""
    runs, planned = s.shape
    ignored = np.cumsum(s < SETTINGS.min_sensitivity, axis=1) / np.arange(1, planned + 1)

    def passes(n: np.ndarray, alpha: float) -> np.ndarray:
        rows = np.arange(runs)
        bounds = np.array([free_lower_bounds(s[i:i + 1, :m], alpha, 0.0)[0]
                           for i, m in zip(rows, n, strict=True)])
        return (bounds > SETTINGS.min_sensitivity) & (ignored[rows, n - 1] <= SETTINGS.max_insensitive_share)

    mean = passes(np.full(runs, planned), ALPHA)
    rejected, at = simulate_one_sided(s, SETTINGS.min_sensitivity, ABOVE, alpha=ALPHA / 2)
    hold = users_to_catch(SETTINGS.max_copy_rate, ABOVE, check_alphas(ALPHA)[1], planned)
    stop = np.where(rejected, np.maximum(at, hold), planned)
    return float(mean.mean()), float(passes(stop, ALPHA / 2).mean())


def table(runs: int, rng: Rng) -> None:
    print(f"P(error), {runs} runs a cell, mean | sequential on the same draws: at the limit a false FAIL (S: "
          "a false PASS), at a clear failure a false PASS")
    print(f"{'check':<30}{'population':<30}{'case':<7}" + "".join(f"{f'G={n}':>13}" for n in SIZES))
    worst = 0.0
    rows: list[tuple[str, str, str, Callable[[tuple[int, int]], tuple[float, float]]]] = []
    for rule in RULES:
        for label, cases, alike, lost in SHAPES:
            for case, rate in (("limit", rule.limit), ("clear", rule.clear())):
                def draw(shape: tuple[int, int], rule: Rule = rule, rate: float = rate, cases: int = cases,
                         alike: bool = alike, lost: float = lost) -> tuple[float, float]:
                    return share_rates(rule, shares(rng, rate, shape, cases, alike, lost))
                rows.append((rule.name, label, case, draw))
    for niche, cases, lost in ((0.0, 1, 0.0), (0.15, 1, 0.0), (0.15, 4, 0.0), (0.15, 4, 0.2)):
        label = f"{'niche 15 %' if niche else 'no niche'}, {cases} case{'s' if cases > 1 else ''}" + (
            ", 1/5 lost" if lost else "")
        for case, target in (("limit", 0.5), ("clear", 0.25)):
            users = at_r(lambda m, n=niche, c=cases, f=lost: moving_population(m, n, c, f), target, rng,
                         0.01, 0.9)
            rows.append(("R ≥ 0.5", label, case, lambda shape, u=users: relative_rates(*u(rng, shape))))
    for q in (0.15, 0.25):
        for case, target in (("limit", 0.05), ("clear", 0.025)):
            users = at_mean(q, rng, target)
            rows.append(("S > 0.05 (R not gated)", f"{q:.0%} ignored, bunched", case,
                         lambda shape, u=users: sensitivity_rates(u(rng, shape)[0])))
    excess = 0.0
    for name, label, case, draw in rows:
        cells = []
        for n in SIZES:
            rates = draw((runs, n))
            if case == "clear" and not name.startswith("S "):  # a FAIL it missed: a false PASS
                rates = (1 - rates[0], 1 - rates[1])
            if case == "limit":
                worst = max(worst, *rates)
            elif case == "clear":
                excess = max(excess, rates[1] - rates[0])
            cells.append("|".join(f"{100 * r:.1f}" for r in rates))
        print(f"{name:<30}{label:<30}{case:<7}" + "".join(f"{c:>13}" for c in cells), flush=True)
    spread = 2 * np.sqrt(ALPHA * (1 - ALPHA) / runs)
    print(f"largest error at a limit, every shape and G: {100 * worst:.1f} % — target "
          f"≤ {100 * ALPHA:g} % (± {100 * spread:.1f}, two standard errors) "
          f"{'OK' if worst <= ALPHA + spread else 'MISSED'}")
    print(f"largest excess of a sequential false PASS over mean's at a clear failure: {100 * excess:+.1f} "
          "points")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    table(args.runs, np.random.default_rng(args.seed))


if __name__ == "__main__":
    main()
