"""The pytest adapter of a robustness run: marked items → the engine's gated slices, its errors →
pytest outcomes, its results → xdist payloads and JUnit properties.

The run itself (explainers, the items and their plan, sweep, verdicts, record, reports) is
:class:`~pytest_robustexplain.engine.Run`, shared with ``robustexplain run``; plugin.py keeps only the hooks
and calls into :class:`RobustnessRun`, which its registered plugin object makes on first use. Heavy modules
are imported lazily, only when a session actually has marked tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .errors import BackendError, ConfigError, RobustExplainError
from .results import OVERALL, Robustness, RunResult
from .settings import PYTEST_SPELLING, GateSettings, Settings, apply_marker

if TYPE_CHECKING:
    from .checks import CheckRegistry
    from .data import Item, UserHistory
    from .engine import ItemPlan, Run, RunOutcome, SliceParam
    from .engine.interrupt import Stopper
    from .explainers.base import Explainer, Explanation, ModelInfo
    from .perturbations import KindRegistry, PerturbationResult
    from .sweep import Sweep


MARKER = "robustness"
SLICE_PARAM = "robustexplain_slice"
STOP_INPUT = "robustexplain_stop"  # the workerinput key naming the controller's stop file


class BoundExplainer:
    """The ``explainer`` fixture's default value: the configured explainer, callable synchronously.

    ``explainer(history, item)`` returns the explanation text; :meth:`explain` the full
    :class:`~pytest_robustexplain.explainers.base.Explanation`. Calls run on the sweep's event loop and
    go through the same concurrency limit, retries and cache as the sweep.
    """

    def __init__(self, run: RobustnessRun, model: str) -> None:
        self._run = run
        self.model = model

    @property
    def info(self) -> ModelInfo | None:
        return self._run.model_infos.get(self.model)

    def explain(self, history: UserHistory, item: Item, *, seed: int | None = None,
                repeat: int = 0) -> Explanation:
        explainer = self._run.explainer_for(self.model)
        coro = explainer.explain(history, item, seed=self._run.settings.seed if seed is None else seed,
                                 repeat=repeat)
        return self._run.sweep_instance().run_coroutine(coro)

    def __call__(self, history: UserHistory, item: Item) -> str:
        explanation = self.explain(history, item)
        if explanation.failure is not None:
            raise BackendError(f"{self.model}: generation failed ({explanation.failure}) "
                               f"{explanation.detail}".strip())
        return explanation.text

    def __repr__(self) -> str:
        return f"<explainer {self.model}>"


@contextmanager
def engine_errors(*, usage: bool) -> Iterator[None]:
    """The one translation of the engine's errors into pytest's words: a RobustExplainError inside is a
    usage error (``usage``: collection, session start — a dead server, a bad dataset or baseline, a bad
    marker) or fails the test with its message alone. Raised ``from None``, so the report does not show the
    error twice ("During handling of the above exception, another exception occurred")."""
    try:
        yield
    except RobustExplainError as exc:
        message = f"robustexplain: {exc}"
        if usage:
            raise pytest.UsageError(message) from None
        raise pytest.fail.Exception(message, pytrace=False) from None


def registered_kinds(config: pytest.Config) -> KindRegistry | None:
    """The run's perturbation kinds and payload families: the process's, plus what this config's conftests
    register through ``pytest_robustexplain_register_perturbations`` — owned by this run, so they never
    leak into another session in the process (pytester). None when nothing is registered (nothing imported
    either)."""
    kinds: KindRegistry | None = None

    def registry() -> KindRegistry:
        nonlocal kinds
        if kinds is None:
            from .perturbations import DEFAULT_REGISTRY, KindRegistry

            kinds = KindRegistry(base=DEFAULT_REGISTRY)
        return kinds

    def register(name: str, fn: Any, aliases: tuple[str, ...] = ()) -> None:
        with _hook_errors():
            registry().register(name, fn, aliases=aliases)

    def register_payload(family: str, template: str) -> None:
        with _hook_errors():
            registry().register_payload(family, template)

    config.hook.pytest_robustexplain_register_perturbations(register=register,
                                                            register_payload=register_payload)
    return kinds


def registered_checks(hook: Any) -> CheckRegistry | None:
    """The checks of the items a hook caller serves: the process's, plus what the conftests it calls
    register through ``pytest_robustexplain_register_checks`` — owned by this run, like its kinds. Called
    with an item's ``ihook``, it is the conftests of the item's directory and the ones above it, as for a
    fixture. None when nothing is registered (nothing imported either)."""
    checks: CheckRegistry | None = None

    def register_check(name: Any, predicate: Any = None, *, max_rate: float = 0.0,
                       description: str = "") -> None:
        with _hook_errors("pytest_robustexplain_register_checks"):
            own().register(name, predicate, max_rate=max_rate, description=description)

    def register_metric(name: Any, fn: Any = None, *, version: Any = None, batch: Any = None,
                        description: str = "") -> None:
        with _hook_errors("pytest_robustexplain_register_checks"):
            own().register_metric(name, fn, version=version, batch=batch, description=description)

    def own() -> CheckRegistry:
        nonlocal checks
        if checks is None:
            from .checks import DEFAULT_CHECKS, CheckRegistry

            checks = CheckRegistry(base=DEFAULT_CHECKS)
        return checks

    hook.pytest_robustexplain_register_checks(register_check=register_check, register_metric=register_metric)
    return checks


@contextmanager
def _hook_errors(hook: str = "pytest_robustexplain_register_perturbations") -> Iterator[None]:
    """A registration the hook refuses is the session's usage error, named after the hook."""
    try:
        yield
    except ConfigError as exc:
        raise pytest.UsageError(f"{hook}: {exc}") from None


