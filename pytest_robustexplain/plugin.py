"""pytest glue for pytest-robustexplain: options, ini keys, the marker, fixtures and hooks.

This module is imported into every pytest run of everyone who installs the package, so it imports
nothing heavy and does nothing for sessions without ``@pytest.mark.robustness`` tests. Hook bodies
delegate to :mod:`pytest_robustexplain.runner`; settings are resolved on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from .errors import ConfigError, RobustExplainError
from .runner import (  # cheap: the adapter imports heavy parts lazily
    MARKER,
    SLICE_PARAM,
    STOP_INPUT,
    is_xdist_worker,
)
from .settings import MARKER_DOC, register_options, settings_from_pytest

if TYPE_CHECKING:
    from .explainers.base import Explainer
    from .perturbations import PerturbationResult
    from .report.summary import ReportModel
    from .runner import BoundExplainer, Robustness, RobustnessRun
    from .testing import FakeOllamaServer


RUN_KEY = pytest.StashKey["RobustnessRun"]()
REPORT_KEY: pytest.StashKey[ReportModel | None] = pytest.StashKey()  # the finished run, as writers read it
# Lines for the end of the terminal summary (a report that could not be written, a stopped run): said there,
# after pytest's progress line is done, never glued to its dots.
NOTES_KEY: pytest.StashKey[list[tuple[str, bool]]] = pytest.StashKey()
SESSION_PLUGIN = "robustexplain-session"
T = TypeVar("T")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    register_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC)
    # The hooks that get no config (item reports, xdist nodes going down) live on an object registered
    # with this config's plugin manager: it dies with its config (pytester runs sessions in sessions).
    config.pluginmanager.register(_SessionHooks(config), SESSION_PLUGIN)


class _SessionHooks:
    """Hooks of one config whose arguments do not name it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "robustexplain", None)
        if payload is not None and not is_xdist_worker(self.config):
            _run(self.config).record_remote(payload)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: each worker watches the stop file SIGTERM to the controller creates."""
        stop_file = _run(self.config).stop_file_for_workers()
        if stop_file is not None:
            node.workerinput[STOP_INPUT] = stop_file

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """The session was stopped (Ctrl-C or SIGTERM): an xdist controller's workers stop too — a signal
        to the controller alone reaches none of them."""
        run = self.config.stash.get(RUN_KEY, None)
        if run is not None:
            run.ask_workers_to_stop()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: add a worker's call counters (and changed models) to the run's record."""
        output = getattr(node, "workeroutput", {}).get("robustexplain")
        if output:
            _run(self.config).merge_worker(output)


def _run(config: pytest.Config) -> RobustnessRun:
    """The session's run, created (and the settings resolved) on first use."""
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        from .runner import RobustnessRun

        _register_custom_perturbations(config)
        try:
            settings = settings_from_pytest(config)
        except ConfigError as exc:
            raise pytest.UsageError(f"robustexplain: {exc}") from None
        run = RobustnessRun(config, settings)
        config.stash[RUN_KEY] = run
    return run


def _register_custom_perturbations(config: pytest.Config) -> None:
    registered: list[str] = []

    def register(name: str, fn: Any, aliases: tuple[str, ...] = ()) -> None:
        from .perturbations import register_perturbation

        try:
            register_perturbation(name, fn, aliases=aliases)
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest_robustexplain_register_perturbations: {exc}") from None
        registered.append(name)

    config.hook.pytest_robustexplain_register_perturbations(register=register)
    if registered:
        # pytester runs several sessions in one process: registrations must not leak into the next.
        config.add_cleanup(lambda: _unregister(registered))


def _unregister(names: list[str]) -> None:
    from .perturbations import unregister_perturbation

    for name in names:
        unregister_perturbation(name)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    run = _run(metafunc.config)
    try:
        gate = run.gate_for(metafunc.definition.nodeid, marker)
    except pytest.UsageError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        # A collection error showing just the message (it names the test), not pluggy's frames — failed
        # outside the except block, so it is not shown twice ("During handling of the above exception").
        pytest.fail(message, pytrace=False)
    params = run.params_for(gate)
    # The slice parameter is not an argument of the test function: adding it to the fixture names lets
    # pytest parametrize it directly, so each perturbation kind becomes its own test item.
    metafunc.fixturenames.append(SLICE_PARAM)
    metafunc.parametrize(SLICE_PARAM, params, ids=[run.param_id(p) for p in params])


def pytest_collection_finish(session: pytest.Session) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    if run is not None:
        run.plan_items(session.items)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[REPORT_KEY] = None
    # Resolve (and validate) the settings up front: a bad value is one usage error naming the option,
    # not a collection error per marked test. Nothing heavy is imported for valid, unused settings.
    run = _run(session.config)
    if run.settings.baseline is not None and not is_xdist_worker(session.config):
        # Here, where the xdist controller sees it too (it collects no items): an unreadable or
        # incomparable baseline is one usage error, not a crashed worker.
        run.load_baseline()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield  # the test body ran (and passed: a failure raises out of the yield)
    run = item.config.stash.get(RUN_KEY, None)
    if run is not None and item.nodeid in run.plans:
        _enforce(run, item)


