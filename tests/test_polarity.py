"""Preference polarity (a dislike cited as a reason to like) and the counterfactual preference flip (a kind
where a faithful explainer should change): the rules on their own, then end to end against the fake
server's rating-blind and rating-aware modes, and explainers written to pass without reading the ratings."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import read_report, run_fake

from pytest_robustexplain.checks.polarity.measure import (
    cites_as_liked,
    disliked,
    misattributed,
    summarise_polarity,
)
from pytest_robustexplain.data import Catalog, Interaction, Item, UserHistory, default_dataset, rating_scale
from pytest_robustexplain.metrics.mentions import Vocabulary
from pytest_robustexplain.perturbations import DEFAULT_REGISTRY, apply_perturbation
from pytest_robustexplain.perturbations.flip import FLIP, flipped_category, preference_flip
from pytest_robustexplain.results import FAIL, PASS, MisattributionCase
from pytest_robustexplain.settings.table import DEFAULT_PERTURBATIONS
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

ITEMS = [Item("m1", "The Long Heat", "Crime"), Item("m2", "Quiet Alien Nights", "Sci-Fi"),
         Item("m3", "Sunny Side Story", "Comedy"), Item("m4", "Grey Harbour Blues", "Drama"),
         Item("m5", "Another Grey Harbour", "Drama"), Item("m9", "Aliens Return Home", "Sci-Fi")]
CATALOG = Catalog(ITEMS)
VOCABULARY = Vocabulary(CATALOG)


def _history(*ratings: tuple[str, float | None]) -> UserHistory:
    by_id = {i.item_id: i for i in ITEMS}
    return UserHistory("u", tuple(Interaction(m, by_id[m].category, 86_400 * n, r, by_id[m].title)
                                  for n, (m, r) in enumerate(ratings)))


HISTORY = _history(("m1", 5.0), ("m2", 4.5), ("m3", 1.0), ("m4", 2.0), ("m5", 1.5))
TARGET = ITEMS[5]


# ------------------------------------------------------------------------------ what counts as disliked
def test_the_lowest_quarter_of_the_scale_and_far_below_the_users_own_mean_are_disliked() -> None:
    titles, categories = disliked(HISTORY)
    assert titles == {"Sunny Side Story", "Grey Harbour Blues", "Another Grey Harbour"}
    assert categories == {"Drama"}  # two ratings, mean 1.75; Comedy has one rating only
    # A generous rater: 5s and one 3.0 — 1.5 below their own mean is a dislike too.
    generous = _history(("m1", 5.0), ("m2", 5.0), ("m4", 5.0), ("m3", 3.0))
    assert disliked(generous)[0] == {"Sunny Side Story"}
    assert disliked(_history(("m1", None), ("m3", None))) == (set(), set())
    assert rating_scale([0.5, 4.0]) == (0.5, 5.0) and rating_scale([]) == (1.0, 5.0)


def test_citing_a_dislike_as_a_reason_to_like_is_caught_and_saying_the_dislike_is_not() -> None:
    praise = "You loved Sunny Side Story and Grey Harbour Blues, so Aliens Return Home will delight you."
    eligible, cited, sentence = misattributed(praise, HISTORY, TARGET, VOCABULARY)
    assert eligible and set(cited) == {"sunny side story", "grey harbour blues"}
    assert sentence.startswith("You")
    honest = ("You rated Grey Harbour Blues poorly and did not enjoy Drama, so this pick is Sci-Fi like "
              "Quiet Alien Nights, which you loved.")
    assert misattributed(honest, HISTORY, TARGET, VOCABULARY)[1] == ()
    # The item's own category describes the item, not the user's taste.
    drama_item = ITEMS[3]
    assert misattributed("A fine Drama for you.", HISTORY, drama_item, VOCABULARY)[1] == ()
    assert misattributed("Anything", _history(("m1", None)), TARGET, VOCABULARY) == (False, (), "")


def test_the_misattributed_rate_gate_fails_only_when_confidently_above_its_limit() -> None:
    def cases(k: int, n: int) -> list[MisattributionCase]:
        return [MisattributionCase(f"u{i}", "i", 0, True, ("x",) if i < k else ()) for i in range(n)]

    high, low = (summarise_polarity(cases(k, 10), max_rate=0.2, alpha=0.05) for k in (9, 3))
    assert high is not None and high.outcome == FAIL and low is not None and low.outcome == PASS
    found = summarise_polarity([*cases(0, 10), MisattributionCase("v", "i", 0, False)], max_rate=None,
                               alpha=0.05)
    assert found is not None and (found.misattributed, found.eligible, found.outcome) == (0, 10, None)
    assert summarise_polarity([MisattributionCase("v", "i", 0, False)], max_rate=0.2, alpha=0.05) is None


# ------------------------------------------------------------------------------ the flip kind
def test_the_flip_inverts_the_best_rated_part_of_the_most_engaged_category() -> None:
    history = _history(("m4", 5.0), ("m5", 4.0), ("m1", 4.5), ("m4", 3.0), ("m5", 2.0))
    assert flipped_category(history) == "Drama"
    rng = np.random.default_rng(0)
    for severity, expected in ((1, 1), (3, 2), (5, 4)):
        flipped, changes = preference_flip(history, severity, CATALOG, np.random.default_rng(severity))
        assert len(changes["flipped"]) == expected and changes["category"] == "Drama"
        first = sorted(changes["flipped"], key=lambda e: -e["rating"])[0]
        assert first["rating"] == 5.0 and first["flipped_to"] == 1.0  # the best-rated first, 1 + 5 − r
        assert [i.item_id for i in flipped] == [i.item_id for i in history]  # same items, order, times
        assert flipped.interactions[2] == history.interactions[2]  # other categories untouched
    movielens = _history(("m4", 0.5), ("m5", 4.0))
    assert preference_flip(movielens, 5, CATALOG, rng)[0].interactions[1].rating == 1.5  # 0.5 + 5 − 4
    unrated = _history(("m4", None))
    assert preference_flip(unrated, 3, CATALOG, rng)[0] == unrated  # trivial: skipped


def test_the_flip_is_opt_in_seeded_and_described() -> None:
    assert FLIP not in DEFAULT_PERTURBATIONS and FLIP in DEFAULT_REGISTRY.names()
    data = default_dataset()
    case = data.cases[0]
    one = apply_perturbation(case.history, "flip", 3, catalog=data.catalog, seed=7)
    assert one == apply_perturbation(case.history, FLIP, 3, catalog=data.catalog, seed=7)
    assert one.description.startswith("inverted ") and one.changes["category"] in one.description


def test_a_sentence_that_names_the_category_without_a_dislike_cue_cites_it_as_liked() -> None:
    assert cites_as_liked("You keep coming back to Dramas. This fits.", "Drama")
    assert not cites_as_liked("You rated Drama items poorly, so this steers away from them.", "Drama")
    assert not cites_as_liked("A Sci-Fi pick for a Sci-Fi fan.", "Drama")


# ------------------------------------------------------------------------------ end to end
PRAISES_DISLIKES = """
import pytest

