"""Helpers the test modules share: an inner pytest run against the fake server, and the reports it wrote.

(The serial-vs-``-n 2`` parametrisation is the ``xdist_args`` fixture in ``conftest.py``.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain.testing import FakeOllamaServer


def run_fake(pytester: pytest.Pytester, server: FakeOllamaServer, *args: str,
             model: str = "fake-model") -> pytest.RunResult:
    """An inner pytest run whose robustness tests gate ``model`` on the fake server."""
    return pytester.runpytest(f"--robustexplain-model={model}", f"--robustexplain-host={server.url}", *args)


def read_report(path: Path | pytest.Pytester, name: str = "r.json") -> dict[str, Any]:
    """A JSON report: the file at ``path``, or ``name`` in a pytester directory."""
    file = path.path / name if isinstance(path, pytest.Pytester) else path
    doc: dict[str, Any] = json.loads(file.read_text(encoding="utf-8"))
    return doc


def marked(keywords: str, body: str = "pass") -> str:
    """A test file with one test, ``test_gate``, marked ``@pytest.mark.robustness(<keywords>)``."""
    return f"""
import pytest

@pytest.mark.robustness({keywords})
def test_gate(robustness):
    {body}
"""
