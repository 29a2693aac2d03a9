"""Shared test set-up.

pytester's in-process runs drop every module first imported during the inner run when it ends. A run keeps
its state (warning queue, registered kinds, report model) on the run object, so two copies of one of the
plugin's modules have nothing to disagree about — but a test that patches a module object does: after an
earlier inner run first imported ``explainers/cache.py`` and dropped it, ``from … import cache`` still
returned the dropped copy (its package's attribute), the test patched that, and its own inner run imported
a fresh, unpatched one (a full disk that never happened: order-dependent, seen under xdist). So every
module of the package is imported here, once, before any test. Third-party libraries too: numpy (and so
scipy) cannot be imported twice in one process, matplotlib keeps its font cache and rc state in its
modules, and a second copy of httpx or httpcore beside the first breaks httpx's mapping of httpcore errors
(a refused connection surfaced as a bare ``httpcore.ConnectError`` in whichever test ran after an inner run
that first imported them — a flaky, order-dependent failure under xdist).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio  # noqa: F401
import httpcore  # noqa: F401
import httpx  # noqa: F401
import matplotlib.backends.backend_agg
import matplotlib.figure  # noqa: F401
import numpy  # noqa: F401
import ollama  # noqa: F401
import pytest
import scipy.stats  # noqa: F401
import yaml  # noqa: F401

from pytest_robustexplain.metrics import Scorer
from pytest_robustexplain.testing import FakeOllamaServer

# Building a Scorer imports nltk, textblob and sacrebleu lazily; build one now for the same reason.
Scorer()


def _import_the_package() -> None:
    import importlib
    import pkgutil

    import pytest_robustexplain

    for module in pkgutil.walk_packages(pytest_robustexplain.__path__, "pytest_robustexplain."):
        if not module.name.endswith("__main__"):  # runs the command line
            importlib.import_module(module.name)


_import_the_package()


@pytest.fixture(autouse=True)
def _not_on_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs print alike on a developer's machine and on CI: pytest cuts the short summary's
    messages to the terminal's width except when ``CI`` or ``BUILD_NUMBER`` is set (a test counting a
    message then saw it twice as often on CI)."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The test's own working directory, without ROBUSTEXPLAIN_*, OLLAMA_HOST or GitHub Actions variables
    from the environment it was started in (a developer's shell, CI)."""
    for name in list(os.environ):
        if name.startswith("ROBUSTEXPLAIN_") or name in ("OLLAMA_HOST", "GITHUB_ACTIONS",
                                                         "GITHUB_STEP_SUMMARY"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


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


@pytest.fixture
def chromium(tmp_path: Path) -> Callable[..., Any]:
    """Opens a local page in headless Chromium and returns what its script wrote, as JSON, into
    ``<pre id="result">`` by the time the page had loaded (``--dump-dom``). Skips the test when Chromium is
    not installed. Pages may frame other local files (``--allow-file-access-from-files``)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("chromium is not installed: the page is measured in a headless browser")

    def run(page: Path, *flags: str) -> Any:
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                   f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1500,1000", *flags,
                   "--dump-dom", page.as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        found = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.DOTALL)
        assert found and found.group(1) != "waiting", (done.stdout[:500], done.stderr[-2000:])
        return json.loads(html.unescape(found.group(1)))

    return run
