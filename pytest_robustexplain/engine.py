"""Pieces of a robustness run that do not depend on pytest, shared by the plugin and the CLI.

From resolved :class:`~pytest_robustexplain.settings.Settings`: the dataset, the explainers (with the
response cache), and :func:`run_slices`, which runs gated slices through the sweep and returns the
whole run as a :class:`~pytest_robustexplain.results.RunResult` (the ``robustexplain run`` command).
Heavy modules (numpy, the metrics, the sweep) are imported inside the functions.
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, DataError
from .results import CONTROL_KIND, OVERALL, SWAP_KIND, GateResult, gate_scope

if TYPE_CHECKING:
    from .data import Catalog, Dataset, EvalCase
    from .donors import DonorPool
    from .explainers.base import Explainer, ModelInfo
    from .results import RunResult, Verdict
    from .settings import GateSettings, Settings
    from .sweep import Counters, SliceResult, SliceSpec, Sweep


DEFAULT_CACHE_DIR = ".robustexplain-cache"  # one response cache for `pytest` and `robustexplain run`


def cache_directory(settings: Settings, base: Path | None = None) -> Path:
    """``cache_dir`` when set, else ``<base>/.robustexplain-cache`` (``base``: the pytest rootdir, or the
    directory ``robustexplain run`` is started in)."""
    return settings.cache_dir or Path(os.path.abspath(base or Path.cwd())) / DEFAULT_CACHE_DIR


def load_configured_dataset(settings: Settings) -> Dataset:
    """The dataset the settings name: data files, a dataset directory (MovieLens-style or our own
    histories/catalog/cases files), or the bundled synthetic set.

    Every user's history is loaded (donors for the cross-user controls come from all of them). Cases that
    are drawn rather than listed in a cases file come in a seeded order, so the first ``users`` of them
    (20 by default, on every dataset) are a seeded sample; a cases file keeps its own order.
    """
    from . import data

    if settings.histories is not None:
        if settings.catalog is None:
            raise ConfigError(f"{settings.sources.get('histories', 'histories')}: a histories file needs a "
                              "catalog file too (--robustexplain-catalog)")
        loaded = data.load_dataset(settings.histories, settings.catalog, settings.cases, seed=settings.seed)
        if settings.cases is None:
            loaded = seeded_cases(loaded, settings.seed)
    elif isinstance(settings.dataset, Path):
        if (settings.dataset / "ratings.csv").is_file():
            movielens = data.load_movielens(settings.dataset, seed=settings.seed,
                                            max_history=settings.max_history)
            return seeded_cases(movielens, settings.seed)
        loaded = data.load_dataset_dir(settings.dataset, seed=settings.seed)
    else:
        loaded = data.default_dataset()
    return recent_only(loaded, settings.max_history)


def recent_only(dataset: Dataset, max_history: int | None) -> Dataset:
    """Every history cut to its ``max_history`` most recent interactions (what the model is shown)."""
    if max_history is None or all(len(h) <= max_history for h in dataset.histories.values()):
        return dataset
    from dataclasses import replace
    from types import MappingProxyType

    from .data import EvalCase, UserHistory

    def cut(history: UserHistory) -> UserHistory:
        return UserHistory(history.user_id, history.interactions[-max_history:])

    histories = {uid: cut(h) for uid, h in dataset.histories.items()}
    cases = tuple(EvalCase(histories.get(c.user_id) or cut(c.history), c.item) for c in dataset.cases)
    return replace(dataset, histories=MappingProxyType(histories), cases=cases)


def take_cases(cases: Sequence[EvalCase], users: int | None) -> tuple[tuple[EvalCase, ...], str | None]:
    """The first ``users`` cases, and a note when the dataset has fewer than asked for."""
    if users is None or users <= len(cases):
        return tuple(cases[:users] if users else cases), None
    return tuple(cases), (f"users={users} asked for, but the dataset has {len(cases)} evaluation cases: "
                          f"running {len(cases)}")


def seeded_cases(dataset: Dataset, seed: int) -> Dataset:
    """The dataset with its cases in a seeded order that does not depend on the file's order."""
    import hashlib
    from dataclasses import replace

    def key(case: EvalCase) -> bytes:
        return hashlib.sha256(f"cases\x1f{seed}\x1f{case.user_id}\x1f{case.item_id}".encode()).digest()

    return replace(dataset, cases=tuple(sorted(dataset.cases, key=key)))


