"""Deciding a finished slice: the stability verdict, the adversarial kinds, the cross-user guard, the
regression against a baseline and the inconclusive policy — one set of rules for both entry points."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import stats
from ..checks import BUILTIN, DEFAULT_CHECKS, MEASUREMENT, Evidence, apply_stage
from ..checks import relative_pairs as relative_pairs  # engine.decide's public name before checks/ held it
from ..checks.controls import relative_terms
from ..errors import ConfigError, DataError, RobustExplainError
from ..explainers.base import FAILURE_EMPTY
from ..explainers.reply import THOUGHT_ONLY
from ..metrics import metric_signature
from ..metrics.user import MIN_WAIT_S, split_signature, within_budget
from ..perturbations.flip import FLIP
from ..report.junit import gate_properties, item_cost
from ..report.summary import worst_pairs
from ..results import (
    CUT_REPLIES,
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    MAX_CUT_SHARE,
    OUTCOMES,
    OVERALL,
    PASS,
    Finding,
    GateCheck,
    Interval,
    Robustness,
    Verdict,
    counts_of,
    counts_signature,
    metrics_of,
    too_many_cut,
)
from ..stats import apply_policy, non_inferiority
from ..sweep import reweighted
from ..wording import count_noun

if TYPE_CHECKING:
    from ..checks import Check, CheckRegistry, Decision, Evidence
    from ..perturbations import PerturbationResult
    from ..results import Finding, PairResult, RunResult, Verdict
    from ..settings import GateSettings, Settings
    from ..stats import NonInferiorityResult
    from ..sweep import SliceResult
    from .plan import GatedSlice


def decide(gate: GateSettings, sliced: SliceResult, kind: str | None = None, *,
           measured: Mapping[str, Any] | None = None, checks: CheckRegistry | None = None,
           deadline: float | None = None) -> Verdict:
    """The verdict of a finished slice: the registry's checks (``checks/``) in order, folded by the one
    combining rule, with the rules that make a slice "Not measured" between the checks of its scores and
    the checks that read its text.

    ``measured`` holds what the engine measured for a check with its own services (the judge's finding,
    polarity's), by check name. Raises DataError when the slice has no scored pair (every perturbation
    left the histories unchanged): there is nothing to decide on, and that must not read as a PASS. The
    opt-in ``preference_flip`` pairs are decided by the flip check, never by the stability thresholds: a
    faithful explainer should change there; an item of that kind alone is decided by it alone.
    ``deadline`` (``time.monotonic()``, the run's max-minutes) bounds how long a check of the user's may take.
    """
    registry = list(checks if checks is not None else DEFAULT_CHECKS)
    evidence = evidence_of(gate, sliced, kind, measured)
    # The first check's (stability's) measurement is the verdict the others decide on.
    start, rest = registry[0], registry[1:]
    before = [c for c in rest if not c.after_validity]
    after = [c for c in rest if c.after_validity]
    if sliced.pairs and not evidence.pairs:  # the flip kind alone
        flip_only = _flip_only(gate, sliced, evidence, after)
        return run_checks(flip_only, evidence, [c for c in after if c.name != "flip"], deadline)
    if not sliced.pairs and sliced.out_of_time is not None:
        return run_checks(_unmeasured_in_time(gate, sliced, kind), evidence, after, deadline)
    if not sliced.pairs:
        raise DataError(f"model {sliced.spec.model!r}: no pair to score in slice {sliced.spec.slice_id!r}: "
                        f"all {sliced.trivial} planned perturbations left the history unchanged "
                        "(histories too short for these kinds and severities?)")
    verdict = run_checks(_started(start, evidence), evidence, before, deadline)
    every = (*evidence.pairs, *sliced.controls, *sliced.swaps)
    verdict = with_cut_replies(with_empty_replies(verdict, every), every)
    verdict = with_time_budget(with_unfit_prompts(verdict, every), sliced)
    return run_checks(verdict, evidence, after, deadline)


def evidence_of(gate: GateSettings, sliced: SliceResult, kind: str | None,
                measured: Mapping[str, Any] | None = None) -> Evidence:
    """What the checks of a finished slice read: its pairs apart from the flip kind's, the controls, the
    cross-user controls under the slice's weights, the cases."""
    spec = sliced.spec
    return Evidence(gate, kind, [p for p in sliced.pairs if p.key.kind != FLIP], tuple(sliced.controls),
                    [reweighted(s, spec.weights) for s in sliced.swaps], kinds=tuple(spec.kinds),
                    donors=bool(spec.donors), cases=spec.cases,
                    flips=[p for p in sliced.pairs if p.key.kind == FLIP], sequential=sliced.gate,
                    measured={k: v for k, v in (measured or {}).items() if v is not None},
                    stops=frozenset(sliced.stops), stopped=sliced.stopped)


def run_checks(verdict: Verdict, evidence: Evidence, checks: Sequence[Check],
               deadline: float | None = None) -> Verdict:
    """The verdict after ``checks``: each measured, its record kept and its row written; each stage's
    decisions folded by the combining rule (``checks/combine.py``). A check of the user's is waited for
    until ``deadline`` at most (``metrics.user.within_budget``)."""
    findings = dict(verdict.findings)
    for _, stage in groupby(checks, key=lambda c: c.group):
        decided = []
        for check in stage:
            if deadline is None or _ours(check):
                done = _checked(check, verdict, evidence)
            else:
                late = (f"check {check.name!r} ({type(check).__name__}) did not decide within the run's "
                        f"max-minutes (and {MIN_WAIT_S:g} s after it): make it faster, or give the run "
                        "more time")
                done = within_budget(partial(_checked, check, verdict, evidence), deadline, late)
            if done is None:
                continue
            verdict, decision, findings[check.name] = done
            decided.append((check, decision))
        verdict = apply_stage(verdict, decided)
    return replace(verdict, findings=findings)


def _ours(check: Check) -> bool:
    """Whether ``check`` is a built-in one (the user's are bounded in time and their errors worded)."""
    return any(check is c for c in BUILTIN)


def _checked(check: Check, verdict: Verdict, evidence: Evidence) -> tuple[Verdict, Decision, Finding] | None:
    """One check on ``verdict``: its measurement kept, its decision, its row; None when it measured
    nothing here."""
    with _users_code(check):
        found = check.measure(evidence)
        if found is None:
            return None
        verdict = check.keep(verdict, found)
        decision = check.decide(found, evidence)
        return verdict, decision, replace(_known(check, _row(check, found, evidence), decision),
                                          note=decision.note)


def _row(check: Check, found: Any, evidence: Evidence) -> Finding:
    """``check``'s row, naming its report section (what a writer without the check's code places it by)."""
    row = check.finding(found, evidence)
    return replace(row, section=check.section or "") if isinstance(row, Finding) else row


def _known(check: Check, finding: Finding, decision: Decision) -> Finding:
    """``finding``, when it and ``decision`` say outcomes the verdict knows: a check that decides "FAILED"
    was once ignored, its note dropped — one sentence naming it instead."""
    if decision.outcome not in (None, FAIL, INSENSITIVE, INCONCLUSIVE):
        raise ConfigError(f"check {check.name!r} ({type(check).__name__}) decided {decision.outcome!r}: a "
                          "check decides FAIL, INSENSITIVE, INCONCLUSIVE or nothing (None)")
    if not isinstance(finding, Finding) or finding.outcome not in (None, *OUTCOMES):
        said = repr(finding.outcome) if isinstance(finding, Finding) else f"a {type(finding).__name__}"
        raise ConfigError(f"check {check.name!r} ({type(check).__name__}) wrote a row with {said}: a row's "
                          f"outcome is one of {', '.join(OUTCOMES)} or None (measured, not gated)")
    return finding


@contextmanager
def _users_code(check: Check) -> Iterator[None]:
    """A check the user wrote that breaks is one sentence naming it, never a traceback through the engine
    (a built-in check that breaks is a bug of ours: its traceback stands)."""
    try:
        yield
    except RobustExplainError:
        raise
    except Exception as exc:
        if _ours(check):
            raise
        raise ConfigError(f"check {check.name!r} ({type(check).__name__}) raised {type(exc).__name__}: "
                          f"{exc}") from None


def _started(start: Check, evidence: Evidence) -> Verdict:
    """The verdict the checks start from (stability's), with its row."""
    verdict = start.measure(evidence)
    assert verdict is not None  # stability always measures a slice with pairs
    return replace(verdict, findings={start.name: _row(start, verdict, evidence)})


def _flip_only(gate: GateSettings, sliced: SliceResult, evidence: Evidence, after: Sequence[Check]
               ) -> Verdict:
    """An item of the flip kind alone: the flip check's outcome is the verdict; replies cut at the token
    limit or prompts that did not fit still leave it unmeasured."""
    flip = next(c for c in after if c.name == "flip")
    found = flip.measure(evidence)
    assert found is not None  # the slice has flip pairs
    verdict = Verdict(found.outcome, mode=gate.decision, message=f"Preference flip {found.outcome}: "
                      f"{found.message}.", findings={flip.name: _row(flip, found, evidence)},
                      details={"flip": found})
    every = (*evidence.flips, *sliced.controls, *sliced.swaps)
    return with_cut_replies(with_unfit_prompts(verdict, every), every)


def with_empty_replies(verdict: Verdict, pairs: Sequence[PairResult]) -> Verdict:
    """A gate none of whose pairs had a reply to compare says so in its first sentence — not as four zero
    scores and a count of failures — with the likely cause: a thinking model that answered only in its
    reasoning (it ignores think=false, or spends the token limit before it answers)."""
    if not pairs or any(p.failure != FAILURE_EMPTY for p in pairs):
        return verdict
    if any(THOUGHT_ONLY in p.failure_detail for p in pairs):
        why = ("the model answered only in its reasoning (thinking): raise num-predict so it gets to the "
               "answer, or use a model or tag that does not think")
    else:
        why = ("check that the model answers this prompt at all (ollama run) and that the server sends the "
               "content")
    return replace(verdict, message=f"Every reply was empty ({len(pairs)} pairs, their originals included): "
                                    f"nothing was explained; {why}. The scores said: {verdict.message}")


def with_time_budget(verdict: Verdict, sliced: SliceResult) -> Verdict:
    """The verdict of a slice the time budget cut short says on how many of its users it rests."""
    if sliced.out_of_time is None:
        return verdict
    measured, planned = sliced.out_of_time
    return replace(verdict, message=f"{verdict.message} The time budget (max-minutes) ran out: decided on "
                                    f"the first {measured} of {planned} users.")


def _unmeasured_in_time(gate: GateSettings, sliced: SliceResult, kind: str | None) -> Verdict:
    """INCONCLUSIVE for a slice none of whose users finished within the time budget."""
    planned = sliced.out_of_time[1] if sliced.out_of_time else 0
    checks = tuple(GateCheck(q, t, Interval(math.nan, 0.0, 1.0, 0, 0, 1 - gate.alpha), INCONCLUSIVE)
                   for q, t in gate.thresholds(kind).items())
    note = (f"the time budget (max-minutes) ran out before any of the {planned} users of this test had all "
            "its pairs in. Raise max-minutes, or plan fewer calls a user (design=balanced, fewer "
            "severities); the response cache keeps what was answered, so a rerun continues where this one "
            "stopped.")
    unmeasured = Verdict.of(INCONCLUSIVE, checks, mode=gate.decision, message=f"{NOT_MEASURED}{note}")
    return replace(unmeasured, findings=_measurement(unmeasured, INCONCLUSIVE, note))


NOT_MEASURED = "Not measured: "


def _found_already(verdict: Verdict) -> bool:
    """Whether the verdict already rests on evidence an unmeasured pair cannot undo: a FAIL or
    INSENSITIVE that the controls (guard "fail") or an attack found."""
    guard = verdict.guard
    found = (guard is not None and guard.policy == "fail" and guard.flagged and guard.outcome != INCONCLUSIVE
             ) or any(a.outcome == FAIL for a in verdict.attacks)
    return verdict.outcome in (FAIL, INSENSITIVE) and found


def not_measured(verdict: Verdict, note: str) -> Verdict:
    """INCONCLUSIVE with ``note`` first and what the scores said after it; or, when the verdict already
    rests on evidence (:func:`_found_already`), the verdict with the note added."""
    if _found_already(verdict):
        return replace(verdict, message=f"{verdict.message} Also: {note}",
                       findings=_measurement(verdict, None, note))
    if verdict.message.startswith(NOT_MEASURED):  # unmeasured for a second reason: one "Not measured"
        return replace(verdict, message=f"{NOT_MEASURED}{note} Also: {verdict.message[len(NOT_MEASURED):]}",
                       findings=_measurement(verdict, INCONCLUSIVE, note))
    return replace(verdict, outcome=INCONCLUSIVE, users_needed=None,
                   message=f"{NOT_MEASURED}{note} The scores said: {verdict.message}",
                   findings=_measurement(verdict, INCONCLUSIVE, note))


def _measurement(verdict: Verdict, outcome: str | None, note: str) -> dict[str, Finding]:
    """The verdict's rows with the ``measurement`` row: why the scores are not a measurement (replies cut at
    the token limit, prompts that did not fit, the time budget), so the rows explain the item's outcome
    too. ``outcome`` None: said beside a verdict that rests on other evidence, deciding nothing."""
    earlier = verdict.findings.get(MEASUREMENT)
    reason = f"{note} Also: {earlier.reason}" if earlier is not None else note
    row = Finding(MEASUREMENT, outcome, reason, enforced=outcome is not None,
                  note=f"{NOT_MEASURED}{note}" if outcome is not None else "")
    return {**verdict.findings, MEASUREMENT: row}


def with_unfit_prompts(verdict: Verdict, pairs: Sequence[PairResult]) -> Verdict:
    """A gate with any pair whose prompt did not fit the model's context is not measured: INCONCLUSIVE,
    naming a user, the tokens and the limit, and the fix — the model answered a history it did not see
    whole (a refused prompt scores 0, a truncated one answers the history's tail)."""
    unfit = [p for p in pairs if p.overflow]
    if not unfit:
        return verdict
    users = sorted({p.key.user_id for p in unfit})
    first = unfit[0]
    shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
    who = f"{count_noun(len(users), 'user')}: {shown}"
    note = (f"{len(unfit)} of {len(pairs)} pairs compare an explanation whose prompt did not fit the model's "
            f"context ({who}; user {first.key.user_id}'s {first.overflow_detail}): the model did not see the "
            "whole history. Lower max-history, or raise the context (num-ctx for Ollama; the server's own "
            "context size otherwise, e.g. llama-server --ctx-size divided by --parallel).")
    return not_measured(verdict, note)


def with_cut_replies(verdict: Verdict, pairs: Sequence[PairResult]) -> Verdict:
    """A gate whose pairs too often compare a reply the server cut at the token limit is not measured:
    INCONCLUSIVE, with the count and the fix, whatever the scores said (they compare unfinished text).

    A failure the controls or an attack found stands (with the note): the first num_predict tokens of a
    copied prompt, an injected canary or a text that ignores the user are evidence already."""
    cut = [p for p in pairs if p.cut]
    if not too_many_cut(len(cut), len(pairs)):
        return verdict
    replies = sum(len(p.cut) for p in cut)
    note = (f"{len(cut)} of {len(pairs)} pairs ({100 * len(cut) / len(pairs):.0f} %, more than "
            f"{100 * MAX_CUT_SHARE:.0f} %) compare a reply the server cut at the token limit ({replies} of "
            f"{len(CUT_REPLIES) * len(pairs)} replies ended with stop reason \"length\"): their scores "
            "compare unfinished text. Raise num-predict (the model's token limit per explanation) or ask for "
            "shorter explanations in the prompt.")
    return not_measured(verdict, note)


def check_baseline(baseline: RunResult, path: Path, settings: Settings, *, save_flag: str) -> None:
    """Refuse a baseline whose numbers are not comparable with this run's (another metric signature, or
    histories perturbed by the other perturbation-counts rule)."""
    # The user's own metrics belong to the tests that measure them: each test checks its own (regression).
    counts = counts_signature(settings.perturbation_counts)
    current = metric_signature(weights=settings.weights, embedding=settings.embed_model) + counts
    builtin = split_signature(baseline.signature)[0]
    theirs = counts_of(baseline.signature)
    if theirs != settings.perturbation_counts:
        raise ConfigError(
            f"baseline {path} perturbed its histories with perturbation-counts={theirs} and this run uses "
            f"{settings.perturbation_counts}: noise and dilution insert other numbers of items, so the two "
            f"runs' pairs are not comparable. Re-create the baseline with this setting ({save_flag}) or "
            f"run with perturbation-counts={theirs}.")
    if builtin != current:
        raise ConfigError(
            f"baseline {path} was scored with a different metric signature, so its numbers are not "
            f"comparable with this run's.\n  baseline: {baseline.signature}\n  this run: {current}\n"
            f"Re-create the baseline with this version ({save_flag}) or match the weights/tagger it used.")


def regression(baseline: RunResult, model: str, sliced: SliceResult, *, margin: float, alpha: float,
               source: str, save_flag: str, relative: Sequence[PairResult] = ()) -> NonInferiorityResult:
    """Paired non-inferiority of a slice's pairs against the baseline's matching pairs; ``relative``, the
    slice's R-gated pairs, adds R's change, measured against each run's own cross-user controls."""
    _user_metrics_match(baseline, sliced, source, save_flag)
    pairs = sliced.pairs
    models = {p.key.model for p in baseline.pairs}
    # Same model name when the baseline has it; a single-model baseline is compared whatever its name
    # (the usual case: "this release's model/prompt vs the last release's").
    if model not in models and len(models) == 1:
        model = next(iter(models))
    kinds = {p.key.kind for p in pairs}
    base = [p for p in baseline.pairs if p.key.model == model and p.key.kind in kinds]
    terms = _relative_terms(baseline, model, sliced, relative)
    try:
        return non_inferiority(base, pairs, margin=margin, alpha=alpha, relative=terms)
    except ValueError as exc:
        # Nothing to compare (a kind or severity added since the baseline): say so, never a traceback;
        # a regression gate cannot pass on pairs it has not seen.
        raise DataError(f"no pair matches this slice ({len(base)} baseline pairs of these kinds, "
                        f"{len(pairs)} here): {exc}; save a new baseline with {save_flag}",
                        source=source) from None


def _user_metrics_match(baseline: RunResult, sliced: SliceResult, source: str, save_flag: str) -> None:
    """Refuse a baseline that measured one of this test's own metrics at another version."""
    versions = split_signature(baseline.signature)[1]
    for metric in sliced.spec.metrics:
        if versions.get(metric.name, metric.version) != metric.version:
            raise ConfigError(f"baseline {source} measured metric {metric.name!r} at version "
                              f"{versions[metric.name]!r}, this run at {metric.version!r}: its numbers are "
                              f"not comparable; save a new baseline with {save_flag}")


def _relative_terms(baseline: RunResult, model: str, sliced: SliceResult, relative: Sequence[PairResult]
                    ) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]] | None:
    """R's per-user terms of the baseline and of this slice, on the same kinds; None when either run has
    no cross-user control there (a baseline saved with guard=off, a kind R does not gate)."""
    kinds = {p.key.kind for p in relative}
    base_swaps = baseline.model_swaps(model)
    if not kinds or not base_swaps or not sliced.swaps:
        return None
    base_floor = stats.noise_floor(baseline.model_pairs(model, controls=True))
    floor = stats.noise_floor(sliced.controls)
    base = relative_terms([p for p in baseline.model_pairs(model) if p.key.kind in kinds], base_swaps,
                          base_floor.mean if base_floor is not None else 1.0)
    current = relative_terms(relative, [reweighted(s, sliced.spec.weights) for s in sliced.swaps],
                             floor.mean if floor is not None else 1.0)
    return (base, current) if base and current else None


