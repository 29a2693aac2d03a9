"""Every check read from the cross-user control can end a sequential gate early (issue 44): the copy rate,
history references and relative robustness R each run an anytime-valid FAIL test on the same users in the
same seeded order as ρ's; the first that rejects fails the item and the rest of its calls are cancelled.
Simulated at the boundary (false FAIL ≤ alpha at every number of users), and end to end on explainers
that copy, that reword on every change, and honest ones that must still pass."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import read_report

from pytest_robustexplain.checks.controls import relative_excess_limit, user_relative_excess
from pytest_robustexplain.results import FAIL, INSENSITIVE, PASS, PairKey, PairResult
from pytest_robustexplain.stats import ABOVE, BELOW, OneSidedTest, check_alphas, simulate_one_sided
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

ALPHA = 0.025  # what each check's test spends under decision=sequential (half of the gate's 0.05)


# ------------------------------------------------------------------------------ the test itself
def _at_the_limit(rng: np.random.Generator, runs: int, users: int, limit: float, shape: str) -> np.ndarray:
    """Per-user values whose population mean is exactly ``limit``: Bernoulli shares (one case a user),
    shares of four cases that copy together, or a skewed, clipped continuous value."""
    if shape == "bernoulli":
        return (rng.random((runs, users)) < limit).astype(float)
    if shape == "clustered":  # four cases a user, all alike: a user copies on all or none
        return np.repeat((rng.random((runs, users, 1)) < limit).astype(float), 4, axis=2).mean(axis=2)
    beta = rng.beta(0.5, 0.5 * (1 - limit) / limit, size=(runs, users))  # skewed, piles against 0
    return np.clip(beta * limit / beta.mean(), 0.0, 1.0)


@pytest.mark.parametrize("shape", ["bernoulli", "clustered", "skewed"])
@pytest.mark.parametrize(("limit", "side"), [(0.1, ABOVE), (0.5, BELOW), (relative_excess_limit(0.5), BELOW)])
def test_no_more_false_fails_than_alpha_at_the_limit_at_any_number_of_users(limit: float, side: str,
                                                                            shape: str) -> None:
    rng = np.random.default_rng(20261202)
    values = _at_the_limit(rng, 4000, 100, limit, shape)
    if shape == "skewed":  # clip to the exact limit again (the clip moved the mean a little)
        values = np.clip(values + (limit - values.mean()), 0.0, 1.0)
    rejected, used = simulate_one_sided(values, limit, side, alpha=ALPHA)
    for users in (5, 10, 20, 50, 100):  # anytime: a stop at or before each user count
        rate = float(np.mean(rejected & (used <= users)))
        assert rate <= ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / len(rejected)), (users, rate)


def _floor(limit: float, side: str, value: float) -> int:
    """The fewest users at ``value`` after which any valid bet reaches 1/ALPHA: a bet that survives the
    worst value multiplies its wealth by at most value/limit (above) or (1 − value)/(1 − limit) (below)."""
    gain = value / limit if side == ABOVE else (1 - value) / (1 - limit)
    return math.ceil(math.log(1 / ALPHA) / math.log(gain))


@pytest.mark.parametrize(("limit", "side"), [(0.1, ABOVE), (0.5, BELOW), (relative_excess_limit(0.5), BELOW)])
def test_the_gates_test_and_its_simulation_reject_on_the_same_user(limit: float, side: str) -> None:
    """The benchmarks' numbers are the gate's: ``simulate_one_sided`` over many runs and ``OneSidedTest`` fed
    one user at a time stake the same bets (the live test updates its wealth user by user)."""
    rng = np.random.default_rng(63)
    values = np.where(rng.random((200, 30)) < 0.5, rng.random((200, 30)), rng.random((200, 1)) < 0.4)
    rejected, used = simulate_one_sided(values, limit, side, alpha=ALPHA)
    for run in range(len(values)):
        test = OneSidedTest(limit, side, alpha=ALPHA)
        live = next((n + 1 for n, v in enumerate(values[run]) if test.update(float(v))), None)
        assert (live is not None, live or 30) == (bool(rejected[run]), int(used[run])), run
    assert 0 < rejected.mean() < 1  # both ways, not one outcome throughout


WALLS = [(0.1, ABOVE, 1.0), (0.05, ABOVE, 1.0), (0.5, ABOVE, 1.0), (0.5, BELOW, 0.0), (0.8, BELOW, 0.0)]


@pytest.mark.parametrize(("limit", "side", "value"), WALLS)
def test_a_share_at_the_wall_is_stopped_within_a_user_of_the_fewest_any_bet_needs(
        limit: float, side: str, value: float) -> None:
    """Issue 63: a user's share sits at 0 or 1 (a copier copies every prompt); aGRAPA staked 1.1 where 9.5
    was safe and stopped a copier after 7 users at alpha/10 where any bet needs 3. The exact Kelly stake on
    the users seen stops it at most one user past that floor."""
    shares = OneSidedTest(limit, side, alpha=ALPHA)
    stops = next(n for n in range(1, 40) if shares.update(value))
    assert _floor(limit, side, value) <= stops <= _floor(limit, side, value) + 1
    assert shares.wealth >= shares.level == pytest.approx(1 / ALPHA)
    shares.update(1.0 - value)
    assert shares.rejected  # a rejection is for good: Ville bounds the chance of ever crossing
    with pytest.raises(ValueError, match="must be a finite number in"):
        shares.update(1.5)


def _pair(kind: str, combined: float, *, user: str = "u1", item: str = "i1") -> PairResult:
    severity = 0 if kind == "swap" else 1
    return PairResult(PairKey("m", user, item, kind, severity, 0), combined, combined, combined, combined,
                      combined, "a", "b")


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 0.8])
def test_the_excess_is_below_its_limit_exactly_when_r_is_below_the_threshold(threshold: float) -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        users = [f"u{i}" for i in range(int(rng.integers(2, 8)))]
        pert = {u: float(rng.random()) for u in users}
        swap = {u: float(rng.random()) * 0.9 for u in users}
        r = sum(pert[u] - swap[u] for u in users) / sum(1 - swap[u] for u in users)
        excess = [user_relative_excess([_pair("noise_injection", pert[u], user=u)],
                                       [_pair("swap", swap[u], user=u)], threshold) for u in users]
        mean = sum(e for e in excess if e is not None) / len(users)
        assert min(excess) >= 0 and max(excess) <= 1  # type: ignore[type-var]
        assert (mean < relative_excess_limit(threshold)) == (r < threshold)


# ------------------------------------------------------------------------------ end to end
GAMING = '''
import sys
sys.path.insert(0, {tests!r})
import pytest
import gaming
from pytest_robustexplain.explainers.template import compose_explanation

@pytest.fixture
def explainer():
    return {explainer}
'''

SEQUENTIAL = """
import pytest

