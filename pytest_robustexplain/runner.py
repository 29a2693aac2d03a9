"""What only pytest knows about a gated item: its marker and slice parameter, whether pytest will skip it
or its conftest overrides the ``explainer`` fixture, the conftests' registrations, xdist, and the one
translation of the engine's errors into pytest's words.

The run itself is the engine's, pytest-free (``engine.items.ItemRun`` over ``engine.Run``, shared with
``robustexplain run``). Nothing heavy is imported here: a session without marked tests never imports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from .errors import RobustExplainError

if TYPE_CHECKING:
    from .engine import SliceParam


MARKER = "robustness"
SLICE_PARAM = "robustexplain_slice"
STOP_INPUT = "robustexplain_stop"  # the workerinput key naming the controller's stop file


@contextmanager
def engine_errors(*, usage: bool, session: pytest.Session | None = None) -> Iterator[None]:
    """The one translation of the engine's errors into pytest's words: a RobustExplainError inside is a
    usage error (``usage``: a dead server, a bad dataset, baseline or marker) or fails the test with its
    message alone; ``from None``: the report shows it once. An xdist worker's usage error (``session``: an
    item's set-up) would be xdist's INTERNALERROR: the item fails with the message and the worker stops."""
    try:
        yield
    except RobustExplainError as exc:
        message = f"robustexplain: {exc}"
        if usage and session is not None and is_xdist_worker(session.config):
            session.shouldstop = message
        elif usage:
            raise pytest.UsageError(message) from None
        raise pytest.fail.Exception(message, pytrace=False) from None


def is_xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (it plans only the items it runs, ships results)."""
    return hasattr(config, "workerinput")


def slice_param(item: pytest.Item) -> SliceParam | None:
    """The slice parameter of a marked item (asked of marked items only: the engine is imported here)."""
    from .engine import SliceParam  # lazy: loads numpy, sqlite3

    callspec = getattr(item, "callspec", None)
    value = callspec.params.get(SLICE_PARAM) if callspec is not None else None
    return value if isinstance(value, SliceParam) else None


def ungated_reason(item: pytest.Item) -> str | None:
    """Why an item carrying the robustness marker was not made a gate, or None (not marked, or a gate).

    pytest expands a marked test into one item per kind while it collects the test function
    (``pytest_generate_tests``); a marker that reaches the item any other way — a unittest method,
    ``pytest.param(..., marks=...)``, ``add_marker`` after collection — gates nothing, and the test would
    pass with no model called: the item fails instead, saying so."""
    if item.get_closest_marker(MARKER) is None or slice_param(item) is not None:
        return None
    import unittest  # lazy: kept off the plugin's import

    cls = getattr(item, "cls", None)
    if isinstance(cls, type) and issubclass(cls, unittest.TestCase):
        how = ("pytest does not parametrize unittest.TestCase methods, so a marked one cannot be expanded: "
               "write the gate as a plain test function (or a method of a plain class)")
    else:
        how = ("the marker reached it after its test function was collected (pytest.param(..., marks=...) "
               "or add_marker in a hook): put @pytest.mark.robustness on the test function, its class or "
               "its module (pytestmark)")
    return f"{item.nodeid}: @pytest.mark.robustness is on this test but nothing was gated: {how}"


def skipped_by_mark(item: pytest.Item) -> bool:
    """Whether pytest will skip the item before its fixtures run: ``skip``, ``skipif`` with a true boolean
    condition (the usual ``skipif(not HAVE_GPU, ...)``), ``xfail(run=False)``. Such an item is not planned,
    so a session whose gated tests are all skipped calls no model (and needs no server). A string
    condition is evaluated only by pytest, at set-up: that item is planned and, if skipped, costs calls."""
    if item.get_closest_marker("skip") is not None:
        return True
    for mark in item.iter_markers("skipif"):
        conditions = mark.args or ((mark.kwargs["condition"],) if "condition" in mark.kwargs else ())
        if any(isinstance(c, bool) and c for c in conditions):
            return True
    if item.config.option.runxfail:  # which runs even an xfail(run=False) test
        return False
    return any(mark.kwargs.get("run") is False for mark in item.iter_markers("xfail"))


def overrides_explainer(item: pytest.Item) -> bool:
    """Whether a conftest or module overrides the ``explainer`` fixture for this item.

    pytest has no public API for "which fixture definition would this item get for name X", so this
    asks the fixture manager directly; both signatures of ``getfixturedefs`` (node since pytest 8.1,
    nodeid before) are handled.
    """
    manager = item.session._fixturemanager
    try:
        defs = manager.getfixturedefs("explainer", item) or ()
    except (TypeError, AttributeError):
        defs = manager.getfixturedefs("explainer", item.nodeid) or ()  # type: ignore[arg-type]
    return bool(defs) and getattr(defs[-1].func, "__module__", "") != "pytest_robustexplain.plugin"


def __getattr__(name: str) -> Any:
    """``runner.BoundExplainer`` (the ``explainer`` fixture's type) where it was, imported when asked."""
    if name == "BoundExplainer":
        from .engine.items import BoundExplainer  # lazy: loads numpy, sqlite3

        return BoundExplainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
