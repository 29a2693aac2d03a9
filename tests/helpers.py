"""Helpers the test modules share: an inner pytest run against the fake server, and the reports it wrote.

(The serial-vs-``-n 2`` parametrisation is the ``xdist_args`` fixture in ``conftest.py``.)
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
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


def stable_report(value: Any, volatile: set[str], settings: Callable[[dict[str, Any]], dict[str, Any]],
                  **replaced: Any) -> Any:
    """A JSON report to compare with another: without the keys in ``volatile`` (what depends on the clock
    or the processes, at any depth), its gates in one order (xdist records them as they finish), its
    settings through ``settings`` and its top-level fields ``replaced``."""
    if isinstance(value, dict) and "schema" in value:
        gates = sorted(value["gates"], key=lambda g: (g["nodeid"], g["model"], g["slice"]))
        value = {**value, **replaced, "gates": gates, "settings": settings(value["settings"])}
    if isinstance(value, dict):
        return {k: stable_report(v, volatile, settings) for k, v in value.items() if k not in volatile}
    if isinstance(value, list):
        return [stable_report(v, volatile, settings) for v in value]
    return value