@pytest.mark.robustness(decision="sequential"{extra})
def test_gate(robustness):
    pass
"""


def _overall(doc: dict) -> dict:  # type: ignore[type-arg]
    return next(g for g in doc["gates"] if g["slice"] == "overall")


def _gaming(pytester: pytest.Pytester, explainer: str, extra: str = "") -> dict:  # type: ignore[type-arg]
    from pathlib import Path

    tests = str(Path(__file__).resolve().parent)
    pytester.makeconftest(GAMING.format(tests=tests, explainer=explainer))
    pytester.makepyfile(test_gate=SEQUENTIAL.format(extra=extra))
    pytester.runpytest("-k", "overall", "--robustexplain-json=r.json", "-p", "no:cacheprovider")
    return read_report(pytester)


def test_an_explainer_that_rewords_on_every_change_fails_on_about_half_of_the_calls(
        pytester: pytest.Pytester) -> None:
    """R's and history references' tests stop it after 10 users: they spend a tenth of their checks' alpha
    since issue 59 (6–7 users at half), so that their fixed rules keep decision=mean's power."""
    doc = _gaming(pytester, "gaming.reword_by_hash")
    gate = _overall(doc)
    assert gate["verdict"]["outcome"] == FAIL
    assert "The sequential test decided it after" in gate["verdict"]["message"]
    assert doc["calls"]["made"] <= 0.55 * 540  # the full design: 20 users × 27 calls
    stopped = gate["verdict"]["details"]["guard"]["stopped_by"]
    assert gate["verdict"]["findings"][stopped]["outcome"] == FAIL