def backend_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of the configured backend, from the settings."""
    s = settings
    if s.backend == "template":
        return {}
    options: dict[str, Any] = dict(
        host=s.host, temperature=s.temperature, seed=s.seed, num_predict=s.num_predict,
        concurrency=s.concurrency, connect_timeout=s.connect_timeout, read_timeout=s.timeout,
        max_attempts=s.retries + 1)  # --robustexplain-retries counts retries after the first attempt
    if s.backend == "ollama":
        options["num_ctx"] = s.num_ctx
    else:
        options["api_key"] = os.environ.get(s.api_key_env) or None
    if s.prompt is not None:
        from .explainers.prompt import PromptTemplate

        options["prompt"] = PromptTemplate.from_file(s.prompt)
    return options


def build_explainer(settings: Settings, model: str, *, cache_dir: Path, custom: Explainer | None = None,
                    cross_process: bool = False) -> Explainer:
    """The explainer for ``model`` (``custom`` when a hook supplied one), behind the response cache.

    The template explainer is never cached: it is instant, so caching it would only cost disk.
    """
    from .explainers import make_explainer
    from .explainers.cache import CachedExplainer, ResponseCache

    explainer = custom if custom is not None else make_explainer(settings.backend, model,
                                                                 **backend_options(settings))
    if settings.cache == "off" or explainer.backend == "template":
        return explainer
    cache = ResponseCache(cache_dir, settings.cache)
    cache.check_writable()  # before a single model call is spent
    return CachedExplainer(explainer, cache, cross_process=cross_process)


# ---------------------------------------------------------------------------------------------------
# Running slices outside pytest (the ``robustexplain run`` command; reusable by the plugin).
# ---------------------------------------------------------------------------------------------------

class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_slices`: ``partial`` is the run up to that moment.

    A KeyboardInterrupt subclass, so code that does not know about it still stops as on Ctrl-C. The
    finished pairs' explanations are already in the response cache; rerunning resumes from them.
    """

    def __init__(self, partial: RunResult) -> None:
        super().__init__("interrupted")
        self.partial = partial


@dataclass(frozen=True)
class GatedSlice:
    """A slice of the sweep and how its verdict is recorded: test id, slice label and gate settings."""

    spec: SliceSpec
    nodeid: str
    slice: str  # a perturbation kind, or OVERALL for all the spec's kinds together
    gate: GateSettings


def gate_slices(gate: GateSettings) -> list[str]:
    """What one gate decides: each of its perturbation kinds, plus ``overall`` when it has several.

    The one definition both entry points use: a marked test is expanded into these items, and
    ``robustexplain run`` gates the same slices, so the two never give different answers.
    """
    kinds = list(gate.perturbations)
    return [*kinds, OVERALL] if len(kinds) > 1 else kinds


def guarded(gate: GateSettings) -> bool:
    """Whether a gate needs the cross-user controls (the guard, or the grounding gate that reads them)."""
    return gate.guard != "off" or gate.min_history_reference is not None


def slice_spec(settings: Settings, gate: GateSettings, *, slice_id: str, model: str,
               cases: Sequence[EvalCase], kind: str | None = None,
               donor_pool: DonorPool | None = None) -> SliceSpec:
    """The sweep slice of one gate: its cases × kinds (``kind`` alone, or all the gate's kinds when
    None) × severities × repeats, with the noise floor, the cross-user controls (donors drawn from
    ``donor_pool``) and the sequential gate the settings ask for."""
    from .sweep import SequentialConfig, SliceSpec

    sequential = None
    if gate.decision == "sequential":
        sequential = SequentialConfig(gate.thresholds(kind), alpha=gate.alpha, max_users=gate.max_users)
    noise_floor = settings.temperature > 0 if gate.noise_floor == "auto" else gate.noise_floor == "on"
    # A test's own weights only re-weight ρ of its slice; the run's weights stay the reports' ρ.
    weights = gate.weights if gate.weights != settings.weights else None
    donors = donor_pool.donors(cases, settings.seed) if donor_pool is not None and guarded(gate) else {}
    return SliceSpec(slice_id=slice_id, model=model, cases=tuple(cases),
                     kinds=gate.perturbations if kind is None else (kind,), severities=gate.severities,
                     repeats=gate.repeats, seed=settings.seed, noise_floor=noise_floor,
                     sequential=sequential, weights=weights, donors=donors)


