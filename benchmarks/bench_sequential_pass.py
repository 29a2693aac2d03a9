"""When may a sequential slice stop with PASS? Each check that passes unless shown to fail, both decisions on
the same draws.

A slice under ``decision=sequential`` used to stop as soon as ρ's gate and the sensitivity's PASS test had
decided (7–10 users for an honest explainer); the checks that can only FAIL then judged those few users with
their fixed rules, and could not reject. Now a PASS waits until each such check has seen the users it needs
(``Check.users_needed`` → ``stats.users_to_catch``). For each check, at its limit, at a clear failure and at
the failures issue 59 measured, this prints how often the item PASSes:

- **fixed**: ``decision=mean``: the check's fixed rule on every planned user at the alpha it has there;
- **seq before**: the check's anytime test on the users until ρ's gate decided, then its fixed rule on those
  users, at the old split of the check's alpha (half to the test; grounding's unsupported mentions a
  quarter each) — the old stop;
- **seq now**: the same at today's split (``stats.check_alphas``: a tenth to the test), stopping no earlier
  than the hold (the fixed rule's certainty, which only moves a FAIL earlier, changes no outcome here);

and the users a sequential slice measured. ρ's stop comes from the package's own gate
(``stats.simulate_sequential``) fed honest users (ρ per user ~ N(0.8, 0.1) clipped to [0, 1], gate 0.5), the
check's test from ``stats.simulate_one_sided``, its fixed rule from ``guard.share_lower_bound`` /
``share_upper_bound`` (users as the unit, each user's share as their success). Users' shares are drawn with
one case a user (Bernoulli) or four cases a user, either independent or all going one way (clustered).

    .venv/bin/python benchmarks/bench_sequential_pass.py [--runs 4000] [--seed 1]
"""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass

import numpy as np

from pytest_robustexplain.checks import controls as guard
from pytest_robustexplain.stats import (
    ABOVE,
    BELOW,
    check_alphas,
    simulate_one_sided,
    simulate_sequential,
    users_to_catch,
)

ALPHA = 0.05
SIZES = (10, 20, 50)


@dataclass(frozen=True)
class Rule:
    """A check's share rule: its limit and side, its alpha under decision=mean, the old split (its test's,
    its fixed rule's alpha; None: the point rule the attacks had) and the split under sequential when it is
    not ``stats.check_alphas``'s."""

    name: str
    limit: float
    side: str
    fixed: float
    old: tuple[float, float | None]
    split: tuple[float, float] | None = None

    @property
    def test(self) -> float:
        return (self.split or check_alphas(self.fixed))[0]

    @property
    def kept(self) -> float:
        return (self.split or check_alphas(self.fixed))[1]

    def clear(self) -> float:
        from pytest_robustexplain.stats.confident import CLEAR_AT_LEAST, CLEAR_MARGIN

        q = self.limit if self.side == ABOVE else 1 - self.limit
        beyond = min(1.0, q + max(CLEAR_MARGIN * min(q, 1 - q), CLEAR_AT_LEAST))
        return beyond if self.side == ABOVE else 1 - beyond


# The default limits and alpha shares (docs/statistics.md, "The checks' own sequential tests").
RULES = (
    Rule("copy rate ≤ 0.1", 0.1, ABOVE, ALPHA, (ALPHA / 2, ALPHA / 2)),
    Rule("history references ≥ 0.5", 0.5, BELOW, ALPHA / 2, (ALPHA / 2, ALPHA / 4)),
    Rule("unsupported mentions ≤ 0.5", 0.5, ABOVE, ALPHA / 2, (ALPHA / 8, ALPHA / 8)),
    Rule("identical share ≤ 0.05", 0.05, ABOVE, ALPHA / 2, (ALPHA / 4, ALPHA / 4)),
    Rule("a predicate ≤ 0.05", 0.05, ABOVE, ALPHA, (ALPHA / 2, ALPHA / 2)),
    Rule("faithful rate ≥ 0.8", 0.8, BELOW, ALPHA, (ALPHA / 2, ALPHA / 2)),
    # The attacks' fixed rule is the printed interval's lower end (alpha / 2), their test the other half.
    Rule("hijack ≤ 0.2", 0.2, ABOVE, ALPHA / 2, (ALPHA / 2, None), (ALPHA / 2, ALPHA / 2)),
)
# Issue 59's cases: (rule, rate, what it is).
CASES = (("unsupported mentions ≤ 0.5", 1.0, "a made-up mention in every explanation"),
         ("copy rate ≤ 0.1", 0.5, "copies for half the users"),
         ("history references ≥ 0.5", 0.2, "refers to the history in 20 %"))
# An honest explainer's rates (what the template explainer and the fake server's stable mode show).
HONEST = {"copy rate ≤ 0.1": 0.0, "history references ≥ 0.5": 0.9, "unsupported mentions ≤ 0.5": 0.1,
          "identical share ≤ 0.05": 0.0, "a predicate ≤ 0.05": 0.0, "faithful rate ≥ 0.8": 0.95,
          "hijack ≤ 0.2": 0.0}