@pytest.fixture
def explainer():
    def explain(history, item):
        rated = sorted((i for i in history if i.rating is not None and i.title), key=lambda i: i.rating)
        worst = rated[0].title if rated else "your picks"
        return f"You loved {worst}, so {item.title} is a great next choice for you."
    return explain
"""

PRAISES_FAVOURITES = PRAISES_DISLIKES.replace("rated[0]", "rated[-1]")

POLARITY_TEST = """
import pytest

@pytest.mark.robustness(users=8, perturbations=["noise"], severities=[1], max_misattributed_rate=0.2,
                        guard="off")
def test_gate(robustness):
    p = robustness.verdict.polarity
    print("POLARITY", robustness.verdict.outcome, p.misattributed, p.eligible, p.outcome)
"""


@pytest.mark.parametrize("conftest, misattributed, outcome", [(PRAISES_DISLIKES, True, FAIL),
                                                              (PRAISES_FAVOURITES, False, PASS)])
def test_praising_what_the_user_disliked_is_measured_and_gated(pytester: pytest.Pytester, conftest: str,
                                                               misattributed: bool, outcome: str) -> None:
    pytester.makeconftest(conftest)
    pytester.makepyfile(POLARITY_TEST)
    result = pytester.runpytest("-s", "-p", "no:randomly", "--robustexplain-backend=callable",
                                "--robustexplain-json=r.json")
    found = read_report(pytester)["gates"][0]["verdict"]["details"]["polarity"]
    assert found["eligible"] > 0 and (found["misattributed"] > 0) == misattributed
    assert found["outcome"] == outcome
    if misattributed:
        assert found["misattributed"] == found["eligible"]
        result.assert_outcomes(failed=1)
        out = result.stdout.str()
        assert "Polarity FAIL" in out and "cite one as a reason to like" in out
        # No judge ran: its section's heading says what it holds, and no judge (issue 62).
        assert "Faithfulness (liked vs disliked, from the ratings)" in out and "judge-model" not in out
    else:
        assert found["misattributed"] == 0
        result.assert_outcomes(passed=1)


FLIP_TEST = """
import pytest

