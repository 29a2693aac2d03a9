"""pytest glue for pytest-robustexplain: options, ini keys, the marker, fixtures and hooks.

This module is imported into every pytest run of everyone who installs the package, so it imports
nothing heavy and does nothing for sessions without ``@pytest.mark.robustness`` tests. Hook bodies
are methods of one registered :class:`RobustExplainPlugin` per config and hand over to
:mod:`pytest_robustexplain.runner`; settings are resolved on first use.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .progress import Progress
from .runner import (  # cheap: the adapter imports heavy parts lazily
    MARKER,
    SLICE_PARAM,
    STOP_INPUT,
    engine_errors,
    is_xdist_worker,
    ungated_reason,
)
from .settings import MARKER_DOC, register_options, settings_from_pytest

if TYPE_CHECKING:
    from .explainers.base import Explainer
    from .perturbations import PerturbationResult
    from .report.summary import ReportModel
    from .runner import BoundExplainer, Robustness, RobustnessRun
    from .testing import FakeOllamaServer


PLUGIN_NAME = "robustexplain-session"  # the registered plugin object's name
PLUGIN_KEY = pytest.StashKey["RobustExplainPlugin"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    register_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC)
    # The session object is the plugin (pytest-xdist's DSession): one per config, so it dies with its
    # config (pytester runs sessions in sessions), and its hooks are its methods.
    plugin = RobustExplainPlugin(config)
    config.stash[PLUGIN_KEY] = plugin
    config.pluginmanager.register(plugin, PLUGIN_NAME)


class RobustExplainPlugin:
    """The plugin of one pytest config: the hooks, each a few lines handing over to the adapter
    (:class:`~pytest_robustexplain.runner.RobustnessRun`), which is made — and the settings resolved — on
    first use, so a session without marked tests never builds it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._run: RobustnessRun | None = None
        self.report: ReportModel | None = None  # the finished run, as the writers read it
        # Lines for the end of the terminal summary (a report that could not be written, a stopped run):
        # said there, after pytest's progress line is done, never glued to its dots.
        self.notes: list[tuple[str, bool]] = []

    @property
    def run(self) -> RobustnessRun:
        if self._run is None:
            from .runner import RobustnessRun, registered_kinds

            kinds = registered_kinds(self.config)
            canonical = kinds.canonical if kinds is not None else None
            with engine_errors(usage=True):
                settings = settings_from_pytest(self.config, canonical_kind=canonical)
                self._run = RobustnessRun(self.config, settings, kinds)
        return self._run

    def marked(self, item: pytest.Item) -> bool:
        """Whether the item is one of the run's gated items (never builds the run)."""
        return self._run is not None and self._run.marked(item.nodeid)

    # ----------------------------------------------------------------------------------- collection
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        marker = metafunc.definition.get_closest_marker(MARKER)
        if marker is not None:
            # A collection error showing just the message (it names the test), not pluggy's frames.
            with engine_errors(usage=False):
                params = self.run.params_for(self.run.gate_for(metafunc.definition.nodeid, marker))
            # The slice parameter is not an argument of the test function: adding it to the fixture names
            # lets pytest parametrize it directly, so each perturbation kind becomes its own test item.
            metafunc.fixturenames.append(SLICE_PARAM)
            metafunc.parametrize(SLICE_PARAM, params, ids=[p.label for p in params])

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Resolve (and validate) the settings up front: a bad value is one usage error naming the option,
        # not a collection error per marked test. An unreadable or incomparable baseline is one usage
        # error here, where the xdist controller sees it too (it collects no items).
        if self.run.settings.baseline is not None and not is_xdist_worker(self.config):
            with engine_errors(usage=True):
                self.run.load_baseline()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self._run is not None:
            with engine_errors(usage=True):
                self._run.plan_items(session.items)

    # ----------------------------------------------------------------------------------- running
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        reason = ungated_reason(item) if not self.marked(item) else None
        if reason is not None:  # marked, but not in a form pytest expands: never a silent pass
            pytest.fail(reason, pytrace=False)
        yield  # the test body ran (and passed: a failure raises out of the yield)
        if self.marked(item):
            with Progress.for_config(self.config, self.run) as progress:
                self.run.enforce(item, tick=progress.tick)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        # Only an xdist worker ships its pairs to the controller; a serial run already has them.
        if call.when == "call" and self.marked(item) and self.run.lazy:
            payload = self.run.item_payload(item)
            if payload is not None:  # a plain dict attribute travels with the report to the controller
                report.robustexplain = payload  # type: ignore[attr-defined]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self._run is not None:
            self._run.note_report(report)

    # ----------------------------------------------------------------------------------- xdist and stopping
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: each worker watches the stop file SIGTERM to the controller creates."""
        stop_file = self.run.stop_file_for_workers()
        if stop_file is not None:
            node.workerinput[STOP_INPUT] = stop_file

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: add a worker's call counters (and changed models) to the run's record."""
        output = getattr(node, "workeroutput", {}).get("robustexplain")
        if output:
            self.run.merge_worker(output)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """The session was stopped (Ctrl-C or SIGTERM): an xdist controller's workers stop too — a signal
        to the controller alone reaches none of them."""
        if self._run is not None:
            self._run.ask_workers_to_stop()

    # ----------------------------------------------------------------------------------- the end
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._run is not None:
            from .finish import finish_session

            self.report = finish_session(self._run, session, self.notes)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.report is not None:
            from .finish import print_summary

            print_summary(self.report, terminalreporter, config, self.run.lines)
        for line, red in self.notes:
            terminalreporter.write_line(f"robustexplain: {line}", red=red, bold=red, yellow=not red)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._run is not None:
            self._run.close()


