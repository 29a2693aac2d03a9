"""One robustness run inside a pytest session: plan at collection, gate each item, assemble the report.

plugin.py keeps only the pytest glue and calls into :class:`RobustnessRun`, which lives in
``config.stash``. Heavy modules (numpy, the metrics, the model clients) are imported here lazily, only
when a session actually has marked tests.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import __version__
from .errors import BackendError, ConfigError, DataError, RobustExplainError
from .results import (
    FAIL,
    METRICS,
    OVERALL,
    PASS,
    GateResult,
    GuardResult,
    Interval,
    PairResult,
    RunResult,
    Verdict,
    gate_scope,
)
from .settings import GateSettings, Settings, apply_marker

if TYPE_CHECKING:
    from .data import Dataset, EvalCase, Item, UserHistory
    from .donors import DonorPool
    from .explainers.base import Explainer, Explanation, ModelInfo
    from .perturbations import PerturbationResult
    from .stats import NonInferiorityResult
    from .sweep import SliceResult, SliceSpec, Sweep

MARKER = "robustness"
SLICE_PARAM = "robustexplain_slice"


@dataclass(frozen=True)
class SliceParam:
    """The parameter a marked test is expanded over: one model × one perturbation kind (or overall)."""

    model: str  # "" when no model name is configured (custom explainer, or none at all)
    kind: str

    def __str__(self) -> str:
        return f"{self.model}-{self.kind}" if self.model else self.kind


@dataclass
class ItemPlan:
    """What the run knows about one expanded marked item."""

    nodeid: str
    gate: GateSettings
    param: SliceParam
    custom_explainer: bool
    slice_id: str = ""
    model: str = ""


@dataclass(frozen=True)
class Robustness:
    """The finished result of one test item's slice (the ``robustness`` fixture's value)."""

    model: str
    kind: str  # a perturbation kind, or "overall"
    pairs: tuple[PairResult, ...]
    controls: tuple[PairResult, ...]
    verdict: Verdict
    intervals: Mapping[str, Interval]  # "combined" and each metric
    thresholds: Mapping[str, float]
    worst: tuple[PairResult, ...]
    trivial: int
    cancelled: int
    noise_floor: Interval | None
    perturbations: tuple[PerturbationResult, ...] = ()
    regression: NonInferiorityResult | None = None  # against --robustexplain-baseline, when given
    swaps: tuple[PairResult, ...] = ()  # cross-user controls of the slice's cases

    @property
    def guard(self) -> GuardResult | None:
        """The cross-user control's finding (None with ``guard="off"``)."""
        return self.verdict.guard

    @property
    def passed(self) -> bool:
        return self.verdict.outcome == PASS

    @property
    def combined(self) -> Interval:
        return self.intervals["combined"]

    @property
    def failures(self) -> tuple[PairResult, ...]:
        """Pairs that could not be scored because an explanation failed (scored 0)."""
        return tuple(p for p in self.pairs if p.failure is not None)


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


def configured_models(settings: Settings) -> tuple[str, ...]:
    """The models to test; the template and callable backends need no model name."""
    if settings.model:
        return settings.model
    if settings.backend == "template":
        return ("template",)
    if settings.backend == "callable":
        return ("",)
    return ()


def no_model_reason() -> str:
    return ("no model configured for robustness tests: pass --robustexplain-model=NAME (e.g. llama3.1:8b "
            "served by Ollama), set ROBUSTEXPLAIN_MODEL or the ini key robustexplain_model, or use "
            "--robustexplain-backend=template for the built-in non-LLM explainer")


