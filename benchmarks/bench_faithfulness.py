"""How often the faithfulness gates err, at every number of users from 3 to 100.

Every number about the error rates of ``min-faithful-rate`` and ``max-misattributed-rate`` in
docs/faithfulness.md comes from this script. It draws simulated runs user by user and applies the gates' own
rules (``faithfulness.summarise``, ``polarity.summarise_polarity``) with alpha 0.05.

Users are not alike: each user's chance that their explanation is judged faithful is drawn from a Beta
distribution around the population's rate (skewed, with a heavy share of users near 0 or 1), one original
explanation per user (the gate reads one per case). The judge adds its own noise: each verdict flips with a
per-run probability, and a share of replies are judge failures (left out of the rate, counted beside it);
reordering is judged like the verdict (it agrees unless either flips). What is measured:

1. ``min-faithful-rate`` at 0.8: a false PASS is a PASS where the rate the judge reports (the population rate
   after its noise) is below 0.8; a false FAIL a FAIL where it is at or above 0.8. Each must stay ≤ alpha at
   every number of users; the table also shows how often the gate decides at all (power, and the price of the
   burden of proof: INCONCLUSIVE on small runs).
2. ``max-misattributed-rate`` at 0.2 (FAIL when confidently above): a false FAIL where the rate is at or
   below 0.2.

    .venv/bin/python benchmarks/bench_faithfulness.py [--runs 20000] [--seed 1]
"""

from __future__ import annotations

import argparse

import numpy as np

from pytest_robustexplain.checks.judge.measure import summarise
from pytest_robustexplain.checks.polarity.measure import summarise_polarity
from pytest_robustexplain.results import FAIL, ORIGINAL, PASS, JudgedText, MisattributionCase

USERS = (3, 5, 8, 10, 20, 50, 100)
ALPHA = 0.05


def _user_rates(rng: np.random.Generator, mean: float, n: int, concentration: float = 2.0) -> np.ndarray:
    """Per-user probabilities around ``mean``: a Beta with a low concentration (skewed, mass near 0 and 1)."""
    a, b = mean * concentration, (1 - mean) * concentration
    return rng.beta(max(a, 1e-3), max(b, 1e-3), size=n)


def _judge_run(rng: np.random.Generator, users: int, truth: float, flip: float, failure: float,
               min_rate: float) -> str | None:
    faithful = rng.random(users) < _user_rates(rng, truth, users)
    noisy = faithful ^ (rng.random(users) < flip)
    back = faithful ^ (rng.random(users) < flip)
    failed = rng.random(users) < failure
    texts = [JudgedText(f"u{i}", "i", ORIGINAL, 0, 0, None if failed[i] else bool(noisy[i]), (), "r",
                        "no JSON" if failed[i] else "", None if failed[i] else bool(back[i]))
             for i in range(users)]
    return summarise(texts, judge="j", scope="originals", min_rate=min_rate, alpha=ALPHA).outcome


def judge_table(runs: int, seed: int) -> None:
    min_rate = 0.8
    print(f"1. min-faithful-rate {min_rate}, alpha {ALPHA}: share of runs PASS / FAIL (judge noise: each "
          "verdict flips with probability 0.03, 2 % judge failures)")
    print("   reported rate = truth·(1−f) + (1−truth)·f; false PASS where it is < 0.8, false FAIL where "
          "≥ 0.8")
    rng = np.random.default_rng(seed)
    flip, failure = 0.03, 0.02
    truths = (0.70, 0.78, 0.83, 0.86, 0.95)
    print("   users " + "".join(f"{'truth ' + format(t, '.2f'):>22}" for t in truths))
    worst_pass = worst_fail = 0.0
    for users in USERS:
        cells = []
        for truth in truths:
            outcomes = [_judge_run(rng, users, truth, flip, failure, min_rate) for _ in range(runs)]
            passed = sum(o == PASS for o in outcomes) / runs
            failed = sum(o == FAIL for o in outcomes) / runs
            reported = truth * (1 - flip) + (1 - truth) * flip
            if reported < min_rate:
                worst_pass = max(worst_pass, passed)
            else:
                worst_fail = max(worst_fail, failed)
            cells.append(f"{100 * passed:8.1f} / {100 * failed:5.1f} %")
        print(f"   {users:5d} " + "".join(f"{c:>22}" for c in cells))
    print(f"   worst false PASS {100 * worst_pass:.1f} %, worst false FAIL {100 * worst_fail:.1f} % "
          f"(alpha {100 * ALPHA:.0f} %)")


def polarity_table(runs: int, seed: int) -> None:
    limit = 0.2
    print(f"\n2. max-misattributed-rate {limit}, alpha {ALPHA}: share of runs FAIL")
    rng = np.random.default_rng(seed + 1)
    truths = (0.10, 0.20, 0.35, 0.50)
    print("   users " + "".join(f"{'truth ' + format(t, '.2f'):>14}" for t in truths))
    worst = 0.0
    for users in USERS:
        cells = []
        for truth in truths:
            fails = 0
            for _ in range(runs):
                cited = rng.random(users) < _user_rates(rng, truth, users)
                cases = [MisattributionCase(f"u{i}", "i", 0, True, ("x",) if cited[i] else ())
                         for i in range(users)]
                found = summarise_polarity(cases, max_rate=limit, alpha=ALPHA)
                fails += found is not None and found.outcome == FAIL
            share = fails / runs
            if truth <= limit:
                worst = max(worst, share)
            cells.append(f"{100 * share:10.1f} %")
        print(f"   {users:5d} " + "".join(f"{c:>14}" for c in cells))
    print(f"   worst false FAIL {100 * worst:.1f} % (alpha {100 * ALPHA:.0f} %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    judge_table(args.runs, args.seed)
    polarity_table(args.runs, args.seed)


if __name__ == "__main__":
    main()