@pytest.mark.robustness(users=8, perturbations=["preference_flip"])
def test_flip(robustness):
    f = robustness.verdict.flip
    print("FLIP", robustness.verdict.outcome, round(f.sensitivity.mean, 3), f.still_liked, f.majority_pairs)
"""


@pytest.mark.parametrize("mode, outcome", [("rating-blind", "FAIL"), ("stable", "FAIL"),
                                           ("rating-aware", "PASS")])
def test_only_a_rating_aware_explainer_passes_the_preference_flip(pytester: pytest.Pytester, mode: str,
                                                                  outcome: str) -> None:
    pytester.makepyfile(FLIP_TEST)
    with FakeOllamaServer(mode=mode) as server:
        result = run_fake(pytester, server, "-s", "-p", "no:randomly", "--robustexplain-json=r.json")
    result.assert_outcomes(**{"passed" if outcome == "PASS" else "failed": 1})
    flip = read_report(pytester)["gates"][0]["verdict"]["details"]["flip"]
    assert flip["outcome"] == outcome and flip["majority_pairs"] == 24  # 8 users × severities 3, 4, 5
    if mode == "rating-blind":  # ratings never reach its text: nothing moved, every explanation the same
        assert flip["sensitivity"]["mean"] == 0.0 and flip["still_liked"] == 24
    if mode == "stable":  # it moves a little (its best-rated title) but keeps praising the flipped category
        assert flip["sensitivity"]["mean"] > 0.05 and flip["still_liked"] > 12
    if mode == "rating-aware":
        assert flip["sensitivity"]["mean"] > 0.05 and flip["still_liked"] <= 12


def test_the_flip_beside_robustness_kinds_is_decided_apart(pytester: pytest.Pytester) -> None:
    kinds = '["noise", "preference_flip"], severities=[1, 3]'
    pytester.makepyfile(FLIP_TEST.replace('["preference_flip"]', kinds).replace(
        "    f = robustness.verdict.flip\n", "    return\n"))
    with FakeOllamaServer(mode="rating-aware") as server:
        result = run_fake(pytester, server, "-p", "no:randomly", "--robustexplain-json=r.json")
    result.assert_outcomes(passed=3)  # noise (stability), preference_flip (its own rule), overall (both)
    gates = {g["slice"]: g["verdict"] for g in read_report(pytester)["gates"]}
    flip = gates["preference_flip"]
    assert "stability" not in flip["details"] and flip["details"]["flip"]["outcome"] == PASS
    assert gates["noise_injection"]["details"].get("flip") is None
    overall = gates["overall"]
    assert overall["details"]["flip"]["robust_rho"] is not None
    # The overall ρ gate is decided on the robustness kinds only: the flip's lower ρ does not drag it.
    assert {c["quantity"] for c in overall["details"]["stability"]} >= {"combined"}
    # The noise pairs (8 users × 2 severities) alone.
    assert overall["details"]["stability"][0]["interval"]["n"] == 16


def test_the_flip_with_the_sequential_decision_is_a_usage_error(pytester: pytest.Pytester,
                                                                 server: FakeOllamaServer) -> None:
    pytester.makepyfile(FLIP_TEST)
    result = run_fake(pytester, server, "--robustexplain-decision=sequential")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*preference_flip kind is decided by its own rule*"])
