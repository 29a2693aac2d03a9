"""How often ``min-judge-agreement`` trusts a judge it should not: the one-sided jackknife bound of Cohen's
kappa (``faithfulness.people_agreement``, users as the unit) at or above the limit when the judge's true
kappa is exactly the limit — and how often it trusts a good judge.

People's verdicts are faithful with prevalence p; the judge copies the person's verdict with probability a and
otherwise guesses with the same prevalence, so its true kappa is a. Users have 1–3 labelled cases; in the
clustered cells a user's cases share the judge's quality (a ± 0.2 by user, mean a). alpha 0.05. The rule
is the shipped one (``faithfulness.judge_distrust``): below 20 labelled users it never trusts, so the
10-user column shows that rule, not the bound.

    .venv/bin/python benchmarks/bench_judge_agreement.py [--reps 1000] [--seed 1]
"""

from __future__ import annotations

import argparse

import numpy as np

from pytest_robustexplain.checks.judge.measure import (
    MIN_COMPARED_USERS,
    MIN_JUDGES_KAPPA,
    judge_distrust,
    judges_agreement,
    people_agreement,
)
from pytest_robustexplain.results import ORIGINAL, JudgedText

USERS = (10, 20, 50, 100)


def _history(rng: np.random.Generator, users: int, prevalence: float, kappa: float, clustered: bool
             ) -> list[JudgedText]:
    texts = []
    for u in range(users):
        quality = kappa + (rng.choice((-0.2, 0.2)) if clustered else 0.0)
        for case in range(int(rng.integers(1, 4))):
            people = bool(rng.random() < prevalence)
            judge = people if rng.random() < quality else bool(rng.random() < prevalence)
            texts.append(JudgedText(f"u{u}", f"i{case}", ORIGINAL, 0, 0, judge, people=people))
    return texts


def trusted(rng: np.random.Generator, users: int, prevalence: float, kappa: float, limit: float,
            clustered: bool, reps: int) -> float:
    hits = 0
    for _ in range(reps):
        found = people_agreement(_history(rng, users, prevalence, kappa, clustered), 0.05)
        hits += judge_distrust(found, limit) == ""  # the shipped rule: trusted when it has nothing to say
    return hits / reps


def two_judges(rng: np.random.Generator, users: int, prevalence: float, kappa: float) -> list[JudgedText]:
    """Two judges whose true Cohen's kappa is ``kappa``: the second copies the first with that probability,
    else guesses at the same prevalence."""
    texts = []
    for u in range(users):
        for case in range(int(rng.integers(1, 4))):
            first = int(rng.random() < prevalence)
            second = first if rng.random() < kappa else int(rng.random() < prevalence)
            texts.append(JudgedText(f"u{u}", f"i{case}", ORIGINAL, 0, 0, False, verdicts=(first, second)))
    return texts


def distrusted(rng: np.random.Generator, users: int, prevalence: float, kappa: float, reps: int) -> float:
    """How often two judges at ``kappa`` are found confidently below :data:`MIN_JUDGES_KAPPA`."""
    hits = 0
    for _ in range(reps):
        found = judges_agreement(two_judges(rng, users, prevalence, kappa), 0.05)
        high = found["kappa"][2] if found else None
        # the shipped rule: decided from MIN_COMPARED_USERS users on
        hits += high is not None and high < MIN_JUDGES_KAPPA and found["users"] >= MIN_COMPARED_USERS
    return hits / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    se = 100 * np.sqrt(0.05 * 0.95 / args.reps)
    print(f"Trusted a judge whose true kappa is the limit (% of {args.reps} runs; alpha 5 %, "
          f"±{se:.1f} one SE)")
    print(f"{'limit, prevalence, cases':<34}" + "".join(f"{n:>7}" for n in USERS))
    for limit in (0.4, 0.6):
        for prevalence in (0.3, 0.5, 0.8):
            for clustered in (False, True):
                label = f"κ {limit}, p {prevalence}, {'clustered' if clustered else 'independent'}"
                cells = [100 * trusted(rng, n, prevalence, limit, limit, clustered, args.reps) for n in USERS]
                print(f"{label:<34}" + "".join(f"{c:>7.1f}" for c in cells))
    print()
    print("Trusted a good judge (true kappa 0.9) at the limit 0.6, and a lenient one (kappa 0) at 0.4 (%)")
    for prevalence in (0.3, 0.5, 0.8):
        good = [100 * trusted(rng, n, prevalence, 0.9, 0.6, False, args.reps // 2) for n in USERS]
        print(f"{f'κ 0.9 ≥ 0.6, p {prevalence}':<34}" + "".join(f"{c:>7.1f}" for c in good))
    for prevalence in (0.3, 0.5, 0.8):
        lenient = [100 * trusted(rng, n, prevalence, 0.0, 0.4, False, args.reps // 2) for n in USERS]
        print(f"{f'κ 0 ≥ 0.4, p {prevalence}':<34}" + "".join(f"{c:>7.1f}" for c in lenient))
    print()
    print(f"Two judges found to disagree (kappa confidently below {MIN_JUDGES_KAPPA}): at the limit, and two "
          "that disagree outright (kappa 0) (%)")
    for kappa in (MIN_JUDGES_KAPPA, 0.0):
        for prevalence in (0.3, 0.5, 0.8):
            cells = [100 * distrusted(rng, n, prevalence, kappa, args.reps // 2) for n in USERS]
            print(f"{f'judges κ {kappa:g}, p {prevalence}':<34}" + "".join(f"{c:>7.1f}" for c in cells))


if __name__ == "__main__":
    main()
