"""A run a door drives item by item: the pytest door's one object, pytest-free.

pytest collects test items, runs them one at a time (or in xdist workers) and asks for each item's
outcome; :class:`ItemRun` answers in the engine's words — which items to skip and why, what a dry run
prints, each item's outcome, what travels between xdist processes, what a stopped session saved — over one
:class:`~pytest_robustexplain.engine.Run`, made on first use. The plugin only translates: a skip reason into
a skip mark, a :class:`~pytest_robustexplain.errors.RobustExplainError` into a usage error or a failed test,
a line into the terminal.
"""

from __future__ import annotations

import secrets
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import BackendError, ConfigError, RobustExplainError
from ..explainers.callable import wrap_explainer
from ..report.failure import failure_message, same_finding_message
from ..report.progress import Progress
from ..results import INSENSITIVE, OVERALL
from ..settings import PYTEST_SPELLING, apply_marker
from ..wording import count_noun
from .interrupt import StopFile, Stopper, resume_hint, save_partial
from .plan import expand
from .run import Run
from .setup import check_callable, configured_models, no_model_reason, without_model

if TYPE_CHECKING:
    from ..checks import CheckRegistry
    from ..data import Item, UserHistory
    from ..explainers.base import Explainer, Explanation, ModelInfo
    from ..perturbations import KindRegistry, PerturbationResult
    from ..report.progress import Progress
    from ..results import Robustness
    from ..settings import GateSettings, Settings
    from .decide import Outcome
    from .interrupt import Stopper
    from .plan import ItemPlan, SliceParam
    from .reports import RunOutcome
    from .run import Run


class BoundExplainer:
    """The ``explainer`` fixture's default value: the configured explainer, callable synchronously.

    ``explainer(history, item)`` returns the explanation text; :meth:`explain` the full
    :class:`~pytest_robustexplain.explainers.base.Explanation`. Calls run on the sweep's event loop and
    go through the same concurrency limit, retries and cache as the sweep.
    """

    def __init__(self, run: ItemRun, model: str) -> None:
        self._run = run
        self.model = model

    @property
    def info(self) -> ModelInfo | None:
        return self._run.engine.model_infos.get(self.model)

    def explain(self, history: UserHistory, item: Item, *, seed: int | None = None,
                repeat: int = 0) -> Explanation:
        engine = self._run.engine
        coro = engine.explainer_for(self.model).explain(
            history, item, seed=engine.settings.seed if seed is None else seed, repeat=repeat)
        return engine.sweep.run_coroutine(coro)

    def __call__(self, history: UserHistory, item: Item) -> str:
        explanation = self.explain(history, item)
        if explanation.failure is not None:
            raise BackendError(f"{self.model}: generation failed ({explanation.failure}) "
                               f"{explanation.detail}".strip())
        return explanation.text

    def __repr__(self) -> str:
        return f"<explainer {self.model}>"


@dataclass
class Ending:
    """The end of a door's session: what an xdist worker hands its controller (``worker_output``), what a
    stopped session saved and how to resume (``stopped``), or the finished run (``done``; None when nothing
    was gated)."""

    worker_output: dict[str, Any] | None = None
    # Lines for the end of the terminal summary: what a stopped session saved and how to resume; on an
    # xdist controller, the marker overrides its workers saw at collection (a worker's output is not shown)
    # and how many calls more than one worker made.
    notes: list[str] = field(default_factory=list)
    done: RunOutcome | None = None
    usage_error: str = ""  # an xdist worker's, which stopped the session

    def error_notes(self, exits: int | None) -> list[tuple[str, bool]]:
        """One red line per report that could not be written, then that every verdict stands — and, when
        the door changed its exit status for it (``exits``), to what."""
        errors = self.done.errors if self.done is not None else ()
        if not errors:
            return []
        said = f"the run exits {exits}: a report could not be written; " if exits is not None else ""
        return [*((f"ERROR: {error}", True) for error in errors), (f"{said}every verdict above stands", True)]


@dataclass
class Planned:
    """What the door does with its collected items: skip some (ref → reason) and print some lines."""

    skip: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