def _plugin(request: pytest.FixtureRequest) -> RobustExplainPlugin:
    return request.config.stash[PLUGIN_KEY]


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture
def explainer(request: pytest.FixtureRequest) -> Explainer | BoundExplainer:
    """The configured explainer: ``explainer(history, item) -> str``, ``explainer.explain(...)``.

    Override this fixture in a ``conftest.py`` to gate your own production agent: return any callable
    ``(history, item) -> str`` (plain or async) or an object implementing the Explainer protocol, and
    every ``@pytest.mark.robustness`` test under that conftest is run against it.
    """
    from .runner import BoundExplainer

    run = _plugin(request).run
    return BoundExplainer(run, run.fixture_model(request.node.nodeid))


@pytest.fixture
def perturbed_histories(request: pytest.FixtureRequest) -> list[PerturbationResult]:
    """The perturbations of this test's slice (or of the run's default plan in an unmarked test).

    Each item has ``original``, ``perturbed``, ``kind``, ``severity``, ``repeat``, ``changes`` (what
    changed, machine-readable) and ``summary``; pairs whose perturbation changed nothing are left out.
    """
    with engine_errors(usage=False):
        return _plugin(request).run.perturbations_for(request.node)


@pytest.fixture
def robustness(request: pytest.FixtureRequest) -> Robustness:
    """The finished result of this test's slice: verdict, per-metric intervals, worst pairs, pairs."""
    plugin = _plugin(request)
    if not plugin.marked(request.node):
        pytest.fail(f"{request.node.nodeid}: the `robustness` fixture needs @pytest.mark.robustness "
                    "on the test", pytrace=False)
    with Progress.for_config(request.config, plugin.run) as progress:
        return plugin.run.result_for(request.node, tick=progress.tick)


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllamaServer]:
    """A loopback fake Ollama server (real HTTP; the official client cannot tell) for offline tests.

    Point the plugin at it with ``--robustexplain-host=<fake_ollama.url>`` or use ``fake_ollama.url``
    as the host of your own client. Scriptable: ``mode``, ``latency``, ``capacity``, ``fail_next``,
    ``hang_next``, ``drop_next``, ``empty_next``, ``refuse_next``, ``bloat_next``; counts ``chat_calls`` and
    ``peak_in_flight``.
    """
    from .testing import FakeOllamaServer

    with FakeOllamaServer() as server:
        yield server