def is_xdist_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker (it plans only the items it runs, and ships its
    results to the controller with each item's report)."""
    return hasattr(config, "workerinput")


class RobustnessRun:
    """The pytest adapter of one :class:`~pytest_robustexplain.engine.Run`: marked items → gated slices,
    engine errors → pytest outcomes, results → xdist payloads. One per config, in ``config.stash``."""

    def __init__(self, config: pytest.Config, settings: Settings, kinds: KindRegistry | None = None) -> None:
        self.config = config
        self.settings = settings
        self.kinds = kinds  # the kinds this session's conftests registered, over the process's
        # The checks the conftests of each test directory registered (over the process's), found once a
        # directory; collection has loaded every conftest by the time the items are planned.
        self._checks: dict[Path, CheckRegistry | None] = {}
        self.lazy = is_xdist_worker(config)  # xdist workers plan only the items they run
        self._engine: Run | None = None
        self._stopper: Stopper | None = None  # SIGTERM and the xdist stop file, once a model will be called
        self.lines: dict[str, int] = {}  # nodeid -> the test's line (1-based), for GitHub annotations

    @property
    def engine(self) -> Run:
        """The engine's run, made on first use: a session without marked tests never imports it."""
        if self._engine is None:
            from .engine import Run

            self._engine = Run(self.settings, base_dir=self.config.rootpath, spelling=PYTEST_SPELLING,
                               say=self._say, cross_process=self.lazy, make_explainer=self._hook_explainer,
                               kinds=self.kinds)
        return self._engine

    def marked(self, nodeid: str) -> bool:
        """Whether the item is one of the run's gated items (never builds the engine)."""
        return self._engine is not None and nodeid in self._engine.items

    @property
    def model_infos(self) -> dict[str, ModelInfo]:
        return self.engine.model_infos

    # ------------------------------------------------------------------------------- collection
    def gate_for(self, nodeid: str, marker: pytest.Mark) -> GateSettings:
        """The test's gate settings; a bad keyword is a ConfigError naming the test."""
        return apply_marker(self.settings, marker.kwargs, nodeid=nodeid, args=marker.args,
                            canonical_kind=self._canonical)

    @property
    def _canonical(self) -> Callable[[str], str] | None:
        return self.kinds.canonical if self.kinds is not None else None

    def params_for(self, gate: GateSettings) -> list[SliceParam]:
        """One parameter per model × kind, plus ``overall`` when the test covers several kinds."""
        from .engine import configured_models, expand

        return expand(configured_models(self.settings), gate)

    def checks_for(self, item: pytest.Item) -> CheckRegistry | None:
        """The checks gating ``item``: the process's and its directory's conftests' (None: the process's)."""
        folder = item.path.parent
        if folder not in self._checks:
            self._checks[folder] = registered_checks(item.ihook)
        return self._checks[folder]

    def plan_items(self, items: Sequence[pytest.Item]) -> None:
        """Register every expanded marked item; start the sweep unless this is an xdist worker."""
        marked = [(item, marker, param) for item in items
                  if (marker := item.get_closest_marker(MARKER)) is not None
                  and (param := _slice_param(item)) is not None and not _skipped_by_mark(item)]
        if not marked:
            return  # a session without marked tests never imports the engine
        for item, marker, param in marked:
            self.engine.expect(item.nodeid, self.gate_for(item.nodeid, marker), param,
                               own_explainer=_overrides_explainer(item), checks=self.checks_for(item))
        from .engine import check_callable, configured_models

        # One usage error before anything runs, instead of the same error (and traceback) per item.
        check_callable(self.settings, [p.ref for p in self.plans.values() if not p.own_explainer],
                       PYTEST_SPELLING)
        self.load_baseline()  # a bad baseline is a usage error before any call
        if self.settings.dry_run:
            self._dry_run(items)
            return
        if not configured_models(self.settings):
            self._no_model(items)
            return
        # --collect-only, --setup-plan: pytest runs no test body and no fixture; the plan's size is said,
        # nothing is started and no model is called.
        listing = self.config.option.collectonly or self.config.option.setupplan
        if not listing:
            self.stop_on_sigterm()
        if not self.lazy:
            for plan in self.plans.values():
                if not plan.own_explainer and plan.param.model:
                    self.engine.plan_item(plan.ref)
            self.engine.announce_size()
            if not listing:
                self.engine.start()

    def _dry_run(self, items: Sequence[pytest.Item]) -> None:
        """Print what each marked item would cost and skip them all: no model is called. (Under xdist
        each worker plans only its own items, so the plan is printed without ``-n``.)"""
        from .engine import configured_models, no_model_reason

        models = configured_models(self.settings)
        priced = [p for p in self.plans.values() if not p.own_explainer and p.param.model]
        custom = sum(p.own_explainer for p in self.plans.values())
        lines: list[str] = []
        if models and priced and not self.lazy:
            for plan in priced:
                self.engine.plan_item(plan.ref)
            lines = self.engine.dry_run_lines()
        elif not models and len(self.plans) > custom:
            n = len(self.plans) - custom
            lines = [f"dry run: nothing to price for {n} marked item{'s' * (n != 1)}: "
                     f"{no_model_reason(PYTEST_SPELLING)}"]
        if custom and lines:  # their explainer is a fixture: known only when each item runs
            lines.append(f"  (+{custom} items with their own `explainer` fixture: planned when they run)")
        elif custom:
            lines.append(f"dry run: {custom} items with their own `explainer` fixture, whose calls are "
                         "planned when each runs: nothing to price before")
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and lines and not self.lazy:
            reporter.ensure_newline()
            reporter.write_line("\n".join(f"robustexplain: {line}" for line in lines))
        skip = pytest.mark.skip(reason="robustexplain dry run (--robustexplain-dry-run): no model is called")
        for item in items:
            if item.nodeid in self.plans:
                item.add_marker(skip)
        self.engine.forget(list(self.plans))

    def load_baseline(self) -> None:
        """Read and check ``--robustexplain-baseline`` (once; a no-op without one)."""
        self.engine.baseline  # noqa: B018 - read and checked on first use

    @property
    def plans(self) -> Mapping[str, ItemPlan]:
        """The run's gated items by node id (the engine's registry; empty before any was collected)."""
        return self._engine.items if self._engine is not None else {}

    def _no_model(self, items: Sequence[pytest.Item]) -> None:
        """Without a model, marked tests are skipped (or an error, with require-model); tests whose
        ``explainer`` fixture is overridden bring their own and still run."""
        from .engine import without_model

        unserved = {nodeid for nodeid, plan in self.plans.items() if not plan.own_explainer}
        if not unserved:
            return
        reason, error = without_model(self.settings, PYTEST_SPELLING)
        if error:
            raise ConfigError(reason)
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if item.nodeid in unserved:
                item.add_marker(skip)
        self.engine.forget(unserved)

    def _say(self, note: str) -> None:
        """A note from the engine on the terminal (a size or a setting the user should know about)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"robustexplain: {note}", yellow=True)

    def _hook_explainer(self, model: str) -> Explainer | None:
        explainer: Explainer | None = self.config.hook.pytest_robustexplain_make_explainer(
            settings=self.settings, model=model)
        return explainer

    # ------------------------------------------------------------------------------- the sweep
    def sweep_instance(self) -> Sweep:
        """The engine's sweep, started on first use (the progress line reads its counters)."""
        return self.engine.sweep

    def explainer_for(self, model: str) -> Explainer:
        return self.engine.explainer_for(model)

    def fixture_model(self, nodeid: str) -> str:
        """The model the ``explainer`` fixture of this test is bound to: its slice's, else the first
        configured; without one the test is skipped (or, under require-model, a usage error)."""
        from .engine import configured_models, without_model

        plan = self.plans.get(nodeid)
        models = configured_models(self.settings)
        model = plan.param.model if plan is not None and plan.param.model else (models[0] if models else "")
        if not model:
            reason, error = without_model(self.settings, PYTEST_SPELLING)
            if error:
                raise pytest.UsageError(f"robustexplain: {reason}")
            pytest.skip(reason)
        with engine_errors(usage=False):
            self.explainer_for(model)
        return model

    # ------------------------------------------------------------------------------- running items
    def result_for(self, item: pytest.Item, *, tick: Callable[[], None] | None = None) -> Robustness:
        """Wait for the item's slice and decide its verdict (the engine decides each slice once);
        ``tick`` draws the progress line between two looks."""
        plan = self.plans[item.nodeid]
        if not plan.slice_id:
            with engine_errors(usage=True):
                self._start_lazily(item, plan)
        with engine_errors(usage=False):
            return self.engine.result(plan.slice_id, poll=lambda: self._poll(tick))

    def _start_lazily(self, item: pytest.Item, plan: ItemPlan) -> None:
        """An xdist worker's item, or a test with its own ``explainer`` fixture: plan and start it now."""
        model = plan.param.model
        if plan.own_explainer:
            from .explainers.callable import wrap_explainer

            request: pytest.FixtureRequest = item._request  # type: ignore[attr-defined]
            explainer = wrap_explainer(request.getfixturevalue("explainer"), timeout=self.settings.timeout)
            model = explainer.model
            self.engine.register(model, explainer)
        else:
            from .engine import check_callable

            check_callable(self.settings, [item.nodeid], PYTEST_SPELLING)
        self.engine.plan_item(plan.ref, model)
        self.engine.ensure_started(plan.slice_id)

    def perturbations_for(self, item: pytest.Item) -> list[PerturbationResult]:
        """The planned perturbations of a marked item, or the run's default plan for any other test."""
        plan = self.plans.get(item.nodeid)
        if plan is not None and plan.slice_id:
            return list(self.engine.perturbations_for(plan.slice_id))
        gate = plan.gate if plan is not None else apply_marker(self.settings, {}, nodeid=item.nodeid,
                                                               canonical_kind=self._canonical)
        return self.engine.perturbations_of(gate, plan.param.kind if plan is not None else OVERALL)

    def enforce(self, item: pytest.Item, *, tick: Callable[[], None] | None = None) -> None:
        """Do with the item what the engine's outcome says: fail it, warn, attach its properties."""
        from .report.failure import failure_message

        self.result_for(item, tick=tick)  # plans and starts the item first where it was not (xdist, …)
        with engine_errors(usage=False):
            outcome = self.engine.outcome(self.plans[item.nodeid].slice_id)
        item.user_properties.extend(outcome.properties)
        if outcome.warning is not None:
            from .errors import RobustExplainWarning

            item.warn(RobustExplainWarning(outcome.warning))
        if not outcome.passed:
            verbosity = self.config.get_verbosity()
            pytest.fail(failure_message(outcome.result, model_info=self.model_infos.get(outcome.result.model),
                                        verbose=verbosity > 0, quiet=verbosity < 0), pytrace=False)

    def _poll(self, tick: Callable[[], None] | None) -> None:
        """Between two looks at a slice: stop when the controller asked to, then draw the progress line."""
        if self._stopper is not None:
            self._stopper.check()
        if tick is not None:
            tick()

    # ------------------------------------------------------------------------------- stopping
    def stop_on_sigterm(self) -> None:
        """From here on SIGTERM stops the session as Ctrl-C does (a partial report, how to resume); an
        xdist worker also stops when its controller's stop file appears (:mod:`.engine.interrupt`)."""
        if self._stopper is None:
            from .engine.interrupt import StopFile, Stopper

            watched = getattr(self.config, "workerinput", {}).get(STOP_INPUT)
            self._stopper = Stopper(watch=StopFile(watched) if watched else None)
            self._stopper.arm()

    def stop_file_for_workers(self) -> str | None:
        """xdist controller: the stop file every worker watches, created when SIGTERM reaches the
        controller (armed here). None without a model: no robustness test will call one, and SIGTERM
        keeps its default for a session that is not ours."""
        if self._stopper is None:
            if not self.settings.models_to_test:
                return None
            import secrets
            import tempfile

            from .engine.interrupt import StopFile, Stopper

            stop = StopFile(Path(tempfile.gettempdir()) / f"robustexplain-stop-{secrets.token_hex(8)}")
            self._stopper = Stopper(stop_file=stop)
            self._stopper.arm()
            self.config.add_cleanup(self._stopper.remove_stop_file)  # at unconfigure: workers are down
        stop_file = self._stopper.stop_file
        return str(stop_file.path) if stop_file is not None else None

    def ask_workers_to_stop(self) -> None:
        """xdist controller: create the stop file its workers watch (a no-op elsewhere)."""
        if self._stopper is not None and self._stopper.stop_file is not None:
            self._stopper.stop_file.request()

    @property
    def stopped_how(self) -> str:
        """How an interrupted session was stopped: "terminated (SIGTERM)" or "interrupted" (Ctrl-C)."""
        return self._stopper.how if self._stopper is not None else "interrupted"

    def stopped_result(self) -> RunResult | None:
        """What finished before the session was stopped, marked partial; None when nothing ran."""
        if self._engine is None and self._stopper is None:
            return None
        return self.engine.partial()  # a controller stopped before any worker's result: nothing yet

    # ------------------------------------------------------------------------------- xdist and the end
    def note_report(self, report: pytest.TestReport) -> None:
        """Keep a gated item's line from its call report (serial or from an xdist worker: the controller
        has no items) and merge the pairs a worker's report carries."""
        payload = getattr(report, "robustexplain", None)
        gated = payload is not None or self.marked(report.nodeid)
        if report.when == "call" and gated and report.location[1] is not None:
            self.lines[report.nodeid] = report.location[1] + 1
        if payload is not None and not is_xdist_worker(self.config):
            self.record_remote(payload)

    def record_remote(self, payload: Mapping[str, Any]) -> None:
        """Merge what an xdist worker's item report carried (decoded as the JSON report is)."""
        self.engine.merge(payload, source="xdist worker report")

    def item_payload(self, item: pytest.Item) -> dict[str, Any] | None:
        """What an item's report carries to the controller: its pairs, gate and model facts."""
        plan = self.plans.get(item.nodeid)
        result = self.engine.decided(plan.slice_id) if plan is not None and plan.slice_id else None
        return None if result is None else self.engine.payload(result, item.nodeid)

    def worker_output(self) -> dict[str, Any]:
        """What an xdist worker tells the controller at its end: its call counters and the models whose
        digest changed while it ran."""
        if self._engine is None:
            return {}
        return {"counters": self._engine.call_counters(), "models_changed": self._engine.recheck_models()}

    def merge_worker(self, output: Mapping[str, Any]) -> None:
        self.engine.merge(output, source="xdist worker")

    def finish(self) -> RunOutcome | None:
        """The engine's end of the run (record, reports, outcomes); None when no robustness test ran."""
        return self._engine.finish() if self._engine is not None else None

    def close(self) -> None:
        if self._stopper is not None:
            self._stopper.disarm()
        if self._engine is not None:
            self._engine.close()


def _slice_param(item: pytest.Item) -> SliceParam | None:
    """The slice parameter of a marked item (asked of marked items only: the engine is imported here)."""
    from .engine import SliceParam

    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    value = callspec.params.get(SLICE_PARAM)
    return value if isinstance(value, SliceParam) else None


def ungated_reason(item: pytest.Item) -> str | None:
    """Why an item carrying the robustness marker was not made a gate, or None (not marked, or a gate).

    pytest expands a marked test into one item per kind while it collects the test function
    (``pytest_generate_tests``); a marker that reaches the item any other way — a unittest method,
    ``pytest.param(..., marks=...)``, ``add_marker`` after collection — gates nothing, and the test would
    pass with no model called: the item fails instead, saying so."""
    if item.get_closest_marker(MARKER) is None or _slice_param(item) is not None:
        return None
    import unittest

    cls = getattr(item, "cls", None)
    if isinstance(cls, type) and issubclass(cls, unittest.TestCase):
        how = ("pytest does not parametrize unittest.TestCase methods, so a marked one cannot be expanded: "
               "write the gate as a plain test function (or a method of a plain class)")
    else:
        how = ("the marker reached it after its test function was collected (pytest.param(..., marks=...) "
               "or add_marker in a hook): put @pytest.mark.robustness on the test function, its class or "
               "its module (pytestmark)")
    return f"{item.nodeid}: @pytest.mark.robustness is on this test but nothing was gated: {how}"


def _skipped_by_mark(item: pytest.Item) -> bool:
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


def _overrides_explainer(item: pytest.Item) -> bool:
    """Whether a conftest or module overrides the ``explainer`` fixture for this item.

    pytest has no public API for "which fixture definition would this item get for name X", so this
    asks the fixture manager directly; both signatures of ``getfixturedefs`` (node since pytest 8.1,
    nodeid before) are handled.
    """
    manager = item.session._fixturemanager
    try:
        defs = manager.getfixturedefs("explainer", item)
    except (TypeError, AttributeError):
        defs = manager.getfixturedefs("explainer", item.nodeid)  # type: ignore[arg-type]
    if not defs:
        return False
    return getattr(defs[-1].func, "__module__", "") != "pytest_robustexplain.plugin"