def donor_pool(dataset: Dataset) -> DonorPool:
    """Every user of the dataset as a potential donor for the cross-user controls."""
    from .donors import DonorPool

    return DonorPool(dataset.histories, dataset.catalog)


def decide(gate: GateSettings, sliced: SliceResult, kind: str | None = None) -> Verdict:
    """The verdict of a finished slice: the sequential gate's when it ran one, else ``stats.gate``.

    Raises DataError when the slice has no scored pair (every perturbation left the histories
    unchanged): there is nothing to decide on, and that must not read as a PASS.
    """
    from . import stats

    if not sliced.pairs:
        raise DataError(f"model {sliced.spec.model!r}: no pair to score in slice {sliced.spec.slice_id!r}: "
                        f"all {sliced.trivial} planned perturbations left the history unchanged "
                        "(histories too short for these kinds and severities?)")
    if sliced.gate is not None:
        verdict = sliced.gate.verdict(sliced.pairs)
    else:
        verdict = stats.gate(sliced.pairs, thresholds=gate.thresholds(kind), mode=gate.decision,
                             alpha=gate.alpha, inconclusive_policy=gate.inconclusive)
    verdict = with_attacks(verdict, gate, sliced)
    if not sliced.spec.donors:
        return verdict
    return with_guard(verdict, gate, sliced, kind)


def with_attacks(verdict: Verdict, gate: GateSettings, sliced: SliceResult) -> Verdict:
    """The verdict with the adversarial kinds' outcomes (prompt injection, shilling), when the slice ran
    them: an attack that succeeded more often than its limit fails the gate, with the reason."""
    from dataclasses import replace

    from .adversarial import ATTACK_KINDS, INJECTION, SHILLING, describe_attack, evaluate_attacks
    from .results import FAIL

    if not any(k in ATTACK_KINDS for k in sliced.spec.kinds):
        return verdict
    attacks = evaluate_attacks(sliced.pairs, {INJECTION: gate.max_injection_rate,
                                              SHILLING: gate.max_hijack_rate}, confidence=1 - gate.alpha)
    failed = [a for a in attacks if a.outcome == FAIL]
    if not failed:
        return replace(verdict, attacks=attacks)
    reasons = " ".join(f"Security FAIL: {describe_attack(a)}." for a in failed)
    return replace(verdict, outcome=FAIL, attacks=attacks,
                   message=f"{reasons} Stability alone: {verdict.message}")


def with_guard(verdict: Verdict, gate: GateSettings, sliced: SliceResult, kind: str | None) -> Verdict:
    """The verdict with the cross-user control's finding: INSENSITIVE (guard "fail") unless the gate
    already failed; the grounding gate, when set, fails a gate whose explanations do not mention the
    history often enough."""
    from dataclasses import replace

    from . import guard as guard_mod
    from . import stats
    from .results import FAIL, INSENSITIVE
    from .sweep import reweighted

    settings = guard_mod.GuardSettings(policy=gate.guard, min_sensitivity=gate.min_sensitivity,
                                       max_insensitive_share=gate.max_insensitive_share,
                                       min_history_reference=gate.min_history_reference, alpha=gate.alpha)
    floor = stats.noise_floor(sliced.controls)
    swaps = [reweighted(s, sliced.spec.weights) for s in sliced.swaps]
    found = guard_mod.evaluate(sliced.pairs, swaps, combined_threshold=gate.combined_threshold(kind),
                               settings=settings, floor=floor.mean if floor is not None else 1.0)
    outcome, notes = verdict.outcome, []
    if found.outcome == INSENSITIVE and gate.guard != "off":
        notes.append(f"{'INSENSITIVE' if gate.guard == 'fail' else 'Guard warning'}: {found.message}")
        if gate.guard == "fail" and outcome != FAIL:
            outcome = INSENSITIVE
    if found.grounding_outcome == FAIL:
        notes.append(f"Grounding FAIL: {guard_mod.grounding_message(found)}")
        outcome = FAIL if outcome != INSENSITIVE else outcome
    # The stability verdict stays readable after the guard's finding, labelled so that an INSENSITIVE
    # gate never reads "PASS" at the start of its reason.
    message = " ".join([*notes, f"Stability alone: {verdict.message}"]) if notes else verdict.message
    return replace(verdict, outcome=outcome, message=message, guard=found)


