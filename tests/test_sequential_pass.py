"""When a sequential slice may stop with PASS (issue 59), simulated small: the package's own tests, fixed
rules and holds on generated users, both decisions on the same draws. ``benchmarks/bench_sequential_pass.py``
prints the whole table (docs/statistics.md, "When a sequential slice may stop")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import simulation

from pytest_robustexplain.stats import ABOVE, BELOW, users_to_catch

bench = simulation("bench_sequential_pass")
RUNS = 1000
SE3 = 3 * 0.5 / math.sqrt(RUNS)  # three Monte-Carlo standard errors of a rate, at their widest
RULES = {rule.name: rule for rule in bench.RULES}


def _rates(rule: str, rate: float, users: int, cases: int = 1, *, seed: int = 7) -> tuple[float, ...]:
    rng = np.random.default_rng(seed)
    rho = bench.rho_stops(rng, RUNS, users)
    return bench.passes(RULES[rule], bench.shares(rng, rate, RUNS, users, cases, True), rho)


@pytest.mark.parametrize("users", [10, 20, 50])
@pytest.mark.parametrize(("rule", "rate"), [case[:2] for case in bench.CASES])
def test_issue_59s_failures_pass_no_more_often_under_sequential_than_the_fixed_rule_allows(
        rule: str, rate: float, users: int) -> None:
    """A made-up mention in every explanation, copying for half the users, history references in 20 %: the
    hold and the fixed rule's share of alpha bring a sequential PASS down to decision=mean's."""
    fixed, before, now, _ = _rates(rule, rate, users)
    assert now <= before + SE3
    assert now <= fixed + 0.01 + SE3


def test_an_unsupported_mention_in_every_explanation_never_passes_once_the_hold_is_in() -> None:
    """7 flagged of 7 cannot reject at alpha/8 (the exact bound 0.484 < 0.5): 44 % of sequential runs
    passed on 7 users; held to the users the rule needs, none does."""
    rule = RULES["unsupported mentions ≤ 0.5"]
    for users in (10, 20, 50):
        every = np.ones((RUNS, users))
        fixed, before, now, _ = bench.passes(rule, every, np.full(RUNS, 7))  # ρ decided after 7 users
        assert before == 1.0 and now == fixed == 0.0


@pytest.mark.parametrize("users", [10, 20])
def test_honest_explainers_pass_under_both_decisions(users: int) -> None:
    """Not PASS at 10 users ≤ 5 %, at 20 users ≤ 0.5 %: the hold costs an honest explainer calls, never its
    PASS."""
    for name, rule in RULES.items():
        for cases in (1, 4):
            fixed, _, now, _ = _rates(name, bench.HONEST[name], users, cases)
            limit = 0.05 if users == 10 else 0.005
            assert 1 - fixed <= limit and 1 - now <= limit, (rule, cases)


@pytest.mark.parametrize("users", [10, 20, 50])
def test_a_clear_failure_passes_no_more_often_under_sequential(users: int) -> None:
    for name, rule in RULES.items():
        fixed, _, now, _ = _rates(name, rule.clear(), users, 4)
        assert now <= fixed + 0.01 + SE3, (name, users)


def test_false_fail_at_the_limit_stays_within_each_checks_alpha() -> None:
    for name, rule in RULES.items():
        for users in (10, 20, 50):
            _, _, now, _ = _rates(name, rule.limit, users, 4)
            assert 1 - now <= rule.test + rule.kept + SE3, (name, users)


def test_the_hold_is_what_a_clear_failure_needs() -> None:
    """Fewer users than planned only where the fixed rule's power has stopped growing; a limit no share of
    flagged users can fail needs nobody; the rule is the same on both sides of [0, 1]."""
    assert users_to_catch(0.5, ABOVE, 0.00625, 20) == 20
    assert users_to_catch(0.3, ABOVE, 0.025, 40) == users_to_catch(0.7, BELOW, 0.025, 40)
    assert users_to_catch(0.2, ABOVE, 0.025, 20) < 20
    assert users_to_catch(0.5, ABOVE, 0.025, 1) == 1
    planned = 200
    assert users_to_catch(0.05, ABOVE, 0.025, planned) <= planned