def _or_fail(step: Callable[[], T]) -> T:
    """Run ``step``; a RobustExplainError fails the test with its message alone. ``pytest.fail`` is
    called after the ``except`` block, so the report does not show the error twice ("During handling of
    the above exception, another exception occurred")."""
    try:
        return step()
    except RobustExplainError as exc:
        message = f"robustexplain: {exc}"
    pytest.fail(message, pytrace=False)


def _enforce(run: RobustnessRun, item: pytest.Item) -> None:
    _result(run, item)
    _or_fail(lambda: run.enforce(item))


def _result(run: RobustnessRun, item: pytest.Item) -> Robustness:
    """Wait for the item's slice with a live progress line; a backend failure fails the item."""
    from .progress import Progress

    with Progress.for_config(item.config, run) as progress:
        run.set_progress(progress.tick)
        try:
            return _or_fail(lambda: run.result_for(item))
        finally:
            run.set_progress(None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    run = item.config.stash.get(RUN_KEY, None)
    # Only an xdist worker needs to ship its pairs to the controller; a serial run already has them.
    if run is not None and run.lazy and call.when == "call" and item.nodeid in run.plans:
        payload = run.item_payload(item)
        if payload is not None:
            # A plain dict attribute travels with the report to the xdist controller.
            report.robustexplain = payload  # type: ignore[attr-defined]
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return
    if is_xdist_worker(config):
        config.workeroutput["robustexplain"] = run.worker_output()  # type: ignore[attr-defined]
        run.close()
        return
    from .finish import REPORT_ERROR_EXIT, finish_run, finish_stopped

    notes = config.stash.setdefault(NOTES_KEY, [])
    if session.exitstatus == pytest.ExitCode.INTERRUPTED:  # Ctrl-C or SIGTERM: what finished, and how on
        notes += [(line, False) for line in finish_stopped(run)]
        run.close()
        return
    report, errors = finish_run(run)
    config.stash[REPORT_KEY] = report
    run.close()
    if errors:
        failing = session.exitstatus == pytest.ExitCode.OK
        if failing:
            session.exitstatus = REPORT_ERROR_EXIT
        notes += [(f"ERROR: {error}", True) for error in errors]
        said = f"the run exits {int(session.exitstatus)}: a report could not be written; " if failing else ""
        notes.append((f"{said}every verdict above stands", True))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    report = config.stash.get(REPORT_KEY, None)
    if report is not None:
        from .finish import print_summary

        print_summary(report, terminalreporter, config)
    for line, red in config.stash.get(NOTES_KEY, []):
        terminalreporter.write_line(f"robustexplain: {line}", red=red, bold=red, yellow=not red)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.close()


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture
def explainer(request: pytest.FixtureRequest) -> Explainer | BoundExplainer:
    """The configured explainer: ``explainer(history, item) -> str``, ``explainer.explain(...)``.

    Override this fixture in a ``conftest.py`` to gate your own production agent: return any callable
    ``(history, item) -> str`` (plain or async) or an object implementing the Explainer protocol, and
    every ``@pytest.mark.robustness`` test under that conftest is run against it.
    """
    from .engine import configured_models, no_model_reason
    from .runner import BoundExplainer

    run = _run(request.config)
    models = configured_models(run.settings)
    plan = run.plans.get(request.node.nodeid)
    model = plan.param.model if plan is not None and plan.param.model else (models[0] if models else "")
    if not model:
        if run.settings.require_model:
            raise pytest.UsageError(no_model_reason())
        pytest.skip(no_model_reason())
    _or_fail(lambda: run.explainer_for(model))
    return BoundExplainer(run, model)


@pytest.fixture
def perturbed_histories(request: pytest.FixtureRequest) -> list[PerturbationResult]:
    """The perturbations of this test's slice (or of the run's default plan in an unmarked test).

    Each item has ``original``, ``perturbed``, ``kind``, ``severity``, ``repeat``, ``changes`` (what
    changed, machine-readable) and ``summary``; pairs whose perturbation changed nothing are left out.
    """
    return _or_fail(lambda: _run(request.config).perturbations_for(request.node))


@pytest.fixture
def robustness(request: pytest.FixtureRequest) -> Robustness:
    """The finished result of this test's slice: verdict, per-metric intervals, worst pairs, pairs."""
    run = _run(request.config)
    if request.node.nodeid not in run.plans:
        pytest.fail(f"{request.node.nodeid}: the `robustness` fixture needs @pytest.mark.robustness "
                    "on the test", pytrace=False)
    return _result(run, request.node)


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
