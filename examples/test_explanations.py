"""Robustness gates on the explanations of the configured model (see examples/README.md)."""

from __future__ import annotations

import pytest


@pytest.mark.robustness(min_combined=0.5, min_metric=0.35)
def test_explanations_are_robust(robustness):
    """One test item per perturbation kind plus ``[overall]``; each gates its own slice.

    The gate itself is applied by the plugin; the body may add assertions of its own.
    """
    assert robustness.failures == (), "no generation may fail"


@pytest.mark.robustness(
    min_combined=0.45,
    min_metric={"structural": 0.2},  # BLEU is the strictest metric: paraphrases are not instability
    per_kind={"category_drift": {"min_combined": 0.4}},  # drift legitimately changes the taste profile
    severities=[1, 3, 5],
)
def test_custom_thresholds_per_kind(robustness):
    assert robustness.intervals["combined"].low > 0.0


@pytest.mark.robustness(perturbations=["missing_values"], severities=[5], min_combined=0.5)
def test_missing_metadata_does_not_derail_the_explanation(robustness, perturbed_histories):
    # Level 5 blanks about half of all ratings, timestamps and categories.
    blanked = [len(p.changes["blanked"]) for p in perturbed_histories]
    assert min(blanked) >= 1
    assert robustness.verdict.outcome == "PASS"


def test_explainer_fixture_can_be_called_directly(explainer, perturbed_histories):
    """The configured explainer, callable synchronously, for checks of your own."""
    first = perturbed_histories[0]
    from pytest_robustexplain.data import default_dataset

    item = next(c.item for c in default_dataset().cases if c.user_id == first.original.user_id)
    text = explainer(first.original, item)
    assert item.title in text or len(text.split()) > 5
