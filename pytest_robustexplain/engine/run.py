"""One robustness run, the same for ``pytest`` and ``robustexplain run``.

:class:`Run` builds and preflights the explainers, plans gated slices over the dataset, runs them
through one :class:`~pytest_robustexplain.sweep.Sweep`, decides each slice (stability, adversarial kinds,
the guard, the baseline regression), assembles the run record and writes the reports. It knows nothing
of pytest: errors are :class:`~pytest_robustexplain.errors.RobustExplainError` subclasses, notes for the
person running it go to a ``say`` callback. pytest drives it item by item through :class:`.items.ItemRun`
(the plugin turns test items into its refs and its errors into pytest outcomes); the CLI calls
:meth:`Run.run_all`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checks import DEFAULT_CHECKS, check_limits_known, metric_names_known, relative_pairs
from ..checks.judge import Faithfulness
from ..errors import (
    BackendError,
    CacheMissError,
    ConfigError,
    RobustExplainError,
    RobustExplainWarning,
    WarningQueue,
    warn,
)
from ..explainers.base import FAILURE_ERROR, digest_now
from ..explainers.cache import WRITING_MODES
from ..perturbations import counted
from ..report.json_report import read_json
from ..report.summary import ReportModel
from ..results import (
    OVERALL,
    GateResult,
    ModelInfo,
    PairKey,
    PairResult,
    Robustness,
    RunResult,
    gate_scope,
    price_for,
    tokens_cost,
)
from ..settings import Spelling
from ..store import Store
from ..sweep import PairPlanner, Sweep, perturbations_of
from .batching import answer_planned_by_batch
from .decide import (
    Outcome,
    check_baseline,
    decide,
    outcome_of,
    regression,
    robustness,
    with_regression,
)
from .interrupt import SweepFailed, SweepInterrupted, stop_how
from .judging import RunJudge, polarity_finding
from .pace import load_pace
from .plan import (
    GatedSlice,
    ItemPlan,
    SliceParam,
    SlicePlan,
    check_slice_size,
    dry_run_lines,
    guarded,
    large_plan_note,
    max_calls,
    plan_slices,
    planned_calls,
    slice_spec,
    users_within,
    users_within_cost,
)
from .record import RunRecord
from .reports import RunOutcome, record_history, utc_now, write_reports
from .setup import (
    build_explainer,
    build_scorer,
    cache_directory,
    cached_count,
    configured_models,
    context_note,
    donor_pool,
    load_configured_dataset,
    take_cases,
)
from .shards import Shard, Sharding

if TYPE_CHECKING:
    from ..checks import CheckRegistry
    from ..data import Dataset, EvalCase
    from ..explainers.base import Explainer
    from ..perturbations import KindRegistry, PerturbationResult
    from ..perturbations.donors import DonorPool
    from ..report.summary import ReportModel
    from ..results import FaithfulnessResult, PolarityResult
    from ..settings import GateSettings, Settings
    from ..sweep import Counters, PairPlanner, SliceResult, Sweep


class Run(RunRecord):
    """The state of one run: settings in, a :class:`RunResult` and reports out.

    ``spelling`` is how the door names options in messages (``--robustexplain-users`` or ``--users``);
    ``make_explainer(model)`` may supply an explainer (the plugin's hook) before the configured backend is
    built; ``cross_process`` shares cache locks between processes (xdist workers).
    """

    def __init__(self, settings: Settings, *, spelling: Spelling, base_dir: Path | None = None,
                 say: Callable[[str], None] | None = None, cross_process: bool = False,
                 make_explainer: Callable[[str], Explainer | None] | None = None,
                 extra_settings: Mapping[str, Any] | None = None, kinds: KindRegistry | None = None,
                 checks: CheckRegistry | None = None, sharding: Sharding | None = None) -> None:
        self.settings = settings
        self.sharding = sharding or Sharding(Shard.of(settings.shard))  # the part of the plan it measures
        self.spelling = spelling
        self.kinds = counted(kinds, settings.perturbation_counts)  # None: the process's registry
        self.checks = checks  # the run's checks (None: the process's registry)
        self.cache_dir = cache_directory(settings, base_dir)
        # The run's one store of what it keeps (its caches and the pace share it: a failure is said once).
        self.kept = Store(self.cache_dir, writes=settings.cache in WRITING_MODES)
        self.base_dir = base_dir
        self.cross_process = cross_process
        self.extra_settings = dict(extra_settings or {})
        self.model_infos: dict[str, ModelInfo] = {}
        self.gates: list[GateResult] = []
        self.pairs: dict[PairKey, PairResult] = {}  # pairs of decided slices (this process or reported)
        self.metric_tags: set[str] = set()  # the user metrics (name@version) its tests measure: the signature
        self.counters: dict[str, int] = {}  # call counters reported by other processes (xdist workers)
        self.judge_tokens: dict[str, dict[str, int]] = {}  # the judges' tokens, as other processes counted
        # Why slices could not be decided (every call failed, the server broke off), each said once: the
        # report says so even when nothing was decided, so a CI job that failed this way still has one.
        self.errors: list[str] = []
        self._causes: dict[str, str] = {}  # a failure's first error -> the item that said it in full
        self.started, self.started_at = time.monotonic(), utc_now()
        self.warnings = WarningQueue()  # this run's warnings from other threads, said at each wait
        self._say = say or (lambda note: None)
        self._make_explainer = make_explainer or (lambda model: None)
        self._notes: set[str] = set()
        self._dataset: Dataset | None = None
        self._dataset_elsewhere: str | None = None  # the name an xdist worker loaded it under
        self._donor_pool: DonorPool | None = None
        self._baseline: RunResult | None = None
        self._baseline_loaded = False
        self._explainers: dict[str, Explainer] = {}
        self.items: dict[str, ItemPlan] = {}  # every item a door will ask about, by its ref (node id)
        self._slices: dict[str, GatedSlice] = {}
        self._started: set[str] = set()  # slice ids handed to the sweep
        self._context_checked: set[tuple[str, tuple[tuple[str, str], ...]]] = set()  # (model, cases) asked
        self._results: dict[str, Robustness] = {}
        self._sweep: Sweep | None = None
        self._changed: dict[str, str] = {}  # model → the digest its server listed at the end (re-pulled)
        self._changed_elsewhere: dict[str, str] = {}  # as other processes (xdist workers) found it
        self._worker_findings: dict[tuple[str, str], dict[str, Any]] = {}  # (model, worker): _adopt_findings
        self.judging = RunJudge(settings, cache_dir=self.cache_dir, kept=self.kept,
                                cross_process=cross_process)

    # ------------------------------------------------------------------------------- inputs
    def say(self, note: str) -> None:
        """A note for the person running this (a size, a setting they should know about), once."""
        if note not in self._notes:
            self._notes.add(note)
            self._say(note)

    @property
    def dataset(self) -> Dataset:
        if self._dataset is None:
            self._dataset = load_configured_dataset(self.settings)
        return self._dataset

    def cases_for(self, gate: GateSettings) -> tuple[EvalCase, ...]:
        cases, note = take_cases(self.dataset.cases, gate.users)
        if note:
            self.say(note)
        users, budget_note = users_within(self.settings, gate, len(cases))
        if budget_note:
            self.say(budget_note)
        if self.settings.max_cost is not None:
            per_call, basis = self.call_cost_bound()
            users, cost_note = users_within_cost(self.settings, gate, users, per_call, basis,
                                                 self.judging.user_cost(gate))
            if cost_note:
                self.say(cost_note)
        return cases[:users]

    def call_cost_bound(self) -> tuple[float, str]:
        """The most a call costs on the run's models at their prices, and on what that rests: the tokens a
        call took last time (the recorded pace), else the most a call can take (a full num-ctx prompt and
        num-predict completion tokens). A model without a price is a ConfigError: max-cost cannot bound it."""
        settings, found = self.settings, []
        for model in settings.models_to_test:
            price = price_for(settings.price, model)
            if price is None:
                raise ConfigError(f"max-cost {settings.max_cost:g}: model {model!r} has no price (price: "
                                  f"{', '.join(settings.price)}); give it one, or a price for every model")
            pace = load_pace(self.kept, settings.backend, model) if model else None
            measured = pace.call_cost(price) if pace is not None else None
            if measured is not None:
                found.append((measured, f"{model}'s tokens a call last time"))
            else:
                found.append((tokens_cost(settings.num_ctx, settings.num_predict, price),
                              f"{model} before any measured call: a full context of {settings.num_ctx:,} "
                              f"prompt and {settings.num_predict:,} completion tokens"))
        return max(found) if found else (0.0, "no model")

    @property
    def baseline(self) -> RunResult | None:
        """The ``baseline`` report, read once; one not comparable with this run is a ConfigError."""
        path = self.settings.baseline
        if not self._baseline_loaded and path is not None:

            baseline = read_json(path)
            check_baseline(baseline, path, self.settings, save_flag=self.spelling.flag("save-baseline"))
            self._baseline = baseline
        self._baseline_loaded = True
        return self._baseline

    # ------------------------------------------------------------------------------- explainers
    def explainer_for(self, model: str) -> Explainer:
        """The explainer of ``model``, built (the hook's, else the configured backend's behind the
        response cache) and preflighted on first use: a dead server or missing model fails here, once."""
        if model not in self._explainers:
            explainer = self._make_explainer(model)
            self.register(model, explainer if explainer is not None else build_explainer(
                self.settings, model, cache_dir=self.cache_dir, cross_process=self.cross_process,
                kept=self.kept))
        return self._explainers[model]

    def register(self, model: str, explainer: Explainer) -> ModelInfo:
        """Preflight ``explainer`` and run ``model``'s slices on it (a no-op when already registered)."""
        if model not in self._explainers:
            sweep = self.sweep
            try:
                self.model_infos[model] = sweep.run_coroutine(explainer.preflight())
            finally:
                self.flush_warnings()  # what preflight warned of on the sweep's loop, said here
            self._explainers[model] = explainer
            sweep.add_explainer(model, explainer)
        return self.model_infos[model]

    def recheck_models(self) -> dict[str, str]:
        """Each model whose server now lists another digest than its preflight read (model → the new
        one): re-pulled mid-run, so its explanations may mix two versions. Asked once, at the end, of the
        explainers that generated something in this process."""
        if self._sweep is None:
            return {}
        changed = {}
        for model, explainer in self._explainers.items():
            before = self.model_infos[model].digest
            after = self._sweep.run_coroutine(digest_now(explainer)) if before else None
            if after is not None and after != before:
                changed[model] = after
        return changed

    def check_models_at_end(self) -> None:
        """Say (once per model) that a model changed during the run — here or in another process — and mark
        the record: its model entry gets ``extra.digest_at_end`` and the settings ``models_changed``."""
        for model, after in {**self._changed_elsewhere, **self.recheck_models()}.items():
            info = self.model_infos.get(model)
            if model in self._changed or info is None:
                continue
            self._changed[model] = after
            self.model_infos[model] = replace(info, extra={**info.extra, "digest_at_end": after})
            warn(RobustExplainWarning(
                f"model {model} changed during the run: its digest was {(info.digest or '?')[:19]}… at the "
                f"start and is {after[:19]}… now (pulled again?), so the explanations may come from two "
                "versions of it and the verdicts mix them; rerun to measure one version (the report marks "
                "the run: settings.models_changed)"))

    # ------------------------------------------------------------------------------- planning
    def expect(self, ref: str, gate: GateSettings, param: SliceParam, *, own_explainer: bool = False,
               checks: CheckRegistry | None = None) -> ItemPlan:
        """Register an item the door will ask about; its slice is planned by :meth:`plan_item`. ``checks``
        are the item's own (its directory's conftests'), when they are not the run's."""
        item = self.items.get(ref)
        if item is None:
            item = self.items[ref] = ItemPlan(ref, gate, param, own_explainer, checks=checks)
            self._limits_known(gate, ref)  # at collection, whenever the item will be planned
        return item

    def forget(self, refs: Collection[str]) -> None:
        """Items the door will not ask about after all (skipped: a dry run, no model)."""
        for ref in refs:
            self.items.pop(ref, None)

    def plan_item(self, ref: str, model: str = "") -> GatedSlice:
        """Plan the item's slice on ``model`` (default: its parameter's; a test's own explainer names its
        model only when it runs)."""
        item = self.items[ref]
        planned = self.plan(item.gate, nodeid=ref, model=model or item.param.model,
                            slice_name=item.param.kind)
        item.slice_id = planned.spec.slice_id
        return planned

    def plan(self, gate: GateSettings, *, nodeid: str, model: str, slice_name: str) -> GatedSlice:
        """The gated slice of one item (built once per item): its cases × kinds × severities × repeats."""
        slice_id = f"{nodeid}::{model}"
        planned = self._slices.get(slice_id)
        if planned is not None:
            return planned
        if nodeid not in self.items:  # robustexplain run: slices planned without a door's item
            self._limits_known(gate, nodeid)
        if self._donor_pool is None and guarded(gate):
            self._donor_pool = donor_pool(self.dataset)
        checks = self.checks_for(nodeid)
        metrics = tuple(m for m in checks.metrics() if not m.builtin)  # the four: scored by the Scorer
        self.metric_tags.update(m.tag for m in metrics)
        cases = self.sharding.cases(slice_id, self.dataset) or self.cases_for(gate)
        # The judge's own test asks it user by user during the sweep (``SliceDesign.probe``).
        judged = self.judging.probe_for(cases)
        probes = {Faithfulness.name: judged} if judged is not None else None
        spec = self.sharding.restrict(slice_spec(
            self.settings, gate, slice_id=slice_id, model=model, cases=cases,
            kind=None if slice_name == OVERALL else slice_name, donor_pool=self._donor_pool, metrics=metrics,
            checks=checks, probes=probes))
        check_slice_size(spec, nodeid=nodeid, spelling=self.spelling)
        planned = GatedSlice(spec, nodeid, slice_name, gate)
        self._slices[slice_id] = planned
        return planned

    def _limits_known(self, gate: GateSettings, ref: str) -> None:
        """The user's own checks and metrics a gate names exist for its test (known once its conftests
        registered them): a usage error at collection naming the one meant."""
        if gate.check_limits:
            check_limits_known(gate.check_limits, self.checks_for(ref),
                               f"{ref}: {gate.sources.get('check_limits', 'check-limits')}")
        metric_names_known(gate, self.checks_for(ref), ref)

    def checks_for(self, ref: str) -> CheckRegistry:
        """The checks gating an item: its own (its directory's conftests') when it has them, else the run's,
        else the process's."""
        item = self.items.get(ref)
        if item is not None and item.checks is not None:
            return item.checks
        return self.checks if self.checks is not None else DEFAULT_CHECKS

    def announce_size(self, hint: str = "") -> None:
        """Before a large run starts: how many calls it plans at most and how to shrink it."""
        calls = max_calls([s.spec for s in self._slices.values()])
        note = large_plan_note(calls, spelling=self.spelling)
        if note:
            self.say(note + hint)

    def price(self, planner: PairPlanner | None = None) -> list[SlicePlan]:
        """Every planned slice priced (pairs, controls, model calls at most) by the sweep's own planner,
        without an explainer, the cache or a model call: what a dry run prints. A ``planner`` passed in
        keeps the planned pairs (for :meth:`cached_calls`)."""
        judge = self.settings.judge if self.judging.on else None
        return plan_slices(list(self._slices.values()), self.dataset.catalog, self.kinds, judge=judge,
                           planner=planner, judges=max(1, len(self.settings.judge_models)))

    def cached_calls(self, planner: PairPlanner) -> int | None:
        """How many of the planned calls the response cache already answers (None: it cannot tell)."""
        counts = [cached_count(self.settings, model, self.cache_dir, calls)
                  for model, calls in planned_calls(planner).items() if model]
        return None if not counts or any(c is None for c in counts) else sum(c or 0 for c in counts)

    def dry_run_lines(self, *, by_model: bool = False, design: Sequence[str] = ()) -> list[str]:
        """What ``--dry-run`` prints, both doors (:func:`~.plan.dry_run_lines`): every gated item under its
        node id (pytest), or ``by_model`` each model's largest slice — the overall one, which holds every
        pair its kind slices share (``robustexplain run``); then the pace a previous run recorded."""
        planner = PairPlanner(self.dataset.catalog, self.kinds, keep=False)  # priced, then let go
        plans = self.price(planner)
        labels = {slice_id: f"{planned.nodeid} ({planned.spec.model or 'custom explainer'})"
                  for slice_id, planned in self._slices.items()}
        if by_model:
            largest: dict[str, SlicePlan] = {}
            for plan in plans:
                if plan.model not in largest or plan.planned > largest[plan.model].planned:
                    largest[plan.model] = plan
            plans = list(largest.values())
            labels = {plan.slice_id: plan.model for plan in plans}
        calls = max_calls([s.spec for s in self._slices.values()])
        judge_model = self.settings.judge_model if self.judging.on else None
        lines = dry_run_lines(plans, labels, calls, noun="model" if by_model else "gated item", design=design,
                              judge_model=judge_model, cached=self.cached_calls(planner))
        # Each judge's calls at most (a plan counts every judge's): shared prompts are asked once a run.
        judge_calls = sum(plan.judge_calls for plan in plans) // max(1, len(self.settings.judge_models))
        said = (*self.pace_lines(), *self.judging.dry_run_lines(judge_calls))
        return lines + [f"  {line}" for line in said]

    @property
    def sweep(self) -> Sweep:
        """The sweep, started on first use (its event loop also runs preflights and fixture calls)."""
        if self._sweep is None:

            # Every model the run may call: an xdist worker starts the sweep with one slice planned.
            models = max(1, len({s.spec.model for s in self._slices.values()} | set(configured_models(
                self.settings))))
            slots = self.slots
            scorer = build_scorer(self.settings, cache_dir=self.cache_dir, kept=self.kept)
            budget = self.settings.max_minutes
            self._sweep = Sweep({}, self.dataset.catalog, scorer=scorer, window=2 * slots * models,
                                budget_s=None if budget is None else 60 * budget, warnings=self.warnings,
                                kinds=self.kinds, recorded=self.sharding.recorded)
            self._sweep.start()
        return self._sweep

    def start(self) -> None:
        """Preflight the planned slices' explainers and start every planned slice."""
        for model in dict.fromkeys(s.spec.model for s in self._slices.values()):
            self.explainer_for(model)
        answer_planned_by_batch(self, list(self._slices.values()))  # one batch for every slice (batch on)
        for slice_id in list(self._slices):
            self.ensure_started(slice_id)
        self.judging.start(self.sweep)  # a dead judge server fails here too, before the calls

    def ensure_started(self, slice_id: str) -> None:
        """Start one slice once (its explainer preflighted first), e.g. one planned after :meth:`start`."""
        if slice_id in self._started:
            return
        planned = self._slices[slice_id]
        self._check_context(planned.spec.model, self.explainer_for(planned.spec.model), planned.spec.cases)
        self.judging.start(self.sweep)  # before the slice's calls: its sequential test may ask the judge
        answer_planned_by_batch(self, [planned])  # (batch on: what the run's batch did not answer yet)
        self.sweep.add_slice(planned.spec)
        self._started.add(slice_id)

    def _check_context(self, model: str, explainer: Explainer, cases: Sequence[EvalCase]) -> None:
        """Before the calls: which users' prompts are estimated to fill the model's context (said once)."""
        check = getattr(explainer, "oversized", None)
        asked = (model, tuple((c.user_id, c.item_id) for c in cases))
        if check is None or asked in self._context_checked:  # once for a test's kinds and overall
            return
        self._context_checked.add(asked)
        window, over, counted = self.sweep.run_coroutine(check(cases))
        if window is not None and over:
            self.say(context_note(model, len(cases), window.tokens, window.source, over, counted,
                                  max_history=self.settings.max_history, spelling=self.spelling))

    def perturbations_for(self, slice_id: str) -> Sequence[PerturbationResult]:
        """A started slice's perturbations, as its pairs run them."""
        return self.sweep.perturbations_for(slice_id)

    def perturbations_of(self, gate: GateSettings, slice_name: str = OVERALL) -> list[PerturbationResult]:
        """The perturbations a gate's slice would run, planned but never started (no explainer, no call):
        what an unmarked test's ``perturbed_histories`` gets, by the same planner as the sweep."""
        kinds = gate.perturbations if slice_name == OVERALL else (slice_name,)
        return perturbations_of(self.cases_for(gate), kinds, gate.severities, gate.repeats,
                                seed=self.settings.seed, catalog=self.dataset.catalog, design=gate.design,
                                registry=self.kinds)

    @property
    def progress(self) -> Counters:
        return self.sweep.counters

    # ------------------------------------------------------------------------------- deciding
    def result(self, slice_id: str, *, poll: Callable[[], None] | None = None,
               interval: float = 0.25) -> Robustness:
        """Wait for a slice and decide it (once); a backend failure is one BackendError naming the model."""
        done = self._results.get(slice_id)
        if done is not None:
            return done
        planned = self._slices[slice_id]
        try:
            sliced = self.sweep.wait(slice_id, poll=poll, interval=interval)
        except RobustExplainError as exc:
            message = self._said_once(f"{planned.spec.model}: {exc}", planned.nodeid)
            self.note_error(message)
            raise BackendError(message) from None  # one message, not a chain of three
        finally:
            self.flush_warnings()  # the sweep threads' warnings (a full disk…), raised on this thread
        found = self.judging.finding(self.sweep, slice_id, sliced, planned.gate)
        polar = polarity_finding(sliced, self.judging.vocabulary(self.dataset.catalog), planned.gate)
        done = self.decide(planned, sliced, found, polar)
        self._results[slice_id] = done
        return done

    def _said_once(self, message: str, item: str) -> str:
        """A cause several items share (every call failed with the same first error) in full for the first,
        named by the others with where it is said: one root cause, not its paragraph in every item."""
        head, found, cause = message.partition("; first error: ")
        first = self._causes.setdefault(cause, item) if found else item
        return message if first == item else f"{head}; the same first error as {first}"

    def decided(self, slice_id: str) -> Robustness | None:
        """The slice's decided result, None while it is not decided (nothing waits)."""
        return self._results.get(slice_id)

    def outcome(self, slice_id: str, *, poll: Callable[[], None] | None = None) -> Outcome:
        """What the door does with the slice's item (waiting for it first): the one rule of both doors."""
        result = self.result(slice_id, poll=poll)
        planned = self._slices[slice_id]
        return outcome_of(planned.nodeid, result, self.sharding.policy(planned.gate.inconclusive),
                          price_for(self.settings.price, planned.spec.model))

    def outcomes(self) -> list[Outcome]:
        """The outcome of every decided slice, in plan order."""
        return [self.outcome(slice_id) for slice_id in self._slices if slice_id in self._results]

    def decide(self, planned: GatedSlice, sliced: SliceResult, faithfulness: FaithfulnessResult | None = None,
               polarity: PolarityResult | None = None) -> Robustness:
        """The slice's verdict (every rule: the judge's, polarity's, the baseline's), recorded for reports."""
        kind = None if planned.slice == OVERALL else planned.slice
        measured = {Faithfulness.name: faithfulness, "polarity": polarity}
        budget, found, baseline = self.settings.max_minutes, None, self.baseline
        verdict = self.sharding.none_measured(planned.gate, planned.spec, kind)  # a shard without its users
        if verdict is None:
            verdict = decide(self.sharding.deciding(planned.gate), sliced, kind, measured=measured,
                             checks=self.checks_for(planned.nodeid),
                             deadline=None if budget is None else self.started + 60 * budget)
            if baseline is not None:
                found = regression(baseline, planned.spec.model, sliced,
                                   margin=self.settings.max_regression, alpha=planned.gate.alpha,
                                   source=str(self.settings.baseline),
                                   save_flag=self.spelling.flag("save-baseline"),
                                   relative=relative_pairs(planned.gate, kind, sliced.pairs))
        verdict = self.sharding.verdict(with_regression(verdict, found, self.settings.baseline), planned.spec)
        self.gates.append(self.sharding.gate(GateResult(
            planned.nodeid, planned.slice, planned.spec.model, verdict, planned.gate.thresholds(kind),
            gate_scope(sliced.pairs)), planned.gate, planned.spec.cases))
        for pair in (*sliced.scored, *sliced.controls, *sliced.swaps):  # under the run's weights
            self.keep(pair)
        return robustness(planned, sliced, verdict, found,
                          self.sweep.perturbations_for(planned.spec.slice_id))

    def run_all(self, *, poll: Callable[[Counters], None] | None = None, interval: float = 0.25) -> RunResult:
        """Run every planned slice and decide each: the whole run (``robustexplain run``).

        ``poll`` gets the sweep's counters every ``interval`` seconds (a progress bar; it may raise
        KeyboardInterrupt). On KeyboardInterrupt the sweep stops and :class:`SweepInterrupted` carries the
        partial run: the finished pairs and the gate of every slice that finished. A backend that breaks
        off mid-run raises :class:`SweepFailed` with the same partial run.
        """
        try:
            self.start()  # a dead server or a missing model fails here, before anything is recorded
            tick = None if poll is None else (lambda: poll(self.sweep.counters))
            try:
                for slice_id in self._slices:
                    self.result(slice_id, poll=tick, interval=interval)
                self.check_models_at_end()
            except (BackendError, CacheMissError) as exc:
                raise SweepFailed(exc, self.partial(keep_errors=False)) from None
        except KeyboardInterrupt as stop:
            raise SweepInterrupted(self.partial(), stop_how(stop)) from None
        finally:
            self.close()
        result = self.record()
        assert result is not None  # every slice was decided
        return result

    def partial(self, *, keep_errors: bool = True) -> RunResult:
        """The run so far. ``keep_errors=False`` (the backend broke off) leaves out pairs whose call
        failed: the breakdown failed them, not the model; they are not cached, so a rerun makes them."""
        sweep = self._sweep
        if sweep is None:
            return self._record(partial=True, pairs=sorted(self.pairs.values(), key=lambda p: p.key))
        sweep.close()  # first: pairs that finish while the loop winds down belong in the partial report
        # Every slice that finished is gated, whether or not its wait had returned when Ctrl-C came: the
        # partial report depends on what finished, not on when the main thread last looked.
        for slice_id, planned in self._slices.items():
            done = sweep.finished(slice_id)
            if slice_id not in self._results and done is not None and done.pairs:
                self._results[slice_id] = self.decide(planned, done)
        for pair in sweep.all_results():
            self.pairs.setdefault(pair.key, pair)
        if not keep_errors:
            self.pairs = {key: p for key, p in self.pairs.items() if p.failure != FAILURE_ERROR}
        return self._record(partial=True, pairs=sorted(self.pairs.values(), key=lambda p: p.key))

    def finish(self, result: RunResult | None = None) -> RunOutcome | None:
        """The end both doors print: a model re-pulled mid-run said and marked, the record, every report
        written (from one :class:`ReportModel`), each decided item's outcome; None when nothing was gated.
        ``result`` is the record :meth:`run_all` already made (its models rechecked before the sweep
        closed); without it, the models are rechecked and the record made here."""
        if result is None:
            self.check_models_at_end()
            result = self.record()
            if result is None:
                return None
        # The history first: the reports show each item's recent runs, this one the last of them.
        history = record_history(self.settings, result, cache_dir=self.cache_dir, base_dir=self.base_dir,
                                 spelling=self.spelling)
        report = ReportModel(result)  # one set of summaries for the files and the terminal
        written, errors = self.write_reports(report)
        errors += [history] if history else []
        return RunOutcome(report, tuple(self.outcomes()), tuple(errors), tuple(written))

    def write_reports(self, result: RunResult | ReportModel) -> tuple[list[str], list[str]]:
        """Write every configured report: the files written, and one message per report that could not be,
        naming the option, path and cause (a report that cannot be written never changes the verdict)."""
        return write_reports(self.settings, result, spelling=self.spelling)

    def flush_warnings(self) -> None:
        """Say, on this (the main) thread, what the run's other threads warned of, in order."""
        self.warnings.flush()

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.close()
        self.kept.close()
        self.flush_warnings()  # anything the sweep's threads warned of after the last wait
