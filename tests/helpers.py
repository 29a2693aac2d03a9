"""Helpers the test modules share: an inner pytest run against the fake server, and the reports it wrote.

(The serial-vs-``-n 2`` parametrisation is the ``xdist_args`` fixture in ``conftest.py``.)
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_robustexplain.testing import FakeOllamaServer


def simulation(module: str = "simulation") -> ModuleType:
    """``benchmarks/simulation.py`` (the calibration generator and the guard's vectorised rules), or another
    benchmark ``module`` (not shipped with the package; the benchmarks import it by name, tests by its
    path)."""
    name = f"robustexplain_benchmark_{module}"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{module}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
    return sys.modules[name]


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