def model_record(name: str, info: ModelInfo) -> dict[str, Any]:
    """Model facts for ``RunResult.models`` under the name the pairs carry (the server's resolved name,
    when different, goes to ``extra``)."""
    from dataclasses import asdict

    data = asdict(info)
    if info.name != name:
        data["extra"] = {**data.get("extra", {}), "resolved_name": info.name}
        data["name"] = name
    return data


def run_slices(settings: Settings, slices: Sequence[GatedSlice], explainers: Mapping[str, Explainer],
               catalog: Catalog, *, poll: Callable[[Counters], None] | None = None,
               interval: float = 0.25, extra_settings: Mapping[str, Any] | None = None) -> RunResult:
    """Preflight every explainer, run the slices through one :class:`~pytest_robustexplain.sweep.Sweep`
    and gate each: the whole run as a :class:`RunResult`.

    ``poll`` gets the sweep's counters every ``interval`` seconds while slices run (a progress bar; it
    may raise KeyboardInterrupt). ``extra_settings`` are recorded next to the settings (e.g. the
    protocol). On KeyboardInterrupt the sweep is stopped and :class:`SweepInterrupted` carries the
    partial run (``settings["partial"]`` true: finished pairs and the gates already decided).
    BackendError / CacheMissError / ConfigError from preflight or from the calls propagate.
    """
    from .metrics import Scorer
    from .sweep import Sweep

    started, started_at = time.monotonic(), _utc_now()
    sweep = Sweep(explainers, catalog, scorer=Scorer(weights=settings.weights))
    infos: dict[str, ModelInfo] = {}
    gates: list[GateResult] = []
    record = dict(extra_settings or {})

    def result(partial: bool) -> RunResult:
        return _run_result(settings, sweep, infos, gates, started, started_at,
                           {**record, **({"partial": True, "pairs_planned": sweep.counters.pairs_total}
                                         if partial else {})})

    def gate(entry: GatedSlice, sliced: SliceResult) -> None:
        kind = None if entry.slice == OVERALL else entry.slice
        gates.append(GateResult(entry.nodeid, entry.slice, entry.spec.model,
                                decide(entry.gate, sliced, kind), entry.gate.thresholds(kind),
                                gate_scope(sliced.pairs)))

    try:
        sweep.start()
        for model, explainer in explainers.items():
            infos[model] = sweep.run_coroutine(explainer.preflight())
        for entry in slices:
            sweep.add_slice(entry.spec)
        tick = None if poll is None else (lambda: poll(sweep.counters))
        for entry in slices:
            gate(entry, sweep.wait(entry.spec.slice_id, poll=tick, interval=interval))
    except KeyboardInterrupt:
        sweep.close()  # first: pairs that finish while the loop winds down belong in the partial report
        # Every slice that finished is gated, whether or not its wait had returned when Ctrl-C came: the
        # partial report depends on what finished, not on when the main thread last looked.
        gated = {g.nodeid for g in gates}
        for entry in slices:
            done = sweep.finished(entry.spec.slice_id)
            if entry.nodeid not in gated and done is not None and done.pairs:
                gate(entry, done)
        raise SweepInterrupted(result(partial=True)) from None
    finally:
        sweep.close()
    return result(partial=False)