class RobustnessRun:
    """State of the robustness run for one pytest session (one per process)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.plans: dict[str, ItemPlan] = {}
        self.model_infos: dict[str, ModelInfo] = {}
        self.gates: list[GateResult] = []
        self.collected: dict[tuple[Any, ...], PairResult] = {}  # pairs reported by items (any process)
        self.counters: dict[str, int] = {}
        self.started = time.monotonic()
        self.started_at = _now()
        self._dataset: Dataset | None = None
        self._sweep: Sweep | None = None
        self._explainers: dict[str, Explainer] = {}
        self._results: dict[str, Robustness] = {}
        self._progress: Callable[[], None] | None = None
        self._baseline: RunResult | None = None
        self._donor_pool: DonorPool | None = None
        self._notes: set[str] = set()  # warnings said once per run
        self._specs: dict[str, SliceSpec] = {}  # slice id -> its spec
        self.lazy = hasattr(config, "workerinput")  # xdist workers plan only the items they run

    # ------------------------------------------------------------------------------- collection
    def gate_for(self, nodeid: str, marker: pytest.Mark) -> GateSettings:
        """The test's gate settings; a bad keyword is a usage error naming the test."""
        try:
            return apply_marker(self.settings, marker.kwargs, nodeid=nodeid, args=marker.args)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None

    def params_for(self, gate: GateSettings) -> list[SliceParam]:
        """One parameter per model × kind, plus ``overall`` when the test covers several kinds."""
        from .engine import gate_slices

        models = configured_models(self.settings) or ("",)
        return [SliceParam(model, kind) for model in models for kind in gate_slices(gate)]

    def param_id(self, param: SliceParam) -> str:
        return param.kind if len(configured_models(self.settings)) <= 1 else str(param)

    def plan_items(self, items: Sequence[pytest.Item]) -> None:
        """Register every expanded marked item; start the sweep unless this is an xdist worker."""
        for item in items:
            marker = item.get_closest_marker(MARKER)
            param = _slice_param(item)
            if marker is None or param is None:
                continue
            gate = self.gate_for(item.nodeid, marker)
            custom = _overrides_explainer(item)
            self.plans[item.nodeid] = ItemPlan(item.nodeid, gate, param, custom_explainer=custom)
        if not self.plans:
            return
        uncovered = [p.nodeid for p in self.plans.values() if not p.custom_explainer]
        if self.settings.backend == "callable" and uncovered:
            # One usage error before anything runs, instead of the same error (and traceback) per item.
            raise pytest.UsageError(
                f"robustexplain: --robustexplain-backend=callable needs the `explainer` fixture overridden "
                f"in a conftest.py; {len(uncovered)} marked item(s) have none, e.g. {uncovered[0]}")
        self._load_baseline()
        if not configured_models(self.settings):
            self._no_model(items)
            return
        if not self.lazy:
            for plan in self.plans.values():
                if not plan.custom_explainer and plan.param.model:
                    self._add_slice(plan)
            self._say_plan_size()
            self.sweep_instance()

    def _say_plan_size(self) -> None:
        """Before a large run starts: how many calls it plans and how to shrink it."""
        from .engine import large_plan_note, max_calls

        specs = [self._spec(plan) for plan in self.plans.values() if plan.slice_id]
        note = large_plan_note(max_calls(specs), flag_prefix="--robustexplain-")
        if note:
            self._say(note)

    def _load_baseline(self) -> None:
        """Read --robustexplain-baseline once; refuse a baseline whose numbers are not comparable."""
        path = self.settings.baseline
        if path is None:
            return
        from .metrics import metric_signature
        from .report.json_report import read_json

        try:
            baseline = read_json(path)
        except RobustExplainError as exc:
            raise pytest.UsageError(f"robustexplain: --robustexplain-baseline: {exc}") from None
        current = metric_signature(weights=self.settings.weights)
        if baseline.signature != current:
            raise pytest.UsageError(
                f"robustexplain: baseline {path} was scored with a different metric signature, so its "
                f"numbers are not comparable with this run's.\n  baseline: {baseline.signature}\n"
                f"  this run: {current}\nRe-create the baseline with this version "
                "(--robustexplain-save-baseline) or match the weights/tagger it used.")
        self._baseline = baseline

    def _regression(self, plan: ItemPlan, pairs: Sequence[PairResult]) -> NonInferiorityResult | None:
        """Paired non-inferiority of this slice against the baseline's matching pairs."""
        if self._baseline is None:
            return None
        from .stats import non_inferiority

        models = {p.key.model for p in self._baseline.pairs}
        # Same model name when the baseline has it; a single-model baseline is compared whatever its name
        # (the usual case: "this release's model/prompt vs the last release's").
        model = plan.model if plan.model in models or len(models) != 1 else next(iter(models))
        kinds = {p.key.kind for p in pairs}
        base = [p for p in self._baseline.pairs if p.key.model == model and p.key.kind in kinds]
        try:
            return non_inferiority(base, pairs, margin=self.settings.max_regression, alpha=plan.gate.alpha)
        except ValueError as exc:
            # Nothing to compare (a kind or severity added since the baseline): say so, never a traceback;
            # a regression gate cannot pass on pairs it has not seen.
            raise DataError(f"no pair matches this slice ({len(base)} baseline pairs of these kinds, "
                            f"{len(pairs)} here): {exc}; save a new baseline with "
                            "--robustexplain-save-baseline", source=str(self.settings.baseline)) from None

    def _no_model(self, items: Sequence[pytest.Item]) -> None:
        """Without a model, marked tests are skipped (or an error, with require-model); tests whose
        ``explainer`` fixture is overridden bring their own and still run."""
        unserved = {nodeid for nodeid, plan in self.plans.items() if not plan.custom_explainer}
        if not unserved:
            return
        if self.settings.require_model:
            raise pytest.UsageError(no_model_reason() + " (--robustexplain-require-model is set, so "
                                    "robustness tests may not be skipped)")
        skip = pytest.mark.skip(reason=no_model_reason())
        for item in items:
            if item.nodeid in unserved:
                item.add_marker(skip)
                del self.plans[item.nodeid]

    # ------------------------------------------------------------------------------- the sweep
    @property
    def dataset(self) -> Dataset:
        if self._dataset is None:
            from .engine import load_configured_dataset

            try:
                self._dataset = load_configured_dataset(self.settings)
            except RobustExplainError as exc:
                raise pytest.UsageError(f"robustexplain: {exc}") from None
        return self._dataset

    def cases_for(self, gate: GateSettings) -> tuple[EvalCase, ...]:
        from .engine import take_cases

        cases, note = take_cases(self.dataset.cases, gate.users)
        if note:
            self._say(note)
        return cases

    def _say(self, note: str) -> None:
        """A note on the terminal, once per run (a size or a setting the user should know about)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if note not in self._notes and reporter is not None:
            self._notes.add(note)
            reporter.ensure_newline()
            reporter.write_line(f"robustexplain: {note}", yellow=True)

    def sweep_instance(self) -> Sweep:
        """The sweep, created and started on first use."""
        if self._sweep is None:
            from .metrics import Scorer
            from .sweep import Sweep

            models = max(1, len(configured_models(self.settings)))
            self._sweep = Sweep({}, self.dataset.catalog, scorer=Scorer(weights=self.settings.weights),
                                window=2 * self.settings.concurrency * models)
            self._sweep.start()
            for model in configured_models(self.settings):
                if model:
                    self._register(model, self._build_explainer(model))
            for plan in self.plans.values():
                if plan.slice_id and not plan.custom_explainer:
                    self._sweep.add_slice(self._spec(plan))
        return self._sweep

    def _build_explainer(self, model: str) -> Explainer:
        """The configured explainer for ``model``; a bad backend setting (an unknown prompt placeholder,
        an unusable host) is one usage error naming it."""
        from .engine import build_explainer

        custom = self.config.hook.pytest_robustexplain_make_explainer(settings=self.settings, model=model)
        try:
            return build_explainer(self.settings, model, cache_dir=self._cache_dir(), custom=custom,
                                   cross_process=self.lazy)
        except RobustExplainError as exc:
            raise pytest.UsageError(f"robustexplain: {exc}") from None

    def _cache_dir(self) -> Path:
        from .engine import cache_directory

        # The rootdir, where `robustexplain run` is usually started: both share the cached answers.
        return cache_directory(self.settings, self.config.rootpath)

    def _register(self, model: str, explainer: Explainer) -> None:
        """Add an explainer and preflight it once (a dead server or missing model fails here, once)."""
        assert self._sweep is not None
        if model in self._explainers:
            return
        try:
            info = self._sweep.run_coroutine(explainer.preflight())
        except RobustExplainError as exc:
            raise pytest.UsageError(f"robustexplain: {exc}") from None
        self._explainers[model] = explainer
        self.model_infos[model] = info
        self._sweep.add_explainer(model, explainer)

    def explainer_for(self, model: str) -> Explainer:
        self.sweep_instance()
        return self._explainers[model]

    def _spec(self, plan: ItemPlan) -> SliceSpec:
        """The item's sweep slice, built once (the plan-size note and the sweep both need it)."""
        spec = self._specs.get(plan.slice_id)
        if spec is not None:
            return spec
        from .engine import donor_pool, guarded, slice_spec

        kind = None if plan.param.kind == OVERALL else plan.param.kind
        if self._donor_pool is None and guarded(plan.gate):
            self._donor_pool = donor_pool(self.dataset)
        spec = slice_spec(self.settings, plan.gate, slice_id=plan.slice_id, model=plan.model,
                          cases=self.cases_for(plan.gate), kind=kind, donor_pool=self._donor_pool)
        self._specs[plan.slice_id] = spec
        return spec

    def _add_slice(self, plan: ItemPlan, model: str | None = None) -> None:
        plan.model = model or plan.param.model
        plan.slice_id = f"{plan.nodeid}::{plan.model}"
        if self._sweep is not None:
            self._sweep.add_slice(self._spec(plan))

    # ------------------------------------------------------------------------------- running items
    def result_for(self, item: pytest.Item) -> Robustness:
        """Wait for the item's slice and decide its verdict (once per item)."""
        cached = self._results.get(item.nodeid)
        if cached is not None:
            return cached
        plan = self.plans[item.nodeid]
        sweep = self.sweep_instance()
        if not plan.slice_id:
            self._start_lazily(item, plan)
        try:
            sliced = sweep.wait(plan.slice_id, poll=self._progress)
        except RobustExplainError as exc:
            raise BackendError(f"{plan.model}: {exc}") from None  # one message, not a chain of three
        result = self._decide(plan, sliced)
        self._results[item.nodeid] = result
        return result

    def _start_lazily(self, item: pytest.Item, plan: ItemPlan) -> None:
        model = plan.param.model
        if plan.custom_explainer:
            from .explainers.callable import wrap_explainer

            request: pytest.FixtureRequest = item._request  # type: ignore[attr-defined]
            explainer = wrap_explainer(request.getfixturevalue("explainer"), timeout=self.settings.timeout)
            model = explainer.model
            if model not in self._explainers:
                self._register(model, explainer)
        elif not model:
            raise pytest.UsageError(f"{item.nodeid}: --robustexplain-backend=callable needs the "
                                    "`explainer` fixture overridden in a conftest.py")
        elif model not in self._explainers:
            self._register(model, self._build_explainer(model))
        self._add_slice(plan, model)

    def perturbations_for(self, item: pytest.Item) -> list[PerturbationResult]:
        """The planned perturbations of a marked item, or the run's default plan for any other test."""
        plan = self.plans.get(item.nodeid)
        if plan is not None and plan.slice_id and self._sweep is not None:
            return self._sweep.perturbations_for(plan.slice_id)
        from .perturbations import apply_perturbation

        gate = plan.gate if plan is not None else apply_marker(self.settings, {}, nodeid=item.nodeid)
        kinds = gate.perturbations
        if plan is not None and plan.param.kind != OVERALL:
            kinds = (plan.param.kind,)
        out = []
        for case in self.cases_for(gate):
            for kind in kinds:
                for severity in gate.severities:
                    for repeat in range(gate.repeats):
                        result = apply_perturbation(case.history, kind, severity,
                                                    catalog=self.dataset.catalog, seed=self.settings.seed,
                                                    item_id=case.item_id, repeat=repeat)
                        if not result.identical:
                            out.append(result)
        return out

    def _decide(self, plan: ItemPlan, sliced: SliceResult) -> Robustness:
        from . import stats
        from .engine import decide

        kind = None if plan.param.kind == OVERALL else plan.param.kind
        thresholds = plan.gate.thresholds(kind)
        pairs = sliced.pairs
        verdict = decide(plan.gate, sliced, kind)
        regression = self._regression(plan, pairs)
        if regression is not None and not regression.passed and verdict.outcome != FAIL:
            # Part of the verdict, so that every writer (JSON gates, Markdown and step summary, annotations,
            # the -q line, JUnit) says FAIL with this reason, not only the item.
            verdict = replace(verdict, outcome=FAIL, message=(
                f"Regression against baseline {self.settings.baseline}: {regression.message} "
                f"Without the baseline: {verdict.message}"))
        intervals = {c.quantity: c.interval for c in verdict.checks}
        users = [p.key.user_id for p in pairs]
        for quantity in ("combined", *METRICS):
            if quantity not in intervals:
                intervals[quantity] = stats.cluster_interval([p.metric(quantity) for p in pairs], users,
                                                             confidence=1 - plan.gate.alpha)
        worst = tuple(sorted(pairs, key=lambda p: (p.combined, p.key))[:3])
        gate_result = GateResult(plan.nodeid, plan.param.kind, plan.model, verdict, thresholds,
                                 gate_scope(pairs))
        self.gates.append(gate_result)
        for pair in (*sliced.scored, *sliced.controls, *sliced.swaps):  # the run's weights in reports
            self.collected[_pair_ident(pair)] = pair
        return Robustness(
            model=plan.model, kind=plan.param.kind, pairs=tuple(pairs), controls=tuple(sliced.controls),
            verdict=verdict, intervals=intervals, thresholds=thresholds, worst=worst,
            trivial=sliced.trivial, cancelled=sliced.cancelled,
            noise_floor=stats.noise_floor(sliced.controls) if sliced.controls else None,
            perturbations=tuple(self._sweep.perturbations_for(plan.slice_id)) if self._sweep else (),
            regression=regression, swaps=tuple(sliced.swaps))

    def enforce(self, item: pytest.Item) -> None:
        """Fail the item when its gate failed; warn or pass an INCONCLUSIVE verdict per the policy."""
        from .report.failure import failure_message
        from .stats import apply_policy

        result = self.result_for(item)
        plan = self.plans[item.nodeid]
        item.user_properties.extend(junit_properties(result))
        passed, warn = apply_policy(result.verdict, plan.gate.inconclusive)
        if warn:  # an INCONCLUSIVE verdict under the "warn" policy, or a fragile PASS
            from .errors import RobustExplainWarning

            item.warn(RobustExplainWarning(f"{item.nodeid}: {result.verdict.message}"))
        if not passed:
            pytest.fail(failure_message(result, model_info=self.model_infos.get(result.model),
                                        verbose=self.config.get_verbosity() > 0), pytrace=False)

    def set_progress(self, callback: Callable[[], None] | None) -> None:
        self._progress = callback

    # ------------------------------------------------------------------------------- the end
    def record_remote(self, payload: Mapping[str, Any]) -> None:
        """Merge what an xdist worker's item report carried (decoded as the JSON report is)."""
        from .report.json_report import gate_from_dict, pair_from_dict

        source = "xdist worker report"
        for data in payload.get("pairs", []):
            pair = pair_from_dict(data, source=source)
            self.collected[_pair_ident(pair)] = pair
        if "gate" in payload:
            self.gates.append(gate_from_dict(payload["gate"], source=source))
        for name, info in payload.get("models", {}).items():
            from .explainers.base import ModelInfo

            self.model_infos.setdefault(name, ModelInfo(**info))

    def item_payload(self, item: pytest.Item) -> dict[str, Any] | None:
        """What an item's report carries to the controller: its pairs, gate and model facts."""
        result = self._results.get(item.nodeid)
        if result is None:
            return None
        from dataclasses import asdict

        gate = next(g for g in reversed(self.gates) if g.nodeid == item.nodeid)
        info = self.model_infos.get(result.model)
        # The run-weighted versions (what the reports show), not the slice's own re-weighting.
        pairs = [self.collected[_pair_ident(p)] for p in (*result.pairs, *result.controls, *result.swaps)]
        from .report.summary import plain

        # JSON-native, so the controller decodes it with the JSON report's own reader.
        return plain({"pairs": [p.to_dict() for p in pairs], "gate": gate.to_dict(),
                      "models": {result.model: asdict(info)} if info is not None else {}})

    def counters_snapshot(self) -> dict[str, int]:
        return self._sweep.counters.to_dict() if self._sweep is not None else {}

    def merge_counters(self, counters: Mapping[str, int]) -> None:
        for name, value in counters.items():
            self.counters[name] = self.counters.get(name, 0) + int(value)

    def run_result(self) -> RunResult | None:
        """The whole run as one record for the reports; None when no robustness test ran."""
        if not self.collected and not self.gates:
            return None

        from .engine import model_record
        from .metrics import metric_signature

        counters = dict(self.counters)
        for name, value in self.counters_snapshot().items():
            counters[name] = counters.get(name, 0) + value
        return RunResult(
            signature=metric_signature(weights=self.settings.weights), seed=self.settings.seed,
            models=[model_record(name, info) for name, info in self.model_infos.items()],
            settings=self.settings.to_dict(),
            pairs=sorted(self.collected.values(), key=lambda p: p.key),
            gates=_unique_gates(self.gates), calls=counters,
            timings={"wall_s": round(time.monotonic() - self.started, 3)},
            started_at=self.started_at, finished_at=_now(), package_version=__version__)

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.close()
            self._sweep = None


