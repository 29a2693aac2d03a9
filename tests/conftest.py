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
