"""Shared test set-up.

pytester's in-process runs drop every module first imported during the inner run when it ends; numpy
(and so scipy) cannot be imported twice in one process. Importing the heavy modules the plugin uses
here, once, keeps them loaded across inner runs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy  # noqa: F401
import pytest
import scipy.stats  # noqa: F401

import pytest_robustexplain.explainers.ollama
import pytest_robustexplain.metrics
import pytest_robustexplain.perturbations
import pytest_robustexplain.report.html
import pytest_robustexplain.stats
from pytest_robustexplain.testing import FakeOllamaServer

# Building a Scorer imports nltk, textblob and sacrebleu lazily; build one now for the same reason.
pytest_robustexplain.metrics.Scorer()


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    """A loopback fake Ollama server serving ``fake-model:latest`` (stable replies); modules that need
    other models or replies override this fixture."""
    with FakeOllamaServer() as fake:
        yield fake


@pytest.fixture(params=[pytest.param((), id="serial"), pytest.param(("-n", "2"), id="xdist")])
def xdist_args(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """Arguments for an inner pytest run, so a test using them runs without xdist and under ``-n 2``:
    results travel from workers to the controller only in the second (the syrupy ``plugin_args`` pattern)."""
    args: tuple[str, ...] = request.param
    return args