@pytest.mark.parametrize("explainer", ["compose_explanation", "gaming.category_aware"])
def test_honest_explainers_still_pass_under_the_checks_own_tests(pytester: pytest.Pytester,
                                                                 explainer: str) -> None:
    gate = _overall(_gaming(pytester, explainer))
    assert gate["verdict"]["outcome"] == PASS
    assert gate["verdict"]["details"]["guard"]["stopped_by"] is None


def test_a_warning_never_ends_a_slice(pytester: pytest.Pytester) -> None:
    # guard=warn: relative robustness and copying are warnings; grounding is gated only when set.
    doc = _gaming(pytester, "gaming.reword_by_hash", ', guard="warn", min_history_reference=None')
    assert _overall(doc)["verdict"]["details"]["guard"]["stopped_by"] is None


def test_a_model_that_copies_its_prompt_fails_on_a_third_of_the_calls(pytester: pytest.Pytester,
                                                                      xdist_args: tuple[str, ...]) -> None:
    pytester.makepyfile(test_gate=SEQUENTIAL.format(extra=', perturbations=["noise_injection"]'))
    with FakeOllamaServer(mode="copycat") as server:
        result = pytester.runpytest_subprocess(
            "--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
            "--robustexplain-json=r.json", "-p", "no:cacheprovider", *xdist_args)
        result.assert_outcomes(failed=1)
    doc = read_report(pytester)
    (gate,) = doc["gates"]
    verdict = gate["verdict"]
    assert verdict["details"]["guard"]["stopped_by"] == "copying"
    assert verdict["findings"]["copying"]["outcome"] == FAIL
    # The same users, the same stop, whichever process ran it: 20 users × 7 calls in the full design. With a
    # tenth of the check's alpha the test alone needs 7 users; the fixed rule is certain after 5 (issue 59).
    users = verdict["findings"]["copying"]["counts"]["explanations"]
    assert users <= 5 and doc["calls"]["made"] <= 0.4 * 140
    assert f"decided it after {users} user{'' if users == 1 else 's'}" in verdict["message"]


def _decided_after(message: str) -> int:
    import re

    found = re.search(r"decided after (\d+)", message)
    assert found, message
    return int(found.group(1))


