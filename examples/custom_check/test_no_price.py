"""The explanations are robust, and none of them mentions a price (conftest.py registers that check)."""

from __future__ import annotations

import pytest


@pytest.mark.robustness(min_combined=0.5, min_metric=0.3, severities=[1, 3])
def test_explanations_never_mention_a_price(robustness):
    row = robustness.verdict.findings["no_price"]
    assert row.outcome == "PASS", row.reason
