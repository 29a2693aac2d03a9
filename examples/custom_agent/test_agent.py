"""The agent from conftest.py, gated like any model."""

from __future__ import annotations

import pytest


@pytest.mark.robustness(min_combined=0.5, min_metric=0.3, severities=[1, 3, 5])
def test_agent_explanations_are_robust(robustness):
    assert robustness.model == "recommendation_agent"
