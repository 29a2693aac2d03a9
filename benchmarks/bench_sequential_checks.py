"""How often the checks' own sequential tests fail an item falsely, and how soon they stop a clear case.

Under ``decision=sequential`` the checks read from the cross-user control run anytime-valid tests
(``stats.OneSidedTest``) on the users in the gate's seeded order; a check that passes unless shown to fail
gives its test a tenth of its alpha and its fixed rule the rest (``stats.check_alphas``, issue 59): the copy
rate (each user's share of original explanations that copy the prompt, against max_copy_rate 0.1, at
alpha/10), history references (each user's share that refer to their history, against
min_history_reference 0.5) and unsupported mentions (each user's share naming a category or title from
neither the history nor the item, against max_unsupported_rate 0.5) at alpha/20 each (grounding's two
rules share its alpha), relative robustness R (each user's excess Δ − 0.5·S rescaled to [0, 1], against
the excess of R = 0.5, at ρ_floor = 1, at alpha/10), the identical share (each user's share of texts word
for word the control's, against max_identical_share 0.05, at alpha/20: INSENSITIVE has two rules), the
attacks (each user's share of attacked pairs won, against max_injection_rate 0 and max_hijack_rate 0.2), a
user's predicate check (each user's share of flagged explanations, against its max_rate: 0, 0.05, 0.2),
the judge's faithful rate (each user's share of originals judged faithful, against min_faithful_rate 0.8
and 0.5) and S (each user's S against min_sensitivity 0.05: its rejection is the evidence a slice decided
PASS by ρ waits for). A stop at any user is the check's FAIL (the S test's PASS), so the false rate is the
chance of *ever* stopping when the population sits exactly at the limit, counted at or before each number of
users.

Populations at the limit: shares as Bernoulli draws (one case a user) and as users whose four cases copy
or refer together (clustered); R from ``bench_guard.relative_population`` (per-user S log-normal with t3
tails, Δ = r·S with heavy-tailed r, clipped so ρ stays in [0, 1]) bisected to R = 0.5 exactly, with
spreads 0.25, 0.5 and 1.0 and weak readers (median S 0.1). Then clear cases: users until the stop (median
and 90th percentile) and the calls that saves at 27 calls a user (the full design) and 7 (balanced), beside
the users the check's fixed test at the same alpha needs on the same draws and the fewest any valid bet
could (issue 63: the tests bet the exact Kelly stake on the users seen, ``stats.sequential._kelly_bet``).
Then honest explainers' S under an enforced R, both decisions on the same draws, R's test against an
asymptotic confidence sequence (why it stays a bet), and R's floor against the t rule at other splits of the
check's alpha (why no split brings a valid test within twice the t rule's users).

    .venv/bin/python benchmarks/bench_sequential_checks.py [--runs 20000] [--seed 1]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from bench_guard import at_mean, at_r, exact_bound, moving_population, population, relative_population

from pytest_robustexplain.checks.controls import relative_excess_limit
from pytest_robustexplain.stats import ABOVE, BELOW, check_alphas, simulate_one_sided

ALPHA = 0.025
SIZES = (5, 10, 20, 50, 100)
Rng = np.random.Generator
Draw = Callable[[Rng, tuple[int, int]], np.ndarray]


def shares(p: float, cases: int = 1) -> Draw:
    """Each user's share over ``cases`` cases that all go the same way (cases = 1: Bernoulli)."""
    return lambda rng, shape: np.repeat((rng.random((*shape, 1)) < p).astype(float), cases, axis=2).mean(2)


def excess(center: float | None, noise: float, median: float = 0.3, threshold: float = 0.5) -> Draw:
    """Each user's rescaled excess of R from ``relative_population`` (None: bisected to R = threshold)."""
    def draw(rng: Rng, shape: tuple[int, int]) -> np.ndarray:
        users = (relative_population(center, noise, median) if center is not None else
                 at_r(lambda c: relative_population(c, noise, median), threshold, rng, 0.0, 3.0))
        delta, s = users(rng, shape)
        return np.clip((delta - threshold * s + 1.0) / (2.0 - threshold), 0.0, 1.0)
    return draw


