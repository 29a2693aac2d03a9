"""pytest glue for pytest-robustexplain: options, ini keys, the marker, fixtures and hooks.

This module is imported into every pytest run of everyone who installs the package, so it imports
nothing heavy and does nothing for sessions without ``@pytest.mark.robustness`` tests. Hook bodies are
methods of one registered :class:`RobustExplainPlugin` per config: each translates between pytest and the
engine's pytest-free :class:`~pytest_robustexplain.engine.items.ItemRun` (made on first use), which plans,
runs and decides; :mod:`.runner` holds what only pytest knows about an item.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .errors import ConfigError, RobustExplainWarning
from .registrations import registered_checks, registered_kinds
from .runner import (  # cheap: the engine is imported lazily
    MARKER,
    SLICE_PARAM,
    STOP_INPUT,
    engine_errors,
    is_xdist_worker,
    overrides_explainer,
    skipped_by_mark,
    slice_param,
    ungated_reason,
)
from .settings import MARKER_DOC, register_options, settings_from_pytest

if TYPE_CHECKING:
    from .checks import CheckRegistry
    from .engine import RunOutcome
    from .engine.items import BoundExplainer, ItemRun
    from .explainers.base import Explainer
    from .perturbations import KindRegistry, PerturbationResult
    from .results import Robustness
    from .settings import Settings
    from .testing import FakeOllamaServer


PLUGIN_NAME = "robustexplain-session"  # the registered plugin object's name
PLUGIN_KEY = pytest.StashKey["RobustExplainPlugin"]()
# pytest's exit code when every test passed but a report could not be written (documented in docs/ci.md):
# distinct from 1, so a broken report path never reads as a failed gate, nor passes unnoticed.
REPORT_ERROR_EXIT = pytest.ExitCode.USAGE_ERROR


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs  # lazy: kept off the plugin's import

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
    """The plugin of one pytest config: its hooks translate between pytest and the engine's ``ItemRun``,
    made on first use — a session without marked tests resolves its settings and never builds it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._settings: Settings | None = None
        self._kinds: KindRegistry | None = None  # what this session's conftests registered
        self._items: ItemRun | None = None
        self._checks: dict[Path, CheckRegistry | None] = {}  # by test directory: its conftests' checks
        self.done: RunOutcome | None = None  # the finished run: as the writers read it, the files written
        # Lines for the end of the terminal summary (a report that could not be written, a stopped run):
        # said there, after pytest's progress line is done, never glued to its dots.
        self.notes: list[tuple[str, bool]] = []

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._kinds = registered_kinds(self.config.hook.pytest_robustexplain_register_perturbations,
                                           pytest.UsageError)
            canonical = self._kinds.canonical if self._kinds is not None else None
            with engine_errors(usage=True):
                self._settings = settings_from_pytest(self.config, canonical_kind=canonical)
        return self._settings

    @property
    def items(self) -> ItemRun:
        if self._items is None:
            from .engine.items import ItemRun  # lazy: loads numpy, sqlite3

            hook = self.config.hook.pytest_robustexplain_make_explainer
            self._items = ItemRun(self.settings, base_dir=self.config.rootpath, kinds=self._kinds,
                                  lazy=is_xdist_worker(self.config),
                                  watch=getattr(self.config, "workerinput", {}).get(STOP_INPUT),
                                  make_explainer=lambda model: hook(settings=self.settings, model=model))
        return self._items

    def marked(self, item: pytest.Item) -> bool:
        """Whether the item is one of the run's gated items (never builds the run)."""
        return self._items is not None and self._items.marked(item.nodeid)

    # ----------------------------------------------------------------------------------- collection
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        marker = metafunc.definition.get_closest_marker(MARKER)
        if marker is not None:
            # A collection error showing just the message (it names the test), not pluggy's frames.
            with engine_errors(usage=False):
                gate = self.items.gate_for(metafunc.definition.nodeid, marker.kwargs, marker.args)
                params = self.items.params_for(gate)
            # The slice parameter is not an argument of the test function: adding it to the fixture names
            # lets pytest parametrize it directly, so each perturbation kind becomes its own test item.
            metafunc.fixturenames.append(SLICE_PARAM)
            metafunc.parametrize(SLICE_PARAM, params, ids=[p.label for p in params])

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Resolve (and validate) the settings up front: a bad value is one usage error naming the option,
        # not a collection error per marked test. An unreadable or incomparable baseline is one usage
        # error here, where the xdist controller sees it too (it collects no items).
        if self.settings.baseline is not None and not is_xdist_worker(self.config):
            with engine_errors(usage=True):
                self.items.load_baseline()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        marked = [(item, marker, param) for item in session.items
                  if (marker := item.get_closest_marker(MARKER)) is not None
                  and (param := slice_param(item)) is not None and not skipped_by_mark(item)]
        if not marked:
            return  # a session without marked tests never imports the engine
        # --collect-only, --setup-plan: pytest runs no test body and no fixture; the plan's size is said,
        # nothing is started and no model is called.
        listing = self.config.option.collectonly or self.config.option.setupplan
        with engine_errors(usage=True):
            for item, marker, param in marked:
                self.items.expect(item.nodeid, (marker.kwargs, marker.args), param, own_explainer=(
                    overrides_explainer(item)), checks=partial(self._checks_for, item))
            planned = self.items.plan(listing=bool(listing))
        if planned.lines and (reporter := self.config.pluginmanager.get_plugin("terminalreporter")):
            reporter.ensure_newline()  # what collection planned (prices, overrides), at once
            reporter.write_line("\n".join(f"robustexplain: {line}" for line in planned.lines))
        for item in session.items:
            if item.nodeid in planned.skip:
                item.add_marker(pytest.mark.skip(reason=planned.skip[item.nodeid]))

    def _checks_for(self, item: pytest.Item) -> CheckRegistry | None:
        """The checks gating ``item``: the process's and its directory's conftests' (None: the process's),
        found once a directory — collection has loaded every conftest by the time items are planned."""
        folder = item.path.parent
        if folder not in self._checks:
            self._checks[folder] = registered_checks(item.ihook.pytest_robustexplain_register_checks,
                                                    ConfigError)
        return self._checks[folder]

    # ----------------------------------------------------------------------------------- running
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        reason = ungated_reason(item) if not self.marked(item) else None
        if reason is not None:  # marked, but not in a form pytest expands: never a silent pass
            pytest.fail(reason, pytrace=False)
        yield  # the test body ran (and passed: a failure raises out of the yield)
        if self.marked(item):
            self.result(item)
            with engine_errors(usage=False):
                outcome = self.items.outcome(item.nodeid)
            item.user_properties.extend(outcome.properties)
            if outcome.warning is not None:
                item.warn(RobustExplainWarning(outcome.warning))
            if not outcome.passed:
                pytest.fail(self.items.failure(outcome, verbosity=self.config.get_verbosity()), pytrace=False)

    def result(self, item: pytest.Item) -> Robustness:
        """Wait for the item's slice — planned and started now if it was not (an xdist worker's, or one
        with its own ``explainer`` fixture) — and decide it, the progress line drawn meanwhile."""
        with engine_errors(usage=True, session=item.session):
            self.items.start(item.nodeid, lambda: item._request.getfixturevalue("explainer"))  # type: ignore[attr-defined]
        manager, quiet = self.config.pluginmanager, self.config.get_verbosity() < 0
        progress = self.items.progress(manager.get_plugin("terminalreporter"), quiet=quiet,
                                       capture=manager.get_plugin("capturemanager"))
        with progress, engine_errors(usage=False):
            return self.items.result(item.nodeid, tick=progress.tick)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        payload = self._items.item_payload(item.nodeid) if call.when == "call" and self._items else None
        if payload is not None:  # a plain dict attribute travels with the report to the xdist controller
            report.robustexplain = payload  # type: ignore[attr-defined]
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep a gated item's line from its call report; merge what a worker's report carries (the xdist
        controller has no items)."""
        payload = getattr(report, "robustexplain", None)
        if payload is not None or self._items is not None:
            line = report.location[1] if report.when == "call" else None
            self.items.note_report(report.nodeid, line=line, payload=payload)

    # ----------------------------------------------------------------------------------- xdist and stopping
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: each worker watches the stop file SIGTERM to the controller creates (none
        without a model: no robustness test will call one, and SIGTERM keeps its default)."""
        if self.settings.models_to_test:
            node.workerinput[STOP_INPUT] = self.items.stop_file_for_workers(self.config.add_cleanup)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: add a worker's call counters (and changed models) to the run's record."""
        output = getattr(node, "workeroutput", {}).get("robustexplain")
        if output:
            self.items.merge_worker(output)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """The session was stopped (Ctrl-C or SIGTERM): an xdist controller's workers stop too — a signal
        to the controller alone reaches none of them."""
        if self._items is not None:
            self._items.ask_workers_to_stop()

    # ----------------------------------------------------------------------------------- the end
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """An xdist worker hands its counters to the controller; a stopped session saves what finished and
        says how to resume; otherwise the record and every report, a report that could not be written
        being an error line (and, where every test passed, the exit status 4)."""
        if self._items is None:
            return
        end = self._items.end(interrupted=session.exitstatus == pytest.ExitCode.INTERRUPTED)
        if end.worker_output is not None:
            self.config.workeroutput["robustexplain"] = end.worker_output  # type: ignore[attr-defined]
        self.notes += [(line, False) for line in end.notes]  # workers' marker overrides; what a stop saved
        if end.usage_error:  # a worker's, which stopped the session: the exit status a serial run has
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        if end.done is None:
            return
        self.config.hook.pytest_robustexplain_report(run=end.done.result, config=self.config)
        self.done = end.done
        failing = bool(end.done.errors) and session.exitstatus == pytest.ExitCode.OK
        if failing:
            session.exitstatus = REPORT_ERROR_EXIT
        self.notes += end.error_notes(int(session.exitstatus) if failing else None)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.done is not None and self._items is not None:
            from .report.terminal import session_summary  # lazy: kept off the plugin's import

            if config.get_verbosity() >= 0:
                terminalreporter.write_sep("=", "robustness report")
            width = getattr(getattr(terminalreporter, "_tw", None), "fullwidth", 100)
            for line in session_summary(self.done.report, width=width, verbosity=config.get_verbosity(),
                                        line_of=self._items.lines, written=self.done.written):
                terminalreporter.write_line(line)
        for line, red in self.notes:
            terminalreporter.write_line(f"robustexplain: {line}", red=red, bold=red, yellow=not red)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._items is not None:
            self._items.close()


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
    from .engine.items import BoundExplainer  # lazy: loads numpy, sqlite3

    items = _plugin(request).items
    with engine_errors(usage=False):
        model, reason, error = items.fixture_model(request.node.nodeid)
    if error:
        raise pytest.UsageError(f"robustexplain: {reason}")
    if not model:
        pytest.skip(reason)
    return BoundExplainer(items, model)


@pytest.fixture
def perturbed_histories(request: pytest.FixtureRequest) -> list[PerturbationResult]:
    """The perturbations of this test's slice (or of the run's default plan in an unmarked test).

    Each item has ``original``, ``perturbed``, ``kind``, ``severity``, ``repeat``, ``changes`` (what
    changed, machine-readable) and ``summary``; pairs whose perturbation changed nothing are left out.
    """
    with engine_errors(usage=False):
        return _plugin(request).items.perturbations(request.node.nodeid)


@pytest.fixture
def robustness(request: pytest.FixtureRequest) -> Robustness:
    """The finished result of this test's slice: verdict, per-metric intervals, worst pairs, pairs."""
    plugin = _plugin(request)
    if not plugin.marked(request.node):
        pytest.fail(f"{request.node.nodeid}: the `robustness` fixture needs @pytest.mark.robustness "
                    "on the test", pytrace=False)
    return plugin.result(request.node)


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllamaServer]:
    """A loopback fake Ollama server (real HTTP; the official client cannot tell) for offline tests.

    Point the plugin at it with ``--robustexplain-host=<fake_ollama.url>`` or use ``fake_ollama.url``
    as the host of your own client. Scriptable: ``mode``, ``latency``, ``capacity``, ``fail_next``,
    ``hang_next``, ``drop_next``, ``empty_next``, ``refuse_next``, ``bloat_next``; counts ``chat_calls`` and
    ``peak_in_flight``.
    """
    from .testing import FakeOllamaServer  # lazy: kept off the plugin's import

    with FakeOllamaServer() as server:
        yield server