def with_regression(verdict: Verdict, found: NonInferiorityResult | None, baseline: Path | None) -> Verdict:
    """A failed regression fails the gate, with the reason: part of the verdict, so that every writer
    (JSON gates, Markdown and step summary, annotations, the -q line, JUnit) says FAIL and why."""
    if found is None:
        return verdict
    # The comparison is a finding like any check's, so every writer that shows the findings names it.
    verdict = replace(verdict, findings={**verdict.findings, REGRESSION: regression_finding(found)})
    if found.passed:  # a failed item still says how it compares: "baseline" must not go unsaid
        if verdict.outcome != FAIL:
            return verdict
        return replace(verdict, message=f"{verdict.message} Against baseline {baseline}: {found.message}")
    if verdict.outcome == FAIL:  # failed already on its thresholds: the baseline is said too
        return replace(verdict, message=f"{verdict.message} Also against baseline {baseline}: "
                                        f"{found.message}")
    return replace(verdict, outcome=FAIL, message=(
        f"Regression against baseline {baseline}: {found.message} Without the baseline: {verdict.message}"))


REGRESSION = "regression"  # the finding of the comparison with a baseline (``with_regression``)


def regression_finding(found: NonInferiorityResult) -> Finding:
    """The regression's row: ρ's change against the baseline (current − baseline, per user) and the drop
    allowed (−margin), PASS or FAIL, with the comparison's sentence."""
    rho = next((r for r in found.rows if r.quantity == "combined"), None)
    return Finding(REGRESSION, PASS if found.passed else FAIL, found.message,
                   rho.diff if rho is not None else None, -found.margin, "min", True,
                   {"users": rho.n_users if rho is not None else 0, "pairs": found.n_matched})