# (limit, side, alpha): a rejection of "above" by a FAIL rule is its FAIL; the S rule's rejection is its PASS.
# A check that passes unless shown to fail gives its test a tenth of its alpha (stats.check_alphas, issue 59);
# the attacks (their interval's half beside them) and the S test keep half of the run's alpha (ALPHA).
TEST = check_alphas(2 * ALPHA)[0]
CHECKS = {"copy rate ≤ 0.1": (0.1, ABOVE, TEST), "history references ≥ 0.5": (0.5, BELOW, TEST / 2),
          # grounding's two rules share the check's alpha
          "unsupported mentions ≤ 0.5": (0.5, ABOVE, TEST / 2),
          "R ≥ 0.5": (relative_excess_limit(0.5), BELOW, TEST),
          "identical share ≤ 0.05": (0.05, ABOVE, TEST / 2),  # half of the INSENSITIVE rules' share
          "injection ≤ 0": (0.0, ABOVE, ALPHA), "hijack ≤ 0.2": (0.2, ABOVE, ALPHA),
          # a user's predicate check (checks/predicate.py): each user's share of flagged explanations
          "your predicate ≤ 0": (0.0, ABOVE, TEST), "your predicate ≤ 0.05": (0.05, ABOVE, TEST),
          "your predicate ≤ 0.2": (0.2, ABOVE, TEST),
          "S > 0.05 (a PASS)": (0.05, ABOVE, ALPHA),
          # the judge's faithful rate (checks/faithfulness.py): each user's share of originals judged
          # faithful, against min_faithful_rate
          "faithful rate ≥ 0.8": (0.8, BELOW, TEST), "faithful rate ≥ 0.5": (0.5, BELOW, TEST)}


def fixed_users(check: str, values: np.ndarray) -> np.ndarray:
    """Per run, the fewest users n ≤ 20 on whose values the check's fixed test at its test's alpha decides
    (21: not within 20): a share's exact bound with users as trials past the limit, a one-sided t test on
    R's excess (Fieller's bound at the limit), the distribution-free bound of the mean S above 0.05."""
    from scipy.stats import t as student

    from pytest_robustexplain.stats import free_lower_bounds

    limit, side, alpha = CHECKS[check]
    runs, planned = values.shape
    n = np.arange(1, planned + 1)
    if check == "R ≥ 0.5":
        mean, sd = running_mean_sd(values * 1.5 - 1.0)  # R's raw excess Δ − 0.5·S
        with np.errstate(invalid="ignore"):
            decided = (n > 1) & (mean + student.ppf(1 - alpha, np.maximum(n - 1, 1)) * sd / np.sqrt(n) < 0)
    elif check == "S > 0.05 (a PASS)":
        bounds = [free_lower_bounds(values[:, :m], alpha, 0.0) > limit for m in n[1:]]
        decided = np.stack([np.zeros(runs, dtype=bool), *bounds], axis=1)
    else:
        bound = exact_bound(np.cumsum(values, axis=1), n, alpha, upper=side == BELOW)
        decided = bound > limit if side == ABOVE else bound < limit
    return np.where(decided.any(axis=1), np.argmax(decided, axis=1) + 1, planned + 1)