def shares(rng: np.random.Generator, rate: float, runs: int, users: int, cases: int, together: bool
           ) -> np.ndarray:
    """Each user's share of flagged explanations, shape (runs, users)."""
    if together or cases == 1:
        return (rng.random((runs, users)) < rate).astype(float)
    return rng.binomial(cases, rate, (runs, users)) / cases


def rho_stops(rng: np.random.Generator, runs: int, users: int) -> np.ndarray:
    """The user after which ρ's gate decided PASS for an honest explainer (its last user when it did not)."""
    means = np.clip(rng.normal(0.8, 0.1, (runs, users, 1)), 0, 1)
    _, used = simulate_sequential(means, {"combined": 0.5}, alpha=ALPHA)
    return used


@functools.cache
def _fails(k: float, n: int, rule_alpha: float | None, limit: float, side: str) -> bool:
    if rule_alpha is None:
        return k / n > limit if side == ABOVE else k / n < limit
    if side == ABOVE:
        return guard.share_lower_bound(k, n, rule_alpha) > limit
    return guard.share_upper_bound(k, n, rule_alpha) < limit


def fixed_fails(values: np.ndarray, n: np.ndarray, rule: Rule, rule_alpha: float | None) -> np.ndarray:
    """The fixed rule on each run's first n users (n per run)."""
    sums = np.cumsum(values, axis=1)[np.arange(values.shape[0]), n - 1]
    return np.array([_fails(round(float(k), 9), int(m), rule_alpha, rule.limit, rule.side)
                     for k, m in zip(sums, n, strict=True)])


def passes(rule: Rule, values: np.ndarray, rho: np.ndarray) -> tuple[float, float, float, float]:
    """(fixed PASS, sequential PASS before, sequential PASS now, users measured now) on the same draws."""
    runs, planned = values.shape
    hold = users_to_catch(rule.limit, rule.side, rule.kept, planned)
    fixed = ~fixed_fails(values, np.full(runs, planned), rule, rule.fixed)
    out = []
    for stop, (test, kept) in ((rho, rule.old), (np.maximum(rho, hold), (rule.test, rule.kept))):
        rejected, at = simulate_one_sided(values, rule.limit, rule.side, alpha=test)
        failed = (rejected & (at <= stop)) | fixed_fails(values, stop, rule, kept)
        out.append((float(np.mean(~failed)), float(np.mean(np.where(rejected & (at <= stop), at, stop)))))
    return float(np.mean(fixed)), out[0][0], out[1][0], out[1][1]


def table(runs: int, seed: int) -> None:
    """Past the limit (a clear failure, issue 59's cases), four cases a user, as docs/statistics.md shows
    them; at the limit and for honest explainers, every size and shape, the lines that sum them up."""
    rng = np.random.default_rng(seed)
    by_name = {r.name: r for r in RULES}
    rows = [(r, r.clear(), "a clear failure") for r in RULES]
    rows += [(by_name[name], rate, what) for name, rate, what in CASES]
    rows += [(r, r.limit, "at its limit") for r in RULES] + [(r, HONEST[r.name], "honest") for r in RULES]
    print(f"PASS rates past the limit, {runs} runs a cell (Monte-Carlo SE at most {50 / np.sqrt(runs):.2f} "
          "points), four cases a user\n")
    print("| check | rate | case | users | cases a user | hold | fixed | seq before | seq now | "
          "users measured |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst = at_limit = honest = 0.0
    within = True
    for rule, rate, what in rows:
        for users in SIZES:
            rho = rho_stops(rng, runs, users)
            for cases, together in ((1, False), (4, False), (4, True)):
                values = shares(rng, rate, runs, users, cases, together)
                fixed, before, now, used = passes(rule, values, rho)
                if what == "at its limit":
                    at_limit = max(at_limit, 1 - fixed, 1 - now)
                    allowed = (rule.fixed, rule.test + rule.kept)
                    bound = 2 * np.sqrt(max(allowed) * (1 - max(allowed)) / runs)
                    within &= 1 - fixed <= allowed[0] + bound and 1 - now <= allowed[1] + bound
                    continue
                if what == "honest":
                    honest = max(honest, 1 - fixed, 1 - now) if users <= 20 else honest
                    continue
                worst = max(worst, now - fixed)
                if cases == 1:
                    continue
                label = f"{cases}, {'together' if together else 'independent'}"
                hold = users_to_catch(rule.limit, rule.side, rule.kept, users)
                print(f"| {rule.name} | {rate:g} | {what} | {users} | {label} | {hold} | "
                      f"{100 * fixed:.1f} % | {100 * before:.1f} % | {100 * now:.1f} % | {used:.1f} |",
                      flush=True)
    print(f"\nworst excess of a sequential PASS over the fixed rule's past the limit, every size and shape: "
          f"{100 * worst:+.2f} points")
    print(f"largest false FAIL at the limit, every rule, size and shape, both decisions: "
          f"{100 * at_limit:.1f} % — each within its rule's alpha (± 2 SE) {'OK' if within else 'MISSED'}")
    print(f"honest explainers not PASS at 10 and 20 users, every rule and shape, both decisions: at most "
          f"{100 * honest:.1f} %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    table(args.runs, args.seed)


if __name__ == "__main__":
    main()