def robustness(gated: GatedSlice, sliced: SliceResult, verdict: Verdict,
               found: NonInferiorityResult | None,
               perturbations: Sequence[PerturbationResult]) -> Robustness:
    """The record of a decided slice: its pairs, verdict, an interval per quantity, the worst pairs."""
    kind = None if gated.slice == OVERALL else gated.slice
    pairs = sliced.pairs
    intervals = {c.quantity: c.interval for c in verdict.checks}
    users = [p.key.user_id for p in pairs]
    for quantity in ("combined", *metrics_of(pairs)):  # the opt-in embedding too, when measured
        if quantity not in intervals:
            intervals[quantity] = stats.cluster_interval([p.metric(quantity) for p in pairs], users,
                                                         confidence=1 - gated.gate.alpha)
    return Robustness(
        model=gated.spec.model, kind=gated.slice, pairs=tuple(pairs), controls=tuple(sliced.controls),
        verdict=verdict, intervals=intervals, thresholds=gated.gate.thresholds(kind),
        worst=tuple(worst_pairs(pairs)), trivial=sliced.trivial, cancelled=sliced.cancelled,
        noise_floor=stats.noise_floor(sliced.controls) if sliced.controls else None,
        perturbations=perturbations, regression=found, swaps=tuple(sliced.swaps))