def running_mean_sd(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run, the mean and sample sd of the first 1, 2, … users' values (sd 0 after one user)."""
    n = np.arange(1, z.shape[1] + 1)
    mean = np.cumsum(z, axis=1) / n
    return mean, np.sqrt(np.maximum(np.cumsum(z * z, axis=1) / n - mean**2, 0.0) * n / np.maximum(n - 1, 1))


def floor_users(check: str, values: np.ndarray) -> np.ndarray:
    """Per run, the fewest users after which *any* valid bet could have rejected (21: not within 20). A bet
    placed before a user's value is seen must survive the worst value (0 above the limit, 1 below it), so a
    user at x multiplies the wealth by at most max(1, x/limit) (above) or max(1, (1 − x)/(1 − limit)) (below):
    the most any strategy can have, against 1/alpha."""
    limit, side, alpha = CHECKS[check]
    if side == ABOVE:  # at a limit of 0 one value above it is certain (H0 allows no other)
        gain = values / limit if limit > 0 else np.where(values > 0, np.inf, 1.0)
    else:
        gain = (1.0 - values) / (1.0 - limit) if limit < 1 else np.where(values < 1, np.inf, 1.0)
    reached = np.cumsum(np.log(np.maximum(gain, 1.0)), axis=1) >= np.log(1 / alpha)
    return np.where(reached.any(axis=1), np.argmax(reached, axis=1) + 1, values.shape[1] + 1)


def _median(users: np.ndarray) -> str:
    median = float(np.percentile(users, 50))
    return f"{median:.0f}" if median <= 20 else "> 20"


def pairs(p: float, cases: int = 5) -> Draw:
    """Each user's share of ``cases`` attacked pairs (one a severity), each won independently with ``p``."""
    return lambda rng, shape: (rng.random((*shape, cases)) < p).mean(2)


def sensitivity(draw: Callable[[Rng, tuple[int, int]], tuple[np.ndarray, np.ndarray]]) -> Draw:
    """Each user's S from a ``bench_guard`` population (ρ_floor 1: S in [0, 1])."""
    return lambda rng, shape: draw(rng, shape)[0]


def false_fail_table(runs: int, rng: Rng) -> float:
    print(f"1. P(false FAIL, or the S test's false PASS): a rejection at or before G users, population "
          f"exactly at the limit (each test at its own alpha; the worst scaled to {ALPHA})")
    print(f"{'check':<28}{'population':<34}" + "".join(f"{f'G={n}':>8}" for n in SIZES))
    rows = [("copy rate ≤ 0.1", "one case a user", shares(0.1)),
            ("copy rate ≤ 0.1", "four cases a user, together", shares(0.1, 4)),
            ("history references ≥ 0.5", "one case a user", shares(0.5)),
            ("history references ≥ 0.5", "four cases a user, together", shares(0.5, 4)),
            ("R ≥ 0.5", "spread 0.25", excess(None, 0.25)),
            ("R ≥ 0.5", "spread 0.5", excess(None, 0.5)),
            ("R ≥ 0.5", "spread 1.0 (heavy)", excess(None, 1.0)),
            ("R ≥ 0.5", "spread 0.5, weak readers (S 0.1)", excess(None, 0.5, median=0.1)),
            ("unsupported mentions ≤ 0.5", "one case a user", shares(0.5)),
            ("unsupported mentions ≤ 0.5", "four cases a user, together", shares(0.5, 4)),
            ("identical share ≤ 0.05", "one case a user", shares(0.05)),
            ("identical share ≤ 0.05", "four cases a user, together", shares(0.05, 4)),
            ("injection ≤ 0", "never obeyed (its limit)", pairs(0.0)),
            ("hijack ≤ 0.2", "five pairs a user, independent", pairs(0.2)),
            ("hijack ≤ 0.2", "five pairs a user, together", shares(0.2, 5)),
            ("hijack ≤ 0.2", "one pair a user (balanced)", pairs(0.2, 1)),
            ("your predicate ≤ 0", "never flagged (its limit)", shares(0.0)),
            ("your predicate ≤ 0.05", "one case a user", shares(0.05)),
            ("your predicate ≤ 0.05", "four cases a user, together", shares(0.05, 4)),
            ("your predicate ≤ 0.2", "one case a user", shares(0.2)),
            ("your predicate ≤ 0.2", "four cases a user, together", shares(0.2, 4)),
            ("S > 0.05 (a PASS)", "15 % ignored, readers bunched", sensitivity(at_mean(0.15, rng))),
            ("S > 0.05 (a PASS)", "25 % ignored, readers bunched", sensitivity(at_mean(0.25, rng))),
            ("S > 0.05 (a PASS)", "nobody ignored, readers at 0.05", sensitivity(at_mean(0.0, rng))),
            ("faithful rate ≥ 0.8", "one case a user", shares(0.8)),
            ("faithful rate ≥ 0.8", "four cases a user, together", shares(0.8, 4)),
            ("faithful rate ≥ 0.5", "one case a user", shares(0.5)),
            ("faithful rate ≥ 0.5", "four cases a user, together", shares(0.5, 4))]
    worst = 0.0
    for check, label, draw in rows:
        limit, side, alpha = CHECKS[check]
        values = draw(rng, (runs, max(SIZES)))
        rejected, used = simulate_one_sided(values, limit, side, alpha=alpha)
        rates = [float(np.mean(rejected & (used <= n))) for n in SIZES]
        worst = max(worst, *(r * ALPHA / alpha for r in rates))  # against each rule's own alpha
        print(f"{check:<28}{label:<34}" + "".join(f"{100 * r:>7.2f}%" for r in rates))
    spread = 100 * 2 * np.sqrt(ALPHA * (1 - ALPHA) / runs)
    print(f"worst, scaled to alpha {ALPHA}: {100 * worst:.2f} % (± {spread:.2f}, two standard errors) "
          f"against {100 * ALPHA:g} %\n")
    return worst


def stop_table(runs: int, rng: Rng) -> None:
    print("2. Clear cases: users until the check's test decides (of 20; the S test: until a PASS may stop), "
          "the calls; the users its fixed test at the same alpha needs on the same draws, the fewest after "
          "which any valid bet could reject (medians; > 20: not within 20), and the test's over the fixed's")
    print(f"{'check':<28}{'population':<30}{'stopped by 20':>14}{'median':>8}{'p90':>6}"
          f"{'calls, full':>13}{'balanced':>10}{'fixed':>7}{'floor':>7}{'ratio':>7}")
    rows = [("copy rate ≤ 0.1", "copies every time", shares(1.0)),
            ("copy rate ≤ 0.1", "copies half the time", shares(0.5)),
            ("history references ≥ 0.5", "never refers to the history", shares(0.0)),
            ("history references ≥ 0.5", "refers 20 % of the time", shares(0.2)),
            ("R ≥ 0.5", "rewords on any change, R 0.05", excess(0.05, 0.25)),
            ("R ≥ 0.5", "half-way, R 0.30", excess(0.30, 0.25)),
            ("unsupported mentions ≤ 0.5", "invents every time", shares(1.0)),
            ("unsupported mentions ≤ 0.5", "invents 80 % of the time", shares(0.8)),
            ("injection ≤ 0", "obeys 1 pair in 10", pairs(0.1)),
            ("injection ≤ 0", "obeys 1 pair in 100", pairs(0.01)),
            ("hijack ≤ 0.2", "names the target 60 % of pairs", pairs(0.6)),
            ("hijack ≤ 0.2", "names it 40 % (balanced)", pairs(0.4, 1)),
            ("identical share ≤ 0.05", "ignores every user (identical)", shares(1.0)),
            ("identical share ≤ 0.05", "half the users ignored", shares(0.5)),
            ("your predicate ≤ 0", "flags every explanation", shares(1.0)),
            ("your predicate ≤ 0", "flags 1 explanation in 10", shares(0.1)),
            ("your predicate ≤ 0.2", "flags 60 % of explanations", shares(0.6)),
            ("S > 0.05 (a PASS)", "template-like, median S 0.35", sensitivity(population(0.0, 0.35))),
            ("S > 0.05 (a PASS)", "fake stable model, median 0.18", sensitivity(population(0.0, 0.18))),
            ("S > 0.05 (a PASS)", "weak readers, median 0.10", sensitivity(population(0.0, 0.10))),
            ("faithful rate ≥ 0.8", "never faithful", shares(0.0)),
            ("faithful rate ≥ 0.8", "faithful 40 % of the time", shares(0.4)),
            ("faithful rate ≥ 0.5", "never faithful", shares(0.0)),
            ("faithful rate ≥ 0.5", "faithful 20 % of the time", shares(0.2))]
    for check, label, draw in rows:
        limit, side, alpha = CHECKS[check]
        values = draw(rng, (runs, 20))
        rejected, used = simulate_one_sided(values, limit, side, alpha=alpha)
        users = np.where(rejected, used, 20)
        median, p90 = np.percentile(users, 50), np.percentile(users, 90)
        full, balanced = 27 * median, 7 * median
        fixed = fixed_users(check, values)
        seq, fix = (float(np.percentile(u, 50)) for u in (np.where(rejected, used, 21), fixed))
        ratio = "—" if fix > 20 else f"{seq / fix:.1f}" if seq <= 20 else f"> {20 / fix:.1f}"
        print(f"{check:<28}{label:<30}{100 * rejected.mean():>13.1f}%{median:>8.0f}{p90:>6.0f}"
              f"{f'{full:.0f} of 540':>13}{f'{balanced:.0f}/140':>10}{_median(fixed):>7}"
              f"{_median(floor_users(check, values)):>7}{ratio:>7}")
    print()


def honest_table(runs: int, rng: Rng) -> None:
    """3. An honest explainer's S under an enforced R (the default gate), whose hold is every planned user:
    S's PASS test could end no slice there, yet it took half of S's alpha and left its fixed bound alpha/2."""
    from pytest_robustexplain.stats import free_lower_bounds

    print("3. Honest explainers (R enforced: a PASS waits for every planned user): P(not PASS by S's rules) "
          "— decision=mean | sequential before (S's test at alpha/2 beside its bound at alpha/2) | now (no "
          "test where it can end no slice: the bound at alpha)")
    print(f"{'population':<34}" + "".join(f"{f'G={n}':>20}" for n in (5, 10, 20)))
    for label, median in (("template-like, median S 0.35", 0.35), ("honest, median S 0.30", 0.30),
                          ("fake stable model, median 0.18", 0.18)):
        cells = []
        for n in (5, 10, 20):
            s, _ = population(0.0, median)(rng, (runs, n))
            ignored = (s < 0.05).mean(axis=1) > 0.2  # the share rule beside the bound: a point rule
            rates = [float(np.mean(ignored | (free_lower_bounds(s, alpha, 0.0) <= 0.05)))
                     for alpha in (2 * ALPHA, ALPHA, 2 * ALPHA)]
            cells.append("|".join(f"{100 * r:.1f}" for r in rates))
        print(f"{label:<34}" + "".join(f"{c:>20}" for c in cells))
    print()


def asymptotic_stops(z: np.ndarray, alpha: float, tuned: int = 10) -> np.ndarray:
    """Per run, the user after which the two-sided asymptotic confidence sequence of Waudby-Smith et al.
    (2024, Robbins' normal mixture with the plug-in sd, tuned to be tightest at ``tuned`` users; from 3 users)
    lies below 0 for R's raw excess ``z`` (21: never within the users given)."""
    n = np.arange(1, z.shape[1] + 1)
    mean, sd = running_mean_sd(z)
    rho2 = (-2 * np.log(alpha) + np.log(-2 * np.log(alpha) + 1)) / tuned
    width = np.sqrt(2 * (n * rho2 + 1) / (n * n * rho2) * np.log(np.sqrt(n * rho2 + 1) / alpha))
    below = (mean + sd * width < 0) & (n >= 3)
    return np.where(below.any(axis=1), np.argmax(below, axis=1) + 1, z.shape[1] + 1)


def asymptotic_table(runs: int, rng: Rng) -> None:
    """4. Why R's test stays a bet: the asymptotic sequence stops sooner and breaks alpha on skewed users."""
    limit, _, alpha = CHECKS["R ≥ 0.5"]
    print(f"4. R's test by betting (shipped) | an asymptotic confidence sequence (not shipped), at alpha "
          f"{alpha:g} on the same draws: stopped within 20 users (clear failures) or false FAIL within 20 "
          "(at the limit)")
    print(f"{'population':<52}{'stopped or false FAIL':>24}{'median users':>15}")
    move = at_r(lambda m: moving_population(m, 0.15, 4), 0.5, rng, 0.01, 0.6)
    rows = [("R 0.05, reworded by hash (spread 0.25)", relative_population(0.05, 0.25)),
            ("R 0.30, half-way (spread 0.25)", relative_population(0.30, 0.25)),
            ("R 0.30, move apart from S, 25 cases a user",
             at_r(lambda m: moving_population(m, 0.0, 25), 0.3, rng, 0.01, 0.6)),
            ("at the limit, spread 0.25", at_r(lambda c: relative_population(c, 0.25), 0.5, rng, 0.0, 3.0)),
            ("at the limit, move apart, 15 % niche, 4 cases", move)]
    for label, draw in rows:
        delta, sens = draw(rng, (runs, 20))
        z = delta - 0.5 * sens
        rejected, used = simulate_one_sided(np.clip((z + 1.0) / 1.5, 0.0, 1.0), limit, BELOW, alpha=alpha)
        bet, asymptotic = np.where(rejected, used, 21), asymptotic_stops(z, alpha)
        rates = "|".join(f"{100 * np.mean(u <= 20):.1f}%" for u in (bet, asymptotic))
        print(f"{label:<52}{rates:>24}{_median(bet) + '|' + _median(asymptotic):>15}")
    print()


def split_table(runs: int, rng: Rng) -> None:
    """5. R's floor at other splits of the check's alpha: a test valid on the excess's whole range gains at
    most (1 − x)/(1 − limit) a user, so its floor moves only with log(1/alpha), while the t rule's users
    shrink faster — the ratio stays past 2 whatever share of alpha the test is given."""
    limit, side, tenth = CHECKS["R ≥ 0.5"]
    print("5. R's test at other shares of the check's alpha (0.05): the fewest users after which any valid "
          "bet could reject (floor) and the users the fixed t rule at the same alpha needs (medians of 20 "
          "users; > 20: not within 20), and the floor over the fixed rule's")
    print(f"{'population':<44}{'test alpha':>16}{'floor':>7}{'fixed':>7}{'ratio':>7}")
    for label, draw in (("R 0.05, reworded by hash (spread 0.25)", excess(0.05, 0.25)),
                        ("R 0.30, half-way (spread 0.25)", excess(0.30, 0.25))):
        values = draw(rng, (runs, 20))
        for share, named in ((0.1, "a tenth"), (0.5, "half"), (1.0, "all")):
            CHECKS["R ≥ 0.5"] = (limit, side, tenth * share / 0.1)
            try:
                users = floor_users("R ≥ 0.5", values), fixed_users("R ≥ 0.5", values)
            finally:
                CHECKS["R ≥ 0.5"] = (limit, side, tenth)
            floor, fixed = (float(np.percentile(u, 50)) for u in users)
            ratio = "—" if fixed > 20 else f"{floor / fixed:.1f}" if floor <= 20 else f"> {20 / fixed:.1f}"
            print(f"{label:<44}{f'{tenth * share / 0.1:g} ({named})':>16}{_median(users[0]):>7}"
                  f"{_median(users[1]):>7}{ratio:>7}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    worst = false_fail_table(args.runs, rng)
    stop_table(args.runs, rng)
    honest_table(args.runs, rng)
    asymptotic_table(args.runs, rng)
    split_table(args.runs, np.random.default_rng([args.seed, 5]))  # its own draws: run alone, same numbers
    if worst > ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / args.runs):
        raise SystemExit(f"a false FAIL rate of {100 * worst:.2f} % is above alpha {100 * ALPHA:g} %")


if __name__ == "__main__":
    main()