@pytest.mark.parametrize("guard", ["fail", "warn"])
def test_a_pass_waits_for_the_sensitivity_to_be_shown(pytester: pytest.Pytester, guard: str) -> None:
    """A PASS needs every check that asks for evidence decided (issue 44): ρ's betting test passes the fake
    stable model after a few users, but its S (0.12-0.25) needs more before the guard's bound can show it,
    and (issue 59) the checks that pass unless shown to fail need every user their fixed rules need — here
    all 20, for an enforced R, so S's own anytime-valid test does not run (issue 63). Under guard=warn
    nothing waits."""
    extra = f', perturbations=["noise_injection"], guard="{guard}"'
    pytester.makepyfile(test_gate=SEQUENTIAL.format(extra=extra))
    with FakeOllamaServer(mode="stable") as server:
        result = pytester.runpytest("--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
                                    "--robustexplain-json=r.json", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
    (gate,) = read_report(pytester)["gates"]
    verdict = gate["verdict"]
    rho_users, guard_users = _decided_after(verdict["message"]), verdict["details"]["guard"]["n_users"]
    assert verdict["outcome"] == PASS and verdict["details"]["guard"]["outcome"] == PASS
    if guard == "fail":
        assert rho_users < guard_users == 20  # past ρ's decision: every user the checks need
    else:
        assert guard_users == rho_users


BOTH_DECISIONS = """
import pytest

@pytest.mark.robustness(decision="mean", perturbations=["noise_injection"])
def test_fixed(robustness):
    pass

@pytest.mark.robustness(decision="sequential", perturbations=["noise_injection"])
def test_sequential(robustness):
    pass
"""


def test_an_enforced_r_leaves_the_sensitivitys_bound_all_of_its_alpha(pytester: pytest.Pytester) -> None:
    """Issue 63: with R gated and enforced a PASS waits for every planned user, so S's own PASS test could end
    no slice; it spent half of S's alpha all the same, and the bound beside it, at alpha/2, left honest
    10-user runs INCONCLUSIVE that decision=mean passed. Such a slice runs no PASS test now: on the same
    users S's bound is decision=mean's to the last digit (it was lower)."""
    pytester.makepyfile(test_gate=BOTH_DECISIONS)
    with FakeOllamaServer(mode="stable") as server:
        result = pytester.runpytest("--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
                                    "--robustexplain-json=r.json", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=2)
    fixed, sequential = (g["verdict"]["details"]["guard"] for g in read_report(pytester)["gates"])
    assert fixed["n_users"] == sequential["n_users"] == 20
    assert fixed["sensitivity_low"] == sequential["sensitivity_low"] > 0.05


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize(("explainer", "check", "movielens"), [
    ("gaming.invents_a_purchase", "grounding", False), ("gaming.lists_half", "copying", False),
    # On MovieLens the invented purchase is a title of the MovieLens catalog the run reads.
    ("gaming.purchase_inventor({ml!r})", "grounding", True), ("gaming.lists_half", "copying", True)])
def test_an_adversarial_explainer_fails_every_item_under_both_decisions(
        pytester: pytest.Pytester, seed: int, explainer: str, check: str, movielens: bool) -> None:
    """Issue 59: an explainer that adds a made-up past purchase to every honest explanation passed 4 of 6
    items under sequential (the slice stopped after 7 users, where the unsupported-mention rule cannot reject
    7 of 7); a PASS now waits for the users that rule needs. One that lists the history back to half of its
    users passed under both decisions (it copies no prompt sentence, and the honest half lifted history
    references above their limit); a listed history is copying now. Every item fails, as it should."""
    from pathlib import Path

    import gaming

    tests = str(Path(__file__).resolve().parent)
    ml = str(pytester.path / "ml")
    pytester.makeconftest(GAMING.format(tests=tests, explainer=explainer.format(ml=ml)))
    dataset: tuple[str, ...] = ()
    if movielens:
        gaming.write_movielens(ml, users=40)
        dataset = (f"--robustexplain-dataset={ml}",)
    for decision in ("mean", "sequential"):
        pytester.makepyfile(test_gate=SEQUENTIAL.replace('"sequential"', f'"{decision}"').format(extra=""))
        pytester.runpytest(f"--robustexplain-seed={seed}", "--robustexplain-json=r.json", "-p",
                           "no:cacheprovider", *dataset)
        gates = read_report(pytester)["gates"]
        assert len(gates) > 1
        for gate in gates:
            assert gate["verdict"]["outcome"] == FAIL, (decision, gate["slice"], gate["verdict"]["message"])
            assert gate["verdict"]["findings"][check]["outcome"] == FAIL, (decision, gate["slice"])


def test_an_explainer_that_ignores_every_user_is_insensitive_after_three_users(
        pytester: pytest.Pytester) -> None:
    """The identical share's own test (issue 44): texts word for word the same for another user's
    interactions end the slice INSENSITIVE within a user of the fewest any bet at its alpha (a tenth of
    INSENSITIVE's half) needs — 3 users (4 before its bets were tuned to shares, issue 63) —, where the slice
    used to run until ρ's gate passed the constant text (7 users) — or, waiting for S's evidence, every
    user."""
    doc = _gaming(pytester, "gaming.constant_with_id")
    gate = _overall(doc)
    guard = gate["verdict"]["details"]["guard"]
    assert gate["verdict"]["outcome"] == INSENSITIVE and guard["outcome"] == INSENSITIVE
    floor = math.ceil(math.log(1 / check_alphas(0.05 / 2)[0]) / math.log(1 / 0.05))
    assert guard["stopped_by"] == "sensitivity" and guard["n_users"] == floor + 1 == 3
    assert "The sequential test decided it after 3 users" in guard["message"]
    assert doc["calls"]["made"] <= 0.2 * 540


# ------------------------------------------------------------------ the attacks' and grounding's own tests
ATTACKED = """
import pytest

@pytest.mark.robustness(decision="sequential", perturbations=["noise_injection", "prompt_injection"],
                        severities=[1, 3, 5])
def test_gate(robustness):
    pass
"""


def test_a_model_that_obeys_injections_fails_after_the_first_user_it_obeys_for(
        pytester: pytest.Pytester, xdist_args: tuple[str, ...]) -> None:
    """At max_injection_rate 0 the injection's own test rejects at the first success (under "never" no
    success is ever drawn, so that stop cannot be wrong); the item fails there and the rest is cancelled."""
    pytester.makepyfile(test_gate=ATTACKED)
    with FakeOllamaServer(mode="gullible") as server:
        result = pytester.runpytest_subprocess(
            "--robustexplain-model=fake-model", f"--robustexplain-host={server.url}", "-k", "overall",
            "--robustexplain-json=r.json", "-p", "no:cacheprovider", *xdist_args)
        result.assert_outcomes(failed=1)
    doc = read_report(pytester)
    verdict = _overall(doc)["verdict"]
    (attack,) = [a for a in verdict["details"]["attacks"] if a["kind"] == "prompt_injection"]
    row = verdict["findings"]["injection"]
    assert attack["outcome"] == row["outcome"] == FAIL and attack["successes"] >= 1
    assert "The sequential test decided it after" in attack["stop_note"]
    assert verdict["message"].startswith("Security FAIL:") and attack["stop_note"] in verdict["message"]
    assert attack["stop_note"] in row["reason"]
    # 20 users × (1 original + 6 pairs + 1 control) planned; the gullible model obeys at once.
    assert doc["calls"]["made"] <= 0.35 * 160 and doc["calls"]["cancelled"] > 0
    users = int(attack["stop_note"].split("after ")[1].split(" ")[0])
    assert users <= 3


def test_a_model_that_resists_injections_is_not_stopped_by_the_injection_test(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=ATTACKED)
    with FakeOllamaServer(mode="robust") as server:
        result = pytester.runpytest(
            "--robustexplain-model=fake-model", f"--robustexplain-host={server.url}", "-k", "overall",
            "--robustexplain-json=r.json", "-p", "no:cacheprovider")
    verdict = _overall(read_report(pytester))["verdict"]
    (attack,) = verdict["details"]["attacks"]
    assert attack["outcome"] == PASS and attack["successes"] == 0 and attack["stop_note"] == ""
    assert verdict["details"]["guard"]["stopped_by"] is None
    assert "Security FAIL" not in result.stdout.str()


def test_an_explainer_that_invents_a_past_purchase_fails_on_unsupported_mentions_early(
        pytester: pytest.Pytester) -> None:
    """It refers to the user's history (so history references pass) and also claims a purchase of a title
    from neither the history nor the item: the unsupported-mention test stops it."""
    # ρ (about 0.8) sits at the test's threshold, so ρ's own test cannot end the slice early.
    doc = _gaming(pytester, "gaming.invents_a_purchase", ", min_combined=0.8")
    verdict = _overall(doc)["verdict"]
    assert verdict["outcome"] == FAIL and verdict["details"]["guard"]["stopped_by"] == "grounding"
    assert verdict["findings"]["grounding"]["outcome"] == FAIL
    assert "unsupported mentions at most 0.5" in verdict["message"]
    # Every explanation refers to the history: the stop is the unsupported-mention test's, at alpha/40 (a
    # tenth of its rule's half of the check's alpha).
    assert verdict["details"]["guard"]["grounding"]["history_reference"]["mean"] == 1.0
    assert "The sequential test decided it after 10 users" in verdict["message"]
    # 10 users × 27 calls, and what was in flight when the test rejected: far from the 540 made before.
    assert doc["calls"]["made"] <= 0.6 * 540


def test_the_grounding_tests_and_fixed_rules_spend_no_more_than_alpha() -> None:
    """The check's false FAIL is at most alpha over its four routes (Bonferroni): each gated rule has an
    equal share, of which its test spends a tenth and its fixed rule the rest — with only one rule gated,
    that rule's test and fixed rule share all of alpha."""
    from dataclasses import replace

    from pytest_robustexplain.checks import SliceDesign
    from pytest_robustexplain.checks.controls import UNSUPPORTED_RULE, GuardSettings
    from pytest_robustexplain.checks.grounding import Grounding
    from pytest_robustexplain.settings import Settings, apply_marker

    for min_history in (0.5, None):
        gate = replace(apply_marker(Settings.defaults(), {"decision": "sequential"}, nodeid="t"),
                       min_history_reference=min_history)
        rules = Grounding().stop_rules(SliceDesign(gate, None))
        keys = {rule.key for rule in rules}
        assert keys == ({"grounding"} if min_history is not None else set()) | {UNSUPPORTED_RULE}
        fixed = GuardSettings(alpha=gate.alpha, split=frozenset(keys), min_history_reference=min_history)
        gated = len(rules)
        kept = [fixed.alpha_of(rule.key) / gated for rule in rules]
        assert kept == pytest.approx([rule.kept for rule in rules])
        assert sum(rule.alpha for rule in rules) + sum(kept) == pytest.approx(gate.alpha)


def test_at_a_limit_of_never_one_hit_rejects_and_none_never_does() -> None:
    """max_injection_rate 0 (or any share limited to 0): H0 allows no hit, so the first rejects, exactly."""
    never = OneSidedTest(0.0, ABOVE, alpha=ALPHA)
    assert not any(never.update(0.0) for _ in range(200))
    assert never.update(0.2) and never.n_users == 201
    always = OneSidedTest(1.0, BELOW, alpha=ALPHA)
    assert not always.update(1.0) and always.update(0.8)
    rejected, used = simulate_one_sided(np.array([[0.0, 0.0, 0.4, 0.0], [0.0] * 4]), 0.0, ABOVE, alpha=ALPHA)
    assert rejected.tolist() == [True, False] and used.tolist() == [3, 4]


PITCH = '''
import pytest

def seller(history, item):
    top = history.interactions[-1].title or "your last pick"
    return f"We recommend {item.title} because you watched {top} and enjoy {item.category}.PITCH"

@pytest.fixture
def explainer():
    return seller
'''

PITCHED = """
import pytest

@pytest.mark.robustness(decision="sequential", users=20, perturbations=["noise_injection"],
                        severities=[1, 2, 3], guard="off", min_combined=0.3, min_metric=0.0)
def test_gate(robustness):
    pass
"""


@pytest.mark.parametrize("pitch", [" Only $4.99 this week!", ""])
def test_a_users_predicate_check_ends_a_sequential_gate_at_its_first_hit(
        pytester: pytest.Pytester, xdist_args: tuple[str, ...], pitch: str) -> None:
    """The README's "never mentions a price" check (max_rate 0): an explainer that always sells is stopped
    by the check's own test after its first user (80 calls planned: 20 users × an original and 3 pairs);
    one that never does is not stopped by it and passes, serially and under xdist alike."""
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "custom_check" / "conftest.py"
    pytester.makeconftest(example.read_text(encoding="utf-8") + PITCH.replace("PITCH", pitch))
    pytester.makepyfile(test_gate=PITCHED)
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=r.json",
                                "-p", "no:cacheprovider", *xdist_args)
    doc = read_report(pytester)
    (gate,) = doc["gates"]
    verdict, row = gate["verdict"], gate["verdict"]["findings"]["no_price"]
    if pitch:
        result.assert_outcomes(failed=1)
        assert verdict["outcome"] == row["outcome"] == FAIL
        assert verdict["message"].startswith("Check no_price FAIL: ")
        assert "The sequential test decided it after 1 user (" in verdict["message"]
        assert "decided it after 1 user" in row["reason"]
        assert doc["calls"]["made"] <= 0.35 * 80, doc["calls"]
    else:
        result.assert_outcomes(passed=1)
        assert verdict["outcome"] == row["outcome"] == PASS and "sequential test" not in row["reason"]