def junit_properties(result: Robustness) -> list[tuple[str, str]]:
    """Scores as JUnit XML properties, so CI dashboards can chart them per test item."""
    props = [("robustexplain_model", result.model), ("robustexplain_slice", result.kind),
             ("robustexplain_outcome", result.verdict.outcome),
             ("robustexplain_pairs", str(len(result.pairs)))]
    for quantity, interval in result.intervals.items():
        props.append((f"robustexplain_{quantity}", f"{interval.mean:.4f}"))
        props.append((f"robustexplain_{quantity}_interval", f"[{interval.low:.4f}, {interval.high:.4f}]"))
    guard = result.guard
    if guard is not None:
        from .report.summary import guard_properties

        props.extend((f"robustexplain_{name}", value) for name, value in guard_properties(guard))
    return props


def _slice_param(item: pytest.Item) -> SliceParam | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    value = callspec.params.get(SLICE_PARAM)
    return value if isinstance(value, SliceParam) else None


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


def _pair_ident(pair: PairResult) -> tuple[Any, ...]:
    return (pair.key,)


def _unique_gates(gates: Sequence[GateResult]) -> list[GateResult]:
    seen: dict[str, GateResult] = {}
    for gate in gates:
        seen[gate.nodeid] = gate
    return list(seen.values())


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