class ItemRun:
    """One door's run over its items (see the module docstring). ``lazy`` (an xdist worker) plans each item
    only when it runs; ``watch`` is the stop file an xdist worker's controller creates on SIGTERM."""

    def __init__(self, settings: Settings, *, base_dir: Path, kinds: KindRegistry | None = None,
                 lazy: bool = False, watch: str | None = None,
                 make_explainer: Callable[[str], Explainer | None] | None = None) -> None:
        self.settings = settings
        self.kinds = kinds  # the kinds this session's conftests registered, over the process's
        self.lazy = lazy
        self.lines: dict[str, int] = {}  # ref -> the test's line (1-based), for GitHub annotations
        self._base_dir, self._watch, self._make_explainer = base_dir, watch, make_explainer
        # What the run says to the person running it (a size, a setting, why the gated tests are skipped):
        # said once, in the terminal summary — said when it happened, it went into pytest's capture (or, in
        # an xdist worker, nowhere). A worker hands its notes to the controller.
        self.notes: dict[str, None] = {}
        self._insensitive: dict[str, str] = {}  # by model: the item whose failure says INSENSITIVE in full
        self._engine: Run | None = None
        self._stopper: Stopper | None = None  # SIGTERM and the xdist stop file, once a model will be called
        # By test (its node id without the slice): where its marker overrides a value the run was given
        # (a flag, an environment variable, an ini or YAML key), said once at collection; an xdist
        # controller collects none and says its workers' (each collected every test) once, at the end.
        self._overrides: dict[str, str] = {}
        self._workers_overrides: dict[str, None] = {}
        # An xdist worker's usage error at an item's set-up, which stops the session (runner.engine_errors):
        # a worker tells its controller, which then saves no partial report of a run that never started.
        self._usage_error = ""
        # An xdist controller's list of the gated items its workers collected (each collected all of them):
        # an item whose result never arrived — its worker crashed or was killed — is said as not measured.
        self._workers_marked: dict[str, None] = {}
        self._reported: dict[str, None] = {}  # a worker's items that reached a report, or a controller's
        # xdist controller: by call (a pair's perturbed history, or a user's original), the workers that made
        # it — with the cache off they cannot share calls, and the duplicates are said at the end.
        self._made_by: dict[tuple[Any, ...], set[int]] = {}

    @property
    def engine(self) -> Run:
        if self._engine is None:

            self._engine = Run(self.settings, base_dir=self._base_dir, spelling=PYTEST_SPELLING,
                               say=self.note, cross_process=self.lazy, make_explainer=self._make_explainer,
                               kinds=self.kinds)
        return self._engine

    def note(self, line: str) -> None:
        self.notes[line] = None

    @property
    def plans(self) -> Mapping[str, ItemPlan]:
        """The run's gated items by ref (the engine's registry; empty before any was collected)."""
        return self._engine.items if self._engine is not None else {}

    def marked(self, ref: str) -> bool:
        """Whether the item is one of the run's gated items (never builds the engine)."""
        return ref in self.plans

    # ------------------------------------------------------------------------------- collection
    def gate_for(self, ref: str, kwargs: Mapping[str, Any], args: Sequence[Any] = ()) -> GateSettings:
        """The test's gate settings from its marker; a bad keyword is a ConfigError naming the test."""
        canonical = self.kinds.canonical if self.kinds is not None else None
        return apply_marker(self.settings, kwargs, nodeid=ref, args=tuple(args), canonical_kind=canonical)

    def params_for(self, gate: GateSettings) -> list[SliceParam]:
        """One parameter per model × kind, plus ``overall`` when the test covers several kinds."""
        return expand(configured_models(self.settings), gate)

    def expect(self, ref: str, marker: tuple[Mapping[str, Any], Sequence[Any]], param: SliceParam, *,
               own_explainer: bool, checks: Callable[[], CheckRegistry | None]) -> None:
        """An item the door collected: its marker's (keywords, arguments), its slice parameter, whether its
        conftest overrides the ``explainer`` fixture, and its directory's checks (``checks()``, None: the
        process's; a refused registration is a ConfigError)."""
        gate = self.gate_for(ref, *marker)
        self.engine.expect(ref, gate, param, own_explainer=own_explainer, checks=self._registered(checks))
        test = ref.split("[", 1)[0]
        if test not in self._overrides:
            self._overrides[test] = overrides_note(test, self.settings, marker[0])

    def _registered(self, checks: Callable[[], CheckRegistry | None]) -> CheckRegistry | None:
        """The directory's checks. An xdist worker keeps a refused registration for its first item's set-up,
        which fails with its one line and stops the session (:meth:`start`); raised at collection it ended
        the worker, and xdist's session in an INTERNALERROR that never said why (issue 61)."""
        try:
            return checks()
        except ConfigError as exc:
            if not self.lazy:
                raise
            self._usage_error = self._usage_error or str(exc)
            return None

    def plan(self, *, listing: bool) -> Planned:
        """Plan the expected items: a dry run prices them all and skips them, without a model they are
        skipped (or, under require-model, one ConfigError), otherwise the sweep starts — unless this is an
        xdist worker (each item is planned when it runs) or ``listing`` (``--collect-only``: nothing is
        started, no model is called)."""
        if not self.plans:
            return Planned()  # a session without marked tests never imports the engine
        said = [note for note in self._overrides.values() if note]
        planned = self._plan(listing=listing)
        return replace(planned, lines=[*said, *planned.lines]) if said and not self.lazy else planned

    def _plan(self, *, listing: bool) -> Planned:
        # One usage error before anything runs, instead of the same error (and traceback) per item.
        check_callable(self.settings, [p.ref for p in self.plans.values() if not p.own_explainer],
                       PYTEST_SPELLING)
        self.load_baseline()  # a bad baseline is a usage error before any call
        if self.settings.dry_run:
            return self._dry_run()
        if not self.lazy and any(p.own_explainer for p in self.plans.values()):
            # Their slices are planned when each runs: read the data now, so a bad data file is one usage
            # error at collection, as on the model path — not a traceback per item. (Not in an xdist worker:
            # a usage error there ends the worker, and xdist the session, with an INTERNALERROR.)
            self.engine.dataset  # noqa: B018 - loaded and checked on first use
        if not configured_models(self.settings):
            return self._no_model()
        if not listing:
            self.stop_on_sigterm()
        if not self.lazy:
            for plan in self.plans.values():
                if not plan.own_explainer and plan.param.model:
                    self.engine.plan_item(plan.ref)
            self.engine.announce_size()
            if not listing:
                self.engine.start()
        return Planned()

    def load_baseline(self) -> None:
        """Read and check the ``baseline`` report (once; a no-op without one): a ConfigError if unfit."""
        self.engine.baseline  # noqa: B018 - read and checked on first use

    def _dry_run(self) -> Planned:
        """What each item would cost, and every item skipped: no model is called. (Under xdist each worker
        plans only its own items, so the plan is printed without ``-n``.)"""
        models = configured_models(self.settings)
        plans = list(self.plans.values())
        priced = [p for p in plans if not p.own_explainer and p.param.model]
        custom = sum(p.own_explainer for p in plans)
        lines: list[str] = []
        if models and priced and not self.lazy:
            for plan in priced:
                self.engine.plan_item(plan.ref)
            lines = self.engine.dry_run_lines()
        elif not models and len(plans) > custom:
            n = len(plans) - custom
            lines = [f"dry run: nothing to price for {n} marked item{'s' * (n != 1)}: "
                     f"{no_model_reason(PYTEST_SPELLING)}"]
        if custom and lines:  # their explainer is a fixture: known only when each item runs
            lines.append(f"  (+{custom} items with their own `explainer` fixture: planned when they run)")
        elif custom:
            lines.append(f"dry run: {custom} items with their own `explainer` fixture, whose calls are "
                         "planned when each runs: nothing to price before")
        reason = "robustexplain dry run (--robustexplain-dry-run): no model is called"
        planned = Planned({p.ref: reason for p in plans}, [] if self.lazy else lines)
        self.engine.forget(list(self.plans))
        return planned

    def _no_model(self) -> Planned:
        """Without a model, marked items are skipped (or an error, with require-model); items whose
        ``explainer`` fixture is overridden bring their own and still run."""
        unserved = [ref for ref, plan in self.plans.items() if not plan.own_explainer]
        if not unserved:
            return Planned()
        reason, error = without_model(self.settings, PYTEST_SPELLING)
        if error:
            raise ConfigError(reason)
        self.engine.forget(unserved)
        # pytest says a skip's reason only under -rs: the main job that skips every gate says why once.
        self.note(f"{count_noun(len(unserved), 'gated test item')} skipped: {reason}")
        return Planned(dict.fromkeys(unserved, reason))

    # ------------------------------------------------------------------------------- running items
    def fixture_model(self, ref: str) -> tuple[str, str, bool]:
        """The model the ``explainer`` fixture of this item is bound to — its slice's, else the first
        configured — preflighted; without one, ("", why, whether that is an error rather than a skip)."""
        plan = self.plans.get(ref)
        models = configured_models(self.settings)
        model = plan.param.model if plan is not None and plan.param.model else (models[0] if models else "")
        if not model:
            return ("", *without_model(self.settings, PYTEST_SPELLING))
        self.engine.explainer_for(model)
        return model, "", False

    def start(self, ref: str, own_explainer: Callable[[], Any]) -> None:
        """Plan and start an item not planned at collection — an xdist worker's, or one whose ``explainer``
        fixture is overridden (``own_explainer()`` returns the fixture's value): a no-op for the others."""
        try:
            self._start(ref, own_explainer)
        except RobustExplainError as exc:
            if self.lazy:  # a serial run ends with the usage error itself
                self._usage_error = self._usage_error or str(exc)
            raise

    def _start(self, ref: str, own_explainer: Callable[[], Any]) -> None:
        if self._usage_error:
            raise ConfigError(self._usage_error)
        plan = self.plans[ref]
        if plan.slice_id:
            return
        model = plan.param.model
        if plan.own_explainer:

            explainer = wrap_explainer(own_explainer(), timeout=self.settings.timeout)
            model = explainer.model
            self.engine.register(model, explainer)
        else:
            check_callable(self.settings, [ref], PYTEST_SPELLING)
        self.engine.plan_item(plan.ref, model)
        self.engine.ensure_started(plan.slice_id)

    def result(self, ref: str, *, tick: Callable[[], None] | None = None) -> Robustness:
        """Wait for the (started) item's slice and decide it; ``tick`` draws the progress line between two
        looks, after a stop the controller asked for is honoured."""
        return self.engine.result(self.plans[ref].slice_id, poll=lambda: self._poll(tick))

    def outcome(self, ref: str) -> Outcome:
        """What the door does with the decided item: the engine's one rule of both doors."""
        return self.engine.outcome(self.plans[ref].slice_id)

    def failure(self, outcome: Outcome, *, verbosity: int) -> str:
        """The failed item's message at the door's verbosity (below 0: quiet, above: verbose); an
        INSENSITIVE item after the first of its model points to that one (``-v`` says each in full)."""
        result = outcome.result
        info = self.engine.model_infos.get(result.model)
        if result.verdict.outcome == INSENSITIVE and verbosity <= 0:
            first = self._insensitive.setdefault(result.model, outcome.nodeid)
            if first != outcome.nodeid:
                return same_finding_message(result, first, model_info=info)
        return failure_message(result, model_info=info, verbose=verbosity > 0, quiet=verbosity < 0)

    def perturbations(self, ref: str) -> list[PerturbationResult]:
        """The planned perturbations of a marked item, or the run's default plan for any other test."""
        plan = self.plans.get(ref)
        if plan is not None and plan.slice_id:
            return list(self.engine.perturbations_for(plan.slice_id))
        gate = plan.gate if plan is not None else self.gate_for(ref, {})
        return self.engine.perturbations_of(gate, plan.param.kind if plan is not None else OVERALL)

    def progress(self, reporter: Any, *, quiet: bool, capture: Any = None) -> Progress:
        """The progress line a wait draws on pytest's terminal ``reporter`` (see :class:`Progress`)."""
        return Progress.for_reporter(lambda: self.engine.sweep.counters.progress_line(time.monotonic()),
                                     reporter, mode=self.settings.progress, quiet=quiet, worker=self.lazy,
                                     capture=capture)

    def _poll(self, tick: Callable[[], None] | None) -> None:
        if self._stopper is not None:
            self._stopper.check()
        if tick is not None:
            tick()

    # ------------------------------------------------------------------------------- stopping
    def stop_on_sigterm(self) -> None:
        """From here on SIGTERM stops the session as Ctrl-C does (a partial report, how to resume); an
        xdist worker also stops when its controller's stop file appears (:mod:`.interrupt`)."""
        if self._stopper is None:

            self._stopper = Stopper(watch=StopFile(self._watch) if self._watch else None)
            self._stopper.arm()

    def stop_file_for_workers(self, cleanup: Callable[[Callable[[], None]], None]) -> str | None:
        """xdist controller: the stop file every worker watches, created when SIGTERM reaches the
        controller (armed here); ``cleanup`` is handed its removal, for when the workers are gone."""
        if self._stopper is None:


            stop = StopFile(Path(tempfile.gettempdir()) / f"robustexplain-stop-{secrets.token_hex(8)}")
            self._stopper = Stopper(stop_file=stop)
            self._stopper.arm()
            cleanup(self._stopper.remove_stop_file)
        stop_file = self._stopper.stop_file
        return str(stop_file.path) if stop_file is not None else None

    def ask_workers_to_stop(self) -> None:
        """xdist controller: create the stop file its workers watch (a no-op elsewhere)."""
        if self._stopper is not None and self._stopper.stop_file is not None:
            self._stopper.stop_file.request()

    def stopped(self) -> list[str]:
        """A session stopped by Ctrl-C or SIGTERM: what finished, saved as a partial JSON report (``json``,
        else in the cache directory), and how to resume — as ``robustexplain run`` says it. Nothing when no
        robustness test ran."""
        if self._engine is None and self._stopper is None:
            return []

        how = self._stopper.how if self._stopper is not None else "interrupted"
        partial = self.engine.partial()  # a controller stopped before any worker's result: nothing yet
        settings, cache_dir = self.settings, self.engine.cache_dir
        lines = save_partial(partial, how=how, json_path=settings.json, cache_dir=cache_dir)
        return [*lines, resume_hint(backend=settings.backend, cache=settings.cache, cache_dir=cache_dir,
                                    spelling=PYTEST_SPELLING)]

    # ------------------------------------------------------------------------------- xdist and the end
    def note_report(self, ref: str, *, line: int | None, payload: Mapping[str, Any] | None) -> None:
        """A gated item's call report (serial, or from an xdist worker: the controller has no items): keep
        its line (0-based, as pytest locates it) and merge the pairs a worker's report carries."""
        if line is not None and (payload is not None or self.marked(ref)):
            self.lines[ref] = line + 1
        if self.lazy and self.marked(ref):  # reported by this worker, whatever its outcome (a set-up error)
            self._reported[ref] = None
        if payload is not None and not self.lazy:
            self._note_calls(payload)
            self.engine.merge(payload, source="xdist worker report")

    def _note_calls(self, payload: Mapping[str, Any]) -> None:
        worker = payload.get("worker")
        if not isinstance(worker, int):  # a report from before payloads named their worker
            return
        for pair in payload.get("pairs", ()):
            key = pair.get("key", {})
            user = (key.get("model"), key.get("user_id"), key.get("item_id"), key.get("repeat"))
            if not pair.get("cached_perturbed"):
                call = ("pair", *user, key.get("kind"), key.get("severity"))
                self._made_by.setdefault(call, set()).add(worker)
            if not pair.get("cached_original"):
                self._made_by.setdefault(("original", *user), set()).add(worker)

    def duplicate_calls_note(self) -> list[str]:
        """xdist controller: how many calls more than one worker made (none said when there are none)."""
        twice = sum(len(workers) - 1 for workers in self._made_by.values())
        if not twice:
            return []
        share = ("" if self.settings.cache == "read-write" else
                 f"; with the cache {self.settings.cache!r} the workers cannot share them — the default "
                 "cache=read-write shares them through the cache directory")
        return [f"{twice} model call{'s were' if twice != 1 else ' was'} made by more than one xdist worker "
                f"(the same original or perturbed history asked again){share}"]

    def item_payload(self, ref: str) -> dict[str, Any] | None:
        """What an xdist worker's item report carries to the controller: its pairs, gate and model facts
        (None for an item not decided here, and in a serial run, which already has them)."""
        plan = self.plans.get(ref) if self.lazy else None
        result = self.engine.decided(plan.slice_id) if plan is not None and plan.slice_id else None
        return None if result is None else self.engine.payload(result, ref)

    def worker_output(self) -> dict[str, Any]:
        """What an xdist worker tells the controller at its end: its call counters, the models whose
        digest changed while it ran, why slices could not be decided, its marker overrides and usage error."""
        said = {"overrides": [note for note in self._overrides.values() if note], "notes": list(self.notes),
                "usage_error": self._usage_error,
                "marked": [] if self.settings.dry_run else sorted(self.plans),
                "reported": list(self._reported)}
        if self._engine is None:
            return {key: value for key, value in said.items() if value}
        return {"counters": self._engine.call_counters(), "judge_tokens": self._engine.judging.tokens(),
                "models_changed": self._engine.recheck_models(),
                "errors": list(self._engine.errors), **said}

    def merge_worker(self, output: Mapping[str, Any]) -> None:
        self._workers_overrides.update(dict.fromkeys(str(note) for note in output.get("overrides", ())))
        self.notes.update(dict.fromkeys(str(note) for note in output.get("notes", ())))
        self._usage_error = self._usage_error or str(output.get("usage_error") or "")
        self._workers_marked.update(dict.fromkeys(str(ref) for ref in output.get("marked", ())))
        self._reported.update(dict.fromkeys(str(ref) for ref in output.get("reported", ())))
        self.engine.merge(output, source="xdist worker")

    def end(self, *, interrupted: bool) -> Ending:
        """The session's end, the run closed after it: an xdist worker's output for its controller; an
        ``interrupted`` session's partial report; else the engine's end of the run (record, reports,
        outcomes)."""
        try:
            if self.lazy:
                return Ending(worker_output=self.worker_output())
            if interrupted:  # by a worker's usage error (xdist says it), or Ctrl-C or SIGTERM
                stopped = [] if self._usage_error else self.stopped()
                return Ending(notes=[*self._workers_overrides, *self.notes, *stopped],
                              usage_error=self._usage_error)
            self._not_reported()
            return Ending(notes=[*self._workers_overrides, *self.notes, *self.duplicate_calls_note()],
                          done=self._engine.finish() if self._engine is not None else None)
        finally:
            self.close()

    def _not_reported(self) -> None:
        """xdist controller: every gated item no worker reported a result for is a "not decided" line in
        every report — before, a worker killed mid-item left its gate out of the JSON and HTML silently."""
        if not self._workers_marked or self._engine is None:
            return
        decided = {gate.nodeid for gate in self._engine.gates} | set(self._reported)
        for ref in (ref for ref in self._workers_marked if ref not in decided):
            self._engine.note_error(f"{ref}: not measured — no result arrived from its xdist worker (it "
                                    "crashed or was killed, or the session stopped before it ran)")

    def close(self) -> None:
        if self._stopper is not None:
            self._stopper.disarm()
        if self._engine is not None:
            self._engine.close()


def overrides_note(test: str, settings: Settings, keywords: Mapping[str, Any]) -> str:
    """One line saying which of the run's given values ``test``'s marker overrides ("" when none): the
    documented precedence (marker first) said where it applies, so that a flag that lost is never silent."""
    lost = []
    for key, value in keywords.items():
        source = settings.sources.get(key, "default")
        given = getattr(settings, key, None)
        if value is None or source == "default" or value == given:
            continue
        # A flag or an environment variable is one word; an ini or YAML key says its file ("ini …").
        lost.append(f"{key}={value!r} over {source}={given!r}" if " " not in source
                    else f"{key}={value!r} over {key}={given!r} from {source}")
    return f"{test}: its marker sets {'; '.join(lost)} (the marker wins)" if lost else ""
