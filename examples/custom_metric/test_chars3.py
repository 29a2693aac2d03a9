"""Gate the conftest's metric by name; a second test also gives it a share of ρ."""

from __future__ import annotations

import pytest


@pytest.mark.robustness(min_combined=0.5, min_metric={"chars3": 0.5}, severities=[1, 3])
def test_explanations_keep_their_characters(robustness):
    gated = {check.quantity: check for check in robustness.verdict.checks}
    assert "chars3" in gated, "min_metric names chars3: it is gated"
    assert gated["chars3"].outcome == "PASS"


@pytest.mark.robustness(
    min_combined=0.5, severities=[1, 3],
    weights={"semantic": 0.2, "keyword": 0.2, "structural": 0.2, "length": 0.2, "chars3": 0.2},
)
def test_rho_with_a_share_for_chars3(robustness):
    pair = robustness.pairs[0]
    expected = sum(0.2 * pair.metric(m) for m in ("semantic", "keyword", "structural", "length", "chars3"))
    assert pair.combined == pytest.approx(min(1.0, expected), abs=1e-9)
