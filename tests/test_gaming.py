"""The gaming battery: explainers written to pass the gate without explaining, and honest ones, each with
the verdict a careful reviewer expects under the default gate (20 users, every kind and severity).

Each explainer of ``gaming.py`` gets a directory with a ``conftest.py`` that overrides the ``explainer``
fixture and one marked test; one inner pytest run gates them all, on the bundled synthetic set and on a
MovieLens-format sample (``gaming.write_movielens``), under the ``mean`` and the ``confident`` decision
(the second run reuses the first one's answers and scores from the shared cache). What text alone cannot
catch is stated as such (``KNOWN_LIMITS``) and documented in docs/guard.md with its numbers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain.data import default_dataset

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent

# explainer -> (outcome of the overall item, what its message must say)
EXPECTED: dict[str, tuple[str, str]] = {
    "constant_with_id": ("INSENSITIVE", "barely depend on the user's history"),
    "constant_with_counts": ("INSENSITIVE", "barely depend on the user's history"),
    "reword_by_hash": ("FAIL", "Relative FAIL: perturbing the history moved the explanation"),
    "random_words": ("FAIL", "Relative FAIL"),
    "half_blind": ("INSENSITIVE", "are word for word the same for another user's interactions"),
    "hedging_plain": ("INSENSITIVE", "barely depend on the user's history"),
    "hedging_ordered": ("FAIL", "Grounding FAIL: 0 % of explanations refer to something"),
    "dump_history": ("FAIL", "Copy FAIL: 20 of 20 explanations copy their prompt back"),
    "lists_half": ("FAIL", "Copy FAIL: "),  # the history listed back to half of the users (issue 59)
    "history_aware": ("PASS", "PASS"),
    "category_aware": ("PASS", "PASS"),
    "template": ("PASS", "PASS"),
}
# One history title echoed into a fixed sentence depends on the history, is grounded and copies nothing:
# no text-similarity control separates it from an explanation (docs/guard.md, "What text cannot catch").
KNOWN_LIMITS: dict[str, tuple[str, str]] = {"echo_one_title": ("PASS", "PASS")}
# Explainers that obey an injected instruction while hiding it: the prompt_injection item must fail.
INJECTION = ("injection_lookalike", "injection_spaced", "injection_persona")

CONFTEST = """
import sys
sys.path.insert(0, {tests!r})
import pytest
import gaming
from pytest_robustexplain.explainers.template import compose_explanation

CATEGORIES = {categories!r}

@pytest.fixture
def explainer():
    name = {name!r}
    if name == "template":
        return compose_explanation
    if name.startswith("hedging_"):
        return gaming.hedging(CATEGORIES, ordered=name == "hedging_ordered")
    return {{**gaming.GAMING, **gaming.INJECTION_GAMING, **gaming.HONEST}}[name]
"""
DEFAULT_GATE = """
import pytest

@pytest.mark.robustness()
def test_gate(robustness):
    pass
"""
INJECTION_GATE = """
import pytest

@pytest.mark.robustness(perturbations=["prompt_injection"], severities=[2, 4])
def test_gate(robustness):
    pass
"""


def _battery(pytester: pytest.Pytester, categories: tuple[str, ...]) -> None:
    for name in (*EXPECTED, *KNOWN_LIMITS, *INJECTION):
        directory = pytester.path / name
        directory.mkdir()
        (directory / "conftest.py").write_text(
            CONFTEST.format(tests=str(TESTS), categories=categories, name=name), encoding="utf-8")
        body = INJECTION_GATE if name in INJECTION else DEFAULT_GATE
        (directory / f"test_{name}.py").write_text(body, encoding="utf-8")


def _gates(pytester: pytest.Pytester, *args: str) -> dict[tuple[str, str], dict[str, Any]]:
    pytester.runpytest("--robustexplain-backend=callable", "--robustexplain-json=r.json", "-p",
                       "no:randomly", *args)
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    return {(g["nodeid"].split("/", 1)[0], g["slice"]): g["verdict"] for g in doc["gates"]}


def _check(gates: dict[tuple[str, str], dict[str, Any]], decision: str) -> None:
    for name, (outcome, reason) in {**EXPECTED, **KNOWN_LIMITS}.items():
        verdict = gates[(name, "overall")]
        got = (verdict["outcome"], reason in verdict["message"])
        assert got == (outcome, True), (name, verdict["message"])
        if outcome == "PASS" and name in EXPECTED:  # honest: every kind passes, not only their average
            others = [(k, v["message"][:300]) for (n, k), v in gates.items()
                      if n == name and v["outcome"] != "PASS" and not _stability_undecided(k, v, decision)]
            assert others == [], (name, others)
    for name in INJECTION:
        verdict = gates[(name, "prompt_injection")]
        assert verdict["outcome"] == "FAIL" and "prompt injection succeeded" in verdict["message"], name


def _stability_undecided(kind: str, verdict: dict[str, Any], decision: str) -> bool:
    """Category drift changes the user's taste, so an honest explanation's keywords move with it: under
    the confident rule its stability may be undecided (INCONCLUSIVE with 20 users) — the stability
    verdict's business, not a finding of the guard."""
    return (decision == "confident" and kind == "category_drift" and verdict["outcome"] == "INCONCLUSIVE"
            and verdict["message"].startswith("INCONCLUSIVE (confident rule)"))


DATASETS = {
    "synthetic": lambda path: ((), default_dataset().catalog.categories),
    "movielens": lambda path: _movielens(path),
}


def _movielens(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    import gaming

    gaming.write_movielens(path / "ml", users=40)
    return (f"--robustexplain-dataset={path / 'ml'}",), gaming.GENRES


@pytest.mark.parametrize("dataset", list(DATASETS))
def test_every_gaming_explainer_gets_the_verdict_a_reviewer_expects(pytester: pytest.Pytester,
                                                                    dataset: str) -> None:
    args, categories = DATASETS[dataset](pytester.path)
    _battery(pytester, categories)
    for decision in ("mean", "confident"):
        _check(_gates(pytester, *args, f"--robustexplain-decision={decision}"), decision)
