"""pytest glue for pytest-robustexplain (options, marker, fixtures, hooks)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "robustness(min_combined=0.5, min_metric=0.35, ...): gate this test on explanation robustness.",
    )