def _run_result(settings: Settings, sweep: Sweep, infos: Mapping[str, ModelInfo], gates: Sequence[GateResult],
                started: float, started_at: str, extra: Mapping[str, Any]) -> RunResult:
    from . import __version__
    from .metrics import metric_signature
    from .results import RunResult

    return RunResult(
        signature=metric_signature(weights=settings.weights), seed=settings.seed,
        models=[model_record(name, info) for name, info in infos.items()],
        settings={**settings.to_dict(), **extra}, pairs=sweep.all_results(), gates=list(gates),
        calls=sweep.counters.to_dict(), timings={"wall_s": round(time.monotonic() - started, 3)},
        started_at=started_at, finished_at=_utc_now(), package_version=__version__)


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


LARGE_PLAN_CALLS = 2000  # above this, a run says how big it is and how to shrink it before it starts


def max_calls(specs: Sequence[SliceSpec]) -> int:
    """Model calls the specs need at most (nothing cached, no perturbation trivial), shared pairs,
    originals and controls counted once: cheap, no perturbation is computed."""
    pairs: set[tuple[Any, ...]] = set()
    originals: set[tuple[Any, ...]] = set()
    for spec in specs:
        for case in spec.cases:
            originals.add((spec.model, case.user_id, case.item_id, spec.seed))
            for repeat in range(spec.repeats):
                pairs.update((spec.model, case.user_id, case.item_id, kind, severity, repeat, spec.seed)
                             for kind in spec.kinds for severity in spec.severities)
                if spec.noise_floor:
                    pairs.add((spec.model, case.user_id, case.item_id, CONTROL_KIND, 0, repeat, spec.seed))
            if (case.user_id, case.item_id) in spec.donors:
                pairs.add((spec.model, case.user_id, case.item_id, SWAP_KIND, 0, 0, spec.seed))
    return len(pairs) + len(originals)


def large_plan_note(calls: int, *, flag_prefix: str = "--") -> str | None:
    """What a run above :data:`LARGE_PLAN_CALLS` model calls says before it starts, or None."""
    if calls <= LARGE_PLAN_CALLS:
        return None
    return (f"this run plans up to {calls:,} model calls (above {LARGE_PLAN_CALLS:,}); on a real model that "
            f"can take hours. Shrink it with {flag_prefix}users=N, {flag_prefix}severities=1,3,5 or "
            f"{flag_prefix}perturbations=..., or stop early with {flag_prefix}decision=sequential; the "
            "response cache makes a rerun free.")


@dataclass(frozen=True)
class SlicePlan:
    """What a slice will cost, before any call: its pairs and the model calls they need at most."""

    slice_id: str
    model: str
    pairs: int  # perturbation pairs to run
    trivial: int  # planned pairs skipped because the perturbation left the history unchanged
    controls: int  # noise-floor pairs (same history, resampled)
    originals: int  # original explanations (one per user with anything to run)
    swaps: int = 0  # cross-user controls (the item explained for a donor user), one per case

    @property
    def planned(self) -> int:
        """Every (user, kind, severity, repeat) combination, skipped ones included."""
        return self.pairs + self.trivial

    @property
    def max_calls(self) -> int:
        """Model calls if nothing is cached (shared originals counted once per slice)."""
        return self.pairs + self.controls + self.swaps + self.originals


def plan_slices(settings: Settings, slices: Sequence[GatedSlice], explainers: Mapping[str, Explainer],
                catalog: Catalog) -> list[SlicePlan]:
    """Plan the slices exactly as :func:`run_slices` would, without starting the sweep or calling a model."""
    from .metrics import Scorer
    from .sweep import Sweep

    sweep = Sweep(explainers, catalog, scorer=Scorer(weights=settings.weights))
    plans = []
    for entry in slices:
        planned = sweep.add_slice(entry.spec)
        perturbations = sweep.perturbations_for(entry.spec.slice_id)
        users = {p.original.user_id for p in perturbations}
        controls = len(entry.spec.cases) * entry.spec.repeats if entry.spec.noise_floor else 0
        if controls:
            users |= {c.user_id for c in entry.spec.cases}
        swaps = len(entry.spec.donors)
        if swaps:
            users |= {user for user, _ in entry.spec.donors}
        plans.append(SlicePlan(entry.spec.slice_id, entry.spec.model, len(perturbations), planned.trivial,
                               controls, len(users), swaps))
    return plans
