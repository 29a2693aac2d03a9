"""The session report per slice: each failed item with its own thresholds, slice and worst pairs from that
slice only; no model line or comparison for explainers that ran nothing or ran other cases."""

from __future__ import annotations

import json
import re

import pytest

pytest_plugins = ["pytester"]

TWO_TESTS = """
import pytest

@pytest.mark.robustness(perturbations=["category_drift"], severities=[5], users=5, min_combined=0.95)
def test_strict(robustness):
    pass

@pytest.mark.robustness(users=5, severities=[1, 4])
def test_default(robustness):
    pass
"""


def test_a_failed_item_shows_its_own_threshold_slice_and_worst_pairs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=TWO_TESTS)
    result = pytester.runpytest("--robustexplain-backend=template", "-v", "--robustexplain-json=r.json")
    result.assert_outcomes(failed=1, passed=6)
    lines = result.stdout.lines
    row = next(i for i, line in enumerate(lines) if line.startswith("  FAIL test_s.py::test_strict"))
    title = " ".join(line.strip() for line in lines[row:row + 3])  # wrapped at the terminal width
    assert re.search(r"· category_drift L5 · 5 users: ρ 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\] < 0\.95", title)
    end = lines.index("", row)
    worst = [line for line in lines[row + 1:end] if re.match(r"\s+\d\. user ", line)]
    assert len(worst) == 3 and all("category_drift L5 ·" in line for line in worst), worst
    gates = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))["gates"]
    strict = next(g for g in gates if g["nodeid"].endswith("test_strict[category_drift]"))
    assert strict["scope"]["severities"] == [5] and len(strict["scope"]["users"]) == 5
    assert strict["thresholds"]["combined"] == 0.95


def test_an_explainer_overridden_everywhere_gets_no_line(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
import pytest

@pytest.fixture
def explainer():
    return lambda history, item: f"We recommend {item.title} for your taste in {item.category}."
""")
    pytester.makepyfile(test_a="""
import pytest

@pytest.mark.robustness(users=5, severities=[1], perturbations=["noise"], guard="off")
def test_agent(robustness):
    pass
""")
    result = pytester.runpytest("--robustexplain-backend=template", "-q")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "template ρ n/a" not in out and "0 pairs" not in out
    assert "Model comparison" not in out