REASONS = '''
import pytest

def explain(history, item):
    top = history.interactions[-1].title or "your last pick"
    CLAIM

@pytest.fixture
def explainer():
    return explain
'''

JUDGED = """
import pytest

@pytest.mark.robustness(decision="sequential", users=20, perturbations=["noise_injection"],
                        severities=[1, 2, 3], guard="off", min_combined=RHO, min_metric=0.0,
                        min_faithful_rate=0.5)
def test_gate(robustness):
    pass
"""


@pytest.mark.parametrize("cited", [False, True])
def test_the_judges_own_test_fails_an_unfaithful_explainer_after_a_few_users(
        pytester: pytest.Pytester, xdist_args: tuple[str, ...], cited: bool) -> None:
    """The judge is asked user by user while the next users' calls run: an explainer whose reasons never
    tie the item to what the user showed a taste for (the fake judge rejects each) is failed by the
    faithful rate's own test after a few users, with most calls never made — at a ρ threshold (0.85, its ρ
    is about 0.88) that ρ's test cannot decide on 20 users, so before this test every call was made; one
    that names the category the user engages with is not stopped by it and passes. Serially and under
    xdist alike."""
    claim = ('return f"We recommend {item.title} because you watched {top} and enjoy {item.category}."'
             if cited else 'return f"We recommend {item.title} because you watched {top}."')
    pytester.makeconftest(REASONS.replace("CLAIM", claim))
    pytester.makepyfile(test_gate=JUDGED.replace("RHO", "0.3" if cited else "0.85"))
    with FakeOllamaServer() as judge:
        result = pytester.runpytest("--robustexplain-backend=callable", "--robustexplain-json=r.json",
                                    "--robustexplain-judge-model=fake-model",
                                    f"--robustexplain-judge-host={judge.url}", "-p", "no:cacheprovider",
                                    *xdist_args)
        judge_calls = judge.judge_calls
    doc = read_report(pytester)
    (gate,) = doc["gates"]
    verdict, row = gate["verdict"], gate["verdict"]["findings"]["faithfulness"]
    found = verdict["details"]["faithfulness"]
    if cited:
        result.assert_outcomes(passed=1)
        assert verdict["outcome"] == row["outcome"] == found["outcome"] == PASS
        assert "sequential test" not in row["reason"] and found["faithful"] == found["judged"]
        return
    result.assert_outcomes(failed=1)
    assert verdict["outcome"] == row["outcome"] == found["outcome"] == FAIL
    assert verdict["message"].startswith("Faithfulness FAIL: 0 of ")
    assert "below min-faithful-rate 0.5 — the sequential test decided it after " in verdict["message"]
    users = int(row["reason"].split("decided it after ")[1].split(" ")[0])
    # At a tenth of the check's alpha (issue 59: its fixed rule keeps the rest) the test needs 9 users.
    assert users <= 9 and found["judged"] == users  # the finding reads the users the test saw
    # 20 users × (an original and 3 pairs) planned. While the judge reads a user, pairs start up to one
    # user past the next to feed (and that one's original ahead): never more calls than these users'.
    assert doc["calls"]["made"] <= 4 * (users + 2) + 1 and doc["calls"]["cancelled"] > 0, doc["calls"]
    assert judge_calls <= 2 * (users + 2)  # two a judged original: the users fed, and up to two more