def judge(verdict: Verdict, policy: str) -> tuple[bool, bool]:
    """``(passed, warn)`` under the inconclusive policy: the one rule both entry points enforce."""
    return apply_policy(verdict, policy)


@dataclass(frozen=True)
class Outcome:
    """What a door does with one decided item: pass or fail it, say a warning, attach the properties.

    ``warning`` is set for an INCONCLUSIVE verdict under ``inconclusive=warn``, a fragile PASS and a guard
    finding under ``guard=warn``; ``properties`` are the item's JUnit XML properties (the same from
    ``pytest --junitxml`` and ``robustexplain run --junitxml``); ``result`` is the decided slice itself.
    """

    nodeid: str
    passed: bool
    warning: str | None
    properties: tuple[tuple[str, str], ...]
    result: Robustness


def outcome_of(nodeid: str, result: Robustness, policy: str, price: tuple[float, float] | None = None
               ) -> Outcome:
    """The one rule both doors apply to a decided item; ``price``: the model's (its cost, a property)."""
    passed, warn = judge(result.verdict, policy)
    properties = gate_properties(result.model, result.kind, result.verdict.outcome, len(result.pairs),
                                 result.intervals, result.guard, result.verdict.faithfulness,
                                 result.verdict.findings,
                                 cost=item_cost((*result.pairs, *result.controls, *result.swaps), price))
    return Outcome(nodeid, passed, f"{nodeid}: {result.verdict.message}" if warn else None,
                   tuple(properties), result)
