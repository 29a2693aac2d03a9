"""Per-model summary of a run: the numbers every report format shows, computed once.

:func:`summarize` turns one model's pairs into a :class:`Summary` (overall ρ, by kind, by metric, by
severity, kind × severity, per user, severity degradation, noise floor, weakest dimension and
perturbation, generation failures, flagged pairs and a one-line recommendation). Every interval is
cluster-robust by user (``stats.cluster_interval``): pairs sharing a user share a history and an original
explanation, so they are not independent.

The helpers at the bottom (gate look-up, thresholds, model info, verdict texts, failed items) and those
of :mod:`.formatting` are shared by the terminal, Markdown, HTML and paper-table renderers so the formats
never disagree.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeGuard

from ..results import (
    FAIL,
    INCONCLUSIVE,
    INSENSITIVE,
    METRICS,
    ORIGINAL_FAILED,
    OVERALL,
    PASS,
    AttackResult,
    GateCheck,
    GateResult,
    GuardResult,
    Interval,
    ModelInfo,
    PairKey,
    PairResult,
    RunResult,
    is_control,
    metrics_of,
    plain,
)

# Re-exported: the renderers and outside code import these from here (they moved to formatting.py).
from .formatting import (  # noqa: F401
    describe_changes,
    explanation_text,
    finite,
    finite_dict,
    fmt_d,
    fmt_interval,
    fmt_mean,
    fmt_p,
    fmt_pct,
    interval_dict,
    timings_text,
    trim,
)

if TYPE_CHECKING:
    from ..guard import GuardSettings
    from ..stats import KindDifferences, UserSpread

# Display order of the method's five perturbation kinds; kinds the run used but not listed here follow,
# sorted, so a custom perturbation still shows up.
KIND_ORDER: tuple[str, ...] = (
    "noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values",
)
METRIC_DESCRIPTIONS: dict[str, str] = {
    "semantic": "BoW cosine", "keyword": "POS Jaccard", "structural": "BLEU-4", "length": "",
    "embedding": "embedding cosine",
}
DEFAULT_MIN_COMBINED = 0.5
DEFAULT_MIN_METRIC = 0.35
# The paper: fewer than 50 pairs per kind makes its statistical tests unreliable.
MIN_PAIRS_PER_KIND = 50

# A metric "trails" when it is below its gate or this fraction of the other metrics' mean; a kind is
# "weak" when below its gate or this fraction of the other kinds' mean.
_METRIC_TRAIL_RATIO = 0.8
_KIND_WEAK_RATIO = 0.95
_FAILURE_RATE_ALERT = 0.05

_METRIC_ADVICE: dict[str, str] = {
    "structural": "Structural consistency trails the other metrics: constrain the output format or use a "
                  "structured explanation template.",
    "keyword": "Keyword overlap trails the other metrics: anchor the explanation to item attributes "
               "(category, features) named in the prompt rather than to individual history items.",
    "length": "Length stability trails the other metrics: fix the target length (num_predict / explicit "
              "word budget).",
    "semantic": "Semantic similarity trails the other metrics: the explanations change their content, not "
                "just their wording; lower the temperature and summarise the history (dominant categories) "
                "instead of listing it.",
}
_KIND_ADVICE: dict[str, str] = {
    "noise_injection": "injected off-profile items steer the explanation; tell the model to ground it in "
                       "the user's dominant preferences",
    "temporal_shuffle": "the order of the history changes the explanation; present the history in a fixed "
                        "order (e.g. by time) or summarise it",
    "behavior_dilution": "filler interactions dilute the explanation; summarise the history by category "
                         "before prompting",
    "category_drift": "drifted categories pull the explanation away; weight recent and dominant categories "
                      "explicitly in the prompt",
    "missing_values": "missing fields change the explanation; write missing values explicitly and explain "
                      "from the fields that are present",
}
_ALL_GOOD = ("No metric or perturbation stands out: the explanations are consistently robust; keep this "
             "run as the baseline.")


@dataclass(frozen=True)
class FailureRecord:
    """A pair whose original or perturbed explanation could not be generated (scored 0 everywhere)."""

    key: PairKey
    failure: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class UserStat:
    """ρ of one user's pairs: mean, standard deviation and count."""

    user_id: str
    n: int
    mean: float
    sd: float
    history_length: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Summary:
    """Everything the reports show about one model.

    ``degradation_pct`` is the relative change of mean ρ from severity 1 to severity 5 (negative = less
    robust at L5; ``stats.severity_degradation``); ``noise_floor`` is ρ of the control pairs (same history,
    resampled), None without control pairs. ``cached_pairs`` counts pairs whose two explanations both
    came from the response cache. ``by_user`` holds each user's mean and within-user sd of ρ;
    ``user_spread`` the sd of the user means and, above the paper's 0.2, strata by history length.
    ``kind_tests`` (the paper's analyses across kinds) is computed when first read, i.e. only by a report
    that shows it: the gate never needs it, and a run that prints one line (``-q``) never pays for it.
    """

    model: str
    n_users: int
    n_pairs: int
    cached_pairs: int
    overall: Interval
    by_kind: dict[str, Interval]
    by_metric: dict[str, Interval]
    by_severity: dict[int, Interval]
    kind_severity: dict[str, dict[int, Interval]]
    by_user: tuple[UserStat, ...]
    degradation_pct: float | None
    noise_floor: Interval | None
    n_control_pairs: int
    weakest_metric: str | None
    weakest_kind: str | None
    failures: tuple[FailureRecord, ...]
    keyword_empty: tuple[PairKey, ...]
    small_kinds: tuple[str, ...]
    user_spread: UserSpread
    recommendation: str
    # The pairs the kind tests are run on (≥ 3 kinds), None otherwise: see ``kind_tests``.
    kind_pairs: tuple[PairResult, ...] | None = field(default=None, repr=False, compare=False)
    sensitivity: GuardResult | None = None  # the cross-user control over all pairs; None without swaps
    delta_by_kind: dict[str, Interval] = field(default_factory=dict)  # Δ = ρ_pert − ρ_swap per kind
    relative_by_kind: dict[str, Interval] = field(default_factory=dict)  # R per kind (when defined)
    attacks: tuple[AttackResult, ...] = ()  # opt-in adversarial kinds over all pairs

    @cached_property
    def kind_tests(self) -> KindDifferences | None:
        """Do kinds differ? Friedman, ANOVA and (when read) Tukey HSD over ``kind_pairs``; None with fewer
        than 3 kinds. Computed on first read: only reports that show it pay for it (and ``scipy.stats``)."""
        if self.kind_pairs is None:
            return None
        from ..stats import kind_differences

        return kind_differences(self.kind_pairs)

    @property
    def n_failures(self) -> int:
        return len(self.failures)

    @property
    def severities(self) -> tuple[int, ...]:
        return tuple(sorted(self.by_severity))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: severity keys become strings, intervals dicts, non-finite numbers None."""
        return {
            "model": self.model,
            "n_users": self.n_users,
            "n_pairs": self.n_pairs,
            "cached_pairs": self.cached_pairs,
            "overall": interval_dict(self.overall),
            "by_kind": {k: interval_dict(v) for k, v in self.by_kind.items()},
            "by_metric": {k: interval_dict(v) for k, v in self.by_metric.items()},
            "by_severity": {str(s): interval_dict(v) for s, v in self.by_severity.items()},
            "kind_severity": {k: {str(s): interval_dict(v) for s, v in row.items()}
                              for k, row in self.kind_severity.items()},
            "by_user": [finite_dict(u.to_dict()) for u in self.by_user],
            "degradation_pct": finite(self.degradation_pct),
            "noise_floor": interval_dict(self.noise_floor) if self.noise_floor else None,
            "n_control_pairs": self.n_control_pairs,
            "weakest_metric": self.weakest_metric,
            "weakest_kind": self.weakest_kind,
            "n_failures": self.n_failures,
            "failures": [f.to_dict() for f in self.failures],
            "keyword_empty": [asdict(k) for k in self.keyword_empty],
            "small_kinds": list(self.small_kinds),
            "user_spread": {"sd": finite(self.user_spread.sd), "sd_limit": self.user_spread.sd_limit,
                            "stratified": self.user_spread.stratified,
                            "strata": [{"label": st.label, "min_length": st.min_length,
                                        "max_length": st.max_length, "n_users": st.n_users,
                                        "mean": interval_dict(st.mean)} for st in self.user_spread.strata]},
            "recommendation": self.recommendation,
            "kind_tests": plain(self.kind_tests.to_dict()) if self.kind_tests else None,
            "sensitivity": plain(self.sensitivity.to_dict()) if self.sensitivity else None,
            "delta_by_kind": {k: interval_dict(v) for k, v in self.delta_by_kind.items()},
            "relative_by_kind": {k: interval_dict(v) for k, v in self.relative_by_kind.items()},
            "attacks": [plain(a.to_dict()) for a in self.attacks],
        }


_SUMMARIES: dict[tuple[int, str, int, str], tuple[RunResult, Summary]] = {}


def summarize(run: RunResult, model: str) -> Summary:
    """Summarise one model's pairs of ``run`` (controls feed the noise floor only).

    Memoised for the run object: every format rendered (terminal, JSON, Markdown, HTML) summarises the
    same run, and the kind tests (Tukey HSD) cost about half a second per model.
    """
    key = (id(run), model, len(run.pairs), run.finished_at)
    memo = _SUMMARIES.get(key)
    if memo is not None and memo[0] is run:
        return memo[1]
    summary = _summarize(run, model)
    if len(_SUMMARIES) >= 16:
        _SUMMARIES.pop(next(iter(_SUMMARIES)))
    _SUMMARIES[key] = (run, summary)
    return summary


def _summarize(run: RunResult, model: str) -> Summary:
    from ..stats import noise_floor, severity_degradation, user_spread

    pairs = run.model_pairs(model)
    controls = run.model_pairs(model, controls=True)
    kinds = ordered_kinds(p.key.kind for p in pairs)
    severities = sorted({p.key.severity for p in pairs})
    by_kind = {k: interval_of([p for p in pairs if p.key.kind == k]) for k in kinds}
    by_metric = {m: interval_of(pairs, m) for m in metrics_of(pairs)}  # the opt-in fifth when measured
    by_severity = {s: interval_of([p for p in pairs if p.key.severity == s]) for s in severities}
    kind_severity = {k: {s: interval_of([p for p in pairs if p.key.kind == k and p.key.severity == s])
                         for s in severities if any(p.key.kind == k and p.key.severity == s for p in pairs)}
                     for k in kinds}
    weakest_metric = _argmin({m: iv.mean for m, iv in by_metric.items() if m in METRICS})
    weakest_kind = _argmin({k: iv.mean for k, iv in by_kind.items()})
    users = _user_stats(pairs)
    thresholds = gate_thresholds(run, model)
    failures = tuple(FailureRecord(p.key, p.failure, p.failure_detail) for p in pairs if p.failure)
    return Summary(
        model=model,
        n_users=len({p.key.user_id for p in pairs}),
        n_pairs=len(pairs),
        cached_pairs=sum(1 for p in pairs if p.cached_original and p.cached_perturbed),
        overall=interval_of(pairs),
        by_kind=by_kind,
        by_metric=by_metric,
        by_severity=by_severity,
        kind_severity=kind_severity,
        by_user=users,
        degradation_pct=severity_degradation(pairs),
        noise_floor=noise_floor(controls),
        n_control_pairs=len(controls),
        weakest_metric=weakest_metric,
        weakest_kind=weakest_kind,
        failures=failures,
        keyword_empty=tuple(p.key for p in pairs if p.keyword_empty),
        small_kinds=tuple(k for k in kinds if sum(p.key.kind == k for p in pairs) < MIN_PAIRS_PER_KIND),
        user_spread=user_spread(pairs),
        recommendation=recommend(by_metric, by_kind, thresholds, n_failures=len(failures),
                                 n_pairs=len(pairs)),
        kind_pairs=tuple(pairs) if len(kinds) >= 3 else None,
        **_sensitivity(run, model, pairs, thresholds["combined"]),
        attacks=_attacks(run, pairs),
    )


def _attacks(run: RunResult, pairs: Sequence[PairResult]) -> tuple[AttackResult, ...]:
    """Prompt injection and shilling outcomes over all of the model's pairs (empty when not run)."""
    from ..adversarial import (
        ATTACK_KINDS,
        DEFAULT_MAX_HIJACK_RATE,
        DEFAULT_MAX_INJECTION_RATE,
        INJECTION,
        SHILLING,
        evaluate_attacks,
    )

    if not any(p.key.kind in ATTACK_KINDS for p in pairs):
        return ()
    injection, hijack = run.settings.get("max_injection_rate"), run.settings.get("max_hijack_rate")
    limits = {INJECTION: float(injection) if _is_number(injection) else DEFAULT_MAX_INJECTION_RATE,
              SHILLING: float(hijack) if _is_number(hijack) else DEFAULT_MAX_HIJACK_RATE}
    return evaluate_attacks(pairs, limits)


def security_rows(summary: Summary) -> list[tuple[str, str]]:
    """The opt-in adversarial kinds' outcomes (label, value), for every format; empty when not run."""
    from ..adversarial import describe_attack

    rows = []
    for a in summary.attacks:
        rows.append((a.kind, f"{describe_attack(a)} · {a.outcome}"))
        if a.by_severity:
            rows.append((f"{a.kind} by severity", " · ".join(f"L{s} {w}/{n}" for s, (w, n) in
                                                                  a.by_severity.items())))
        for example in a.examples[:1]:
            shown = trim(str(example.get("explanation", "")), 200)
            rows.append((f"{a.kind} example", f"user {example.get('user_id')}, planted "
                                              f"{example.get('planted')}: “{shown}”"))
    return rows


def guard_settings(run: RunResult) -> GuardSettings:
    """The guard's settings as the run recorded them (the defaults for a report that has none)."""
    from ..guard import DEFAULT_MAX_INSENSITIVE_SHARE, DEFAULT_MIN_SENSITIVITY, GuardSettings

    def number(name: str, default: float) -> float:
        value = run.settings.get(name)
        return float(value) if _is_number(value) else default

    reference = run.settings.get("min_history_reference")
    return GuardSettings(policy=str(run.settings.get("guard", "fail")),
                         min_sensitivity=number("min_sensitivity", DEFAULT_MIN_SENSITIVITY),
                         max_insensitive_share=number("max_insensitive_share", DEFAULT_MAX_INSENSITIVE_SHARE),
                         min_history_reference=float(reference) if _is_number(reference) else None,
                         alpha=number("alpha", 0.05))


def _sensitivity(run: RunResult, model: str, pairs: Sequence[PairResult], threshold: float
                 ) -> dict[str, Any]:
    """The guard over all of the model's pairs, and Δ by kind (empty without cross-user controls)."""
    swaps = run.model_swaps(model)
    if not swaps or not pairs:
        return {}
    from ..guard import by_kind, evaluate
    from ..stats import noise_floor

    floor = noise_floor(run.model_pairs(model, controls=True))
    settings = guard_settings(run)
    floor_value = floor.mean if floor is not None else 1.0
    per_kind = by_kind(pairs, swaps, alpha=settings.alpha, floor=floor_value)
    kinds = ordered_kinds(per_kind)
    return {"sensitivity": evaluate(pairs, swaps, combined_threshold=threshold, settings=settings,
                                    floor=floor_value),
            "delta_by_kind": {k: per_kind[k][0] for k in kinds},
            "relative_by_kind": {k: r for k in kinds if (r := per_kind[k][1]) is not None}}


def interval_of(pairs: Sequence[PairResult], quantity: str = "combined") -> Interval:
    """Mean of ``quantity`` over ``pairs`` with its user-clustered interval."""
    from ..stats import cluster_interval

    return cluster_interval([p.metric(quantity) for p in pairs], [p.key.user_id for p in pairs])


def worst_pairs(pairs: Iterable[PairResult], n: int = 3, *, quantity: str = "combined",
                include_failures: bool = False) -> list[PairResult]:
    """The ``n`` perturbation pairs scoring lowest on ``quantity`` (ties broken by key, deterministic).

    Control pairs never count; generation failures are left out unless ``include_failures`` (they are
    listed separately and their zero scores say nothing about robustness).
    """
    candidates = [p for p in pairs
                  if not is_control(p.key.kind) and (include_failures or p.failure is None)]
    return sorted(candidates, key=lambda p: (p.metric(quantity), p.key))[:n]


def recommend(by_metric: dict[str, Interval], by_kind: dict[str, Interval], thresholds: dict[str, float],
              *, n_failures: int = 0, n_pairs: int = 0) -> str:
    """One rule-based sentence: what to change first.

    Order: many generation failures (scores are meaningless until fixed), then a metric below its gate
    (the furthest below) or clearly trailing the others, then a perturbation kind below the ρ gate or
    clearly weaker than the others, else "all good". ``thresholds`` maps ``combined`` and each metric to
    its gate (see :func:`gate_thresholds`).
    """
    if n_pairs == 0:
        return "No scored pairs for this model: nothing to recommend."
    if n_failures / n_pairs > _FAILURE_RATE_ALERT:
        return (f"{n_failures} of {n_pairs} pairs had a generation failure: fix the backend or the prompt "
                "before reading the scores.")
    metric_thresholds = {m: thresholds.get(m, DEFAULT_MIN_METRIC) for m in by_metric}
    metric = _trailing(by_metric, metric_thresholds, _METRIC_TRAIL_RATIO)
    if metric is not None:
        return _METRIC_ADVICE.get(metric, f"{metric} trails the other metrics.")
    kind_thresholds = dict.fromkeys(by_kind, thresholds.get("combined", DEFAULT_MIN_COMBINED))
    kind = _trailing(by_kind, kind_thresholds, _KIND_WEAK_RATIO)
    if kind is not None:
        advice = _KIND_ADVICE.get(kind, "look at the worst pairs of this perturbation")
        return f"ρ drops most under {kind}: {advice}."
    return _ALL_GOOD


def _trailing(values: dict[str, Interval], thresholds: dict[str, float], ratio: float) -> str | None:
    """The entry furthest below its threshold; else the lowest if below ``ratio`` × the others' mean."""
    means = {k: v.mean for k, v in values.items() if not math.isnan(v.mean)}
    shortfalls = {k: thresholds[k] - mean for k, mean in means.items() if mean < thresholds[k]}
    if shortfalls:
        return max(shortfalls, key=lambda k: (shortfalls[k], k))
    lowest = _argmin(means)
    if lowest is None:
        return None
    others = [v for k, v in means.items() if k != lowest]
    if others and means[lowest] < ratio * statistics.fmean(others):
        return lowest
    return None


def _argmin(values: dict[str, float]) -> str | None:
    finite_items = [(v, k) for k, v in values.items() if not math.isnan(v)]
    return min(finite_items)[1] if finite_items else None


def _user_stats(pairs: Sequence[PairResult]) -> tuple[UserStat, ...]:
    grouped: dict[str, list[PairResult]] = {}
    for p in pairs:
        grouped.setdefault(p.key.user_id, []).append(p)
    out = []
    for user in sorted(grouped):
        scores = [p.combined for p in grouped[user]]
        sd = statistics.stdev(scores) if len(scores) > 1 else 0.0
        out.append(UserStat(user, len(scores), statistics.fmean(scores), sd,
                            max(p.history_length for p in grouped[user])))
    return tuple(out)


# ---------------------------------------------------------------------------------------------------
# Shared helpers for the renderers.


def ordered_kinds(kinds: Iterable[str]) -> list[str]:
    """Kinds in the method's order, unknown kinds after them (sorted); controls excluded."""
    present = {k for k in kinds if not is_control(k)}
    return [k for k in KIND_ORDER if k in present] + sorted(present - set(KIND_ORDER))


def model_names(run: RunResult) -> list[str]:
    """Models in the order of ``run.models``, then any model that only appears in the pairs.

    A model that was set up but neither scored a pair nor gated an item is left out: every test that
    would have used it chose another explainer (e.g. a conftest's ``explainer`` fixture under
    ``--robustexplain-backend=template``), and a "ρ n/a · 0 pairs" line would only mislead.
    """
    used = {p.key.model for p in run.pairs} | {g.model for g in run.gates}
    names = [str(m.get("name", "")) for m in run.models if m.get("name") in used]
    for p in run.pairs:
        if p.key.model not in names:
            names.append(p.key.model)
    return names


def model_info(run: RunResult, name: str) -> ModelInfo:
    """The :class:`ModelInfo` of ``name`` rebuilt from ``run.models`` (bare name when unknown)."""
    known = {f.name for f in fields(ModelInfo)}
    for entry in run.models:
        if entry.get("name") == name:
            payload = {k: v for k, v in entry.items() if k in known and k != "extra"}
            extra = {k: v for k, v in entry.items() if k not in known}
            extra.update(entry.get("extra") or {})
            payload.setdefault("backend", "unknown")
            return ModelInfo(**payload, extra=extra)
    return ModelInfo(name=name, backend="unknown")


def find_gate(run: RunResult, model: str, slice_: str) -> GateResult | None:
    """The gate of ``model`` on ``slice_`` (a kind or ``OVERALL``); the worst when several tests gate it."""
    matches = [g for g in run.gates if g.model == model and g.slice == slice_]
    return min(matches, key=lambda g: _OUTCOME_RANK.get(g.verdict.outcome, 4)) if matches else None


_OUTCOME_RANK = {FAIL: 0, INSENSITIVE: 1, INCONCLUSIVE: 2, PASS: 3}


def model_outcome(run: RunResult, model: str) -> str | None:
    """The model's outcome: the worst of its gates (a failed kind fails the job even when the overall
    gate passed, so the headline must not say PASS), None when ungated."""
    outcomes = [g.verdict.outcome for g in run.gates if g.model == model]
    return min(outcomes, key=lambda o: _OUTCOME_RANK.get(o, 4)) if outcomes else None


def gate_thresholds(run: RunResult, model: str) -> dict[str, float]:
    """The threshold of each gated quantity (``combined`` and every metric) for the model.

    From its overall gate (else its first gate), else the run settings (``min_combined``; ``min_metric``
    as one number or a mapping per metric), else the method's defaults (0.5 and 0.35).
    """
    out = {"combined": DEFAULT_MIN_COMBINED, **dict.fromkeys(METRICS, DEFAULT_MIN_METRIC)}
    combined, metric = run.settings.get("min_combined"), run.settings.get("min_metric")
    if _is_number(combined):
        out["combined"] = float(combined)
    if _is_number(metric):
        out.update(dict.fromkeys(METRICS, float(metric)))
    elif isinstance(metric, dict):
        out.update({m: float(v) for m, v in metric.items() if m in METRICS and _is_number(v)})
    gate = find_gate(run, model, OVERALL) or next((g for g in run.gates if g.model == model), None)
    if gate is not None:
        out.update({q: float(v) for q, v in gate.thresholds.items() if q in out and _is_number(v)})
    return out


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _known(quantity: str) -> str:
    # A check on a quantity the pairs do not carry (a custom gate) is ranked by ρ.
    return quantity if quantity in METRICS else "combined"


def failing_quantity(gate: GateResult) -> str:
    """The quantity whose check failed (``combined`` first), to pick the worst pairs by."""
    failed = [c.quantity for c in gate.verdict.failed_checks]
    if "combined" in failed:
        return "combined"
    return failed[0] if failed and failed[0] in METRICS else "combined"


def gate_pairs(run: RunResult, gate: GateResult) -> list[PairResult]:
    """The perturbation pairs a gate judged: its model's pairs in its slice (kinds, severities, users)."""
    return [p for p in run.model_pairs(gate.model) if gate.covers(p)]


def check_note(check: GateCheck, *, own_row: bool = False) -> str:
    """Why a check needs attention: a metric below its threshold and/or a fragile interval.

    ``own_row``: the check is shown on its quantity's own row, whose value already says which and how much.
    """
    notes = []
    named = not own_row and check.quantity != "combined"
    if check.outcome == FAIL and named:
        notes.append(f"{check.quantity} {fmt_mean(check.interval.mean)} < {check.threshold:.2f}")
    if check.fragile:
        what = f"{check.quantity} interval" if named else "interval"
        notes.append(f"fragile: {what} straddles {check.threshold:.2f}")
    return "; ".join(notes)


def verdict_text(gate: GateResult, quantity: str | None = None) -> str:
    """``FAIL (fragile: interval straddles 0.50)``: the outcome of the gate, or of one of its checks."""
    verdict = gate.verdict
    if quantity is not None:
        checks = [c for c in verdict.checks if c.quantity == quantity]
        if not checks:
            return ""
        outcome = checks[0].outcome
    else:
        checks = list(verdict.checks)
        outcome = verdict.outcome
    notes = [n for n in (check_note(c, own_row=quantity is not None) for c in checks) if n]
    if outcome == INSENSITIVE:
        notes.insert(0, "explanations barely depend on the user's history")
    if outcome == INCONCLUSIVE and verdict.users_needed:
        notes.append(f"≈{verdict.users_needed} more users would likely decide")
    return f"{outcome} ({'; '.join(notes)})" if notes else outcome


def overall_verdict_note(run: RunResult, model: str) -> str | None:
    """The overall gate's verdict when it differs from its ρ check (a metric failed while ρ passed)."""
    gate = find_gate(run, model, OVERALL)
    if gate is None:
        return None
    check = gate_check(gate, "combined")
    if check is not None and check.outcome == gate.verdict.outcome:
        return None
    return verdict_text(gate)


def gate_check(gate: GateResult | None, quantity: str) -> GateCheck | None:
    if gate is None:
        return None
    return next((c for c in gate.verdict.checks if c.quantity == quantity), None)


@dataclass(frozen=True)
class FailedGate:
    """A failed test item with the pairs to look at first, from its own slice.

    ``worst`` leaves out pairs already listed under an earlier failed item (``repeated`` counts them), so a
    report lists each pair once however many items judged it.
    """

    gate: GateResult
    quantity: str
    worst: tuple[PairResult, ...]
    repeated: int = 0

    @property
    def title(self) -> str:
        """``<nodeid> · category_drift L5 · 5 users: ρ 0.711 [0.633, 0.789] < 0.95``."""
        return f"{self.gate.nodeid or self.gate.slice} · {slice_text(self.gate)}: {failed_reason(self.gate)}"

    @property
    def short_title(self) -> str:
        """The title with the first failed check only (``+3 checks`` for the others)."""
        checks = self.gate.verdict.failed_checks
        reason = failed_reason(replace(self.gate, verdict=replace(self.gate.verdict, checks=checks[:1])))
        more = f" (+{len(checks) - 1} checks)" if len(checks) > 1 else ""
        return f"{self.gate.nodeid or self.gate.slice} · {slice_text(self.gate)}: {reason}{more}"


def slice_text(gate: GateResult) -> str:
    """The slice a gate judged: ``category_drift L5 · 5 users`` (all kinds: ``5 kinds L1–L5 · 20 users``)."""
    scope = gate.scope
    if not scope:
        return gate.slice
    kinds = scope.get("kinds", [])
    what = kinds[0] if len(kinds) == 1 else f"{len(kinds)} kinds"
    users = _plural_of(len(scope.get("users", [])), "user")
    return f"{what} {_levels(scope.get('severities', []))} · {users}"


def _levels(severities: Sequence[int]) -> str:
    ordered = sorted(severities)
    if len(ordered) > 2 and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return f"L{ordered[0]}–L{ordered[-1]}"
    return ",".join(f"L{s}" for s in ordered)


def _plural_of(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def failed_reason(gate: GateResult) -> str:
    """Why a gate failed, with its own thresholds: each failed check, else its message's first sentence."""
    checks = gate.verdict.failed_checks
    if checks:
        return "; ".join(f"{'ρ' if c.quantity == 'combined' else c.quantity} {fmt_interval(c.interval)} < "
                         f"{c.threshold:g}" for c in checks)
    return trim(gate.verdict.message.split(". ")[0], 160) or gate.verdict.outcome


def failed_gates(run: RunResult, model: str, n: int = 3, *, repeat: bool = False) -> list[FailedGate]:
    """Every failed test item of the model (overall first, then by kind), each with its ``n`` worst pairs
    from its own slice; pairs listed under an earlier item are not listed again unless ``repeat``."""
    order = {k: i for i, k in enumerate([OVERALL, *ordered_kinds(g.slice for g in run.gates)])}
    failed = sorted((g for g in run.gates if g.model == model and g.verdict.outcome == FAIL),
                    key=lambda g: (order.get(g.slice, len(order)), g.nodeid))
    shown: set[PairKey] = set()
    out = []
    for gate in failed:
        quantity = failing_quantity(gate)
        pairs = gate_pairs(run, gate)
        fresh = pairs if repeat else [p for p in pairs if p.key not in shown]
        worst = worst_pairs(fresh, n, quantity=quantity)
        repeated = 0 if repeat else len({p.key for p in worst_pairs(pairs, n, quantity=quantity)} & shown)
        shown.update(p.key for p in worst)
        out.append(FailedGate(gate, quantity, tuple(worst), repeated))
    return out


def spread_text(summary: Summary) -> str | None:
    """The spread of user means, with the history-length strata when it exceeds the paper's limit."""
    spread = summary.user_spread
    if spread.sd is None:
        return None
    text = f"sd of user means {spread.sd:.3f}"
    if not spread.stratified:
        return text
    strata = " · ".join(f"{st.label} ({st.min_length:.0f}–{st.max_length:.0f} interactions, "
                        f"{st.n_users} users) {fmt_interval(st.mean)}" for st in spread.strata)
    return f"{text} > {spread.sd_limit:g}: by history length {strata}"


def kind_tests_text(tests: KindDifferences | None) -> str | None:
    """Friedman (users as blocks) first, then the paper's one-way ANOVA with partial η²."""
    if tests is None:
        return None
    parts = []
    if tests.friedman is not None:
        stat, p = tests.friedman
        parts.append(f"Friedman χ² {stat:.2f}, p {fmt_p(p)} ({tests.friedman_users} users)")
    anova = tests.anova
    if anova is not None and anova.f is not None:
        eta = f", partial η² {anova.partial_eta_sq:.3f}" if anova.partial_eta_sq is not None else ""
        parts.append(f"ANOVA F({anova.df_between},{anova.df_within}) {anova.f:.2f}, p {fmt_p(anova.p)}{eta}")
    return "; ".join(parts) or None


def facts(summary: Summary, *, failures_note: str = "") -> list[tuple[str, str]]:
    """The findings rows every format shows after the tables, as (label, value) pairs."""
    rows = [("Severity degradation L1 → L5", fmt_pct(summary.degradation_pct)),
            ("Noise floor (same history, resampled)",
             fmt_interval(summary.noise_floor) if summary.noise_floor else "not measured (no control pairs)")]
    if summary.weakest_metric:
        mean = summary.by_metric[summary.weakest_metric].mean
        rows.append(("Weakest dimension", f"{summary.weakest_metric} ({fmt_mean(mean)})"))
    if summary.weakest_kind:
        mean = summary.by_kind[summary.weakest_kind].mean
        rows.append(("Weakest perturbation", f"{summary.weakest_kind} ({fmt_mean(mean)})"))
    lengths = sorted(u.history_length for u in summary.by_user)
    if lengths:
        rows.append(("Interactions per prompt", f"{lengths[0]}–{lengths[-1]} (median "
                                                f"{statistics.median(lengths):g}; the original histories)"))
    failures = f"{summary.n_failures}{failures_note}" if summary.n_failures else "0"
    originals = {(f.key.model, f.key.user_id, f.key.item_id) for f in summary.failures
                 if f.detail.startswith(ORIGINAL_FAILED)}
    if originals:
        from_original = sum(f.detail.startswith(ORIGINAL_FAILED) for f in summary.failures)
        users = "1 user's" if len(originals) == 1 else f"{len(originals)} users'"
        failures += (f"; {from_original} of them because {users} original explanation failed, which "
                     "scores every pair of that user 0")
    rows.append(("Generation failures", failures))
    if summary.keyword_empty:
        count = len(summary.keyword_empty)
        rows.append(("Empty keyword sets", f"{count} pair{'' if count == 1 else 's'} flagged for review"))
    spread = spread_text(summary)
    if spread:
        rows.append(("User spread", spread))
    kinds_text = kind_tests_text(summary.kind_tests)
    if kinds_text:
        rows.append(("Kinds differ?", kinds_text))
    rows.append(("Recommendation", summary.recommendation))
    return rows


def sensitivity_rows(summary: Summary) -> list[tuple[str, str]]:
    """The guard's rows every format shows (label, value): how much the explanations depend on the user."""
    g = summary.sensitivity
    if g is None:
        return [("Cross-user control", "not measured (guard off)")]
    from ..guard import describe

    rows = [("Another user's history (ρ_swap)", fmt_interval(g.swap)),
            ("Sensitivity ρ_floor − ρ_swap", f"{fmt_interval(g.sensitivity)} · needs ≥ {g.min_sensitivity:g} "
                                              f"· {g.outcome}"),
            ("Discrimination Δ = ρ_pert − ρ_swap", fmt_interval(g.delta))]
    if g.relative is not None:
        floor = "1 (temperature 0)" if g.floor >= 1.0 else f"{fmt_mean(g.floor)} (noise floor)"
        rows.append(("Relative robustness R", f"{_fmt_relative(g.relative)} · ρ_floor {floor}"))
    if summary.delta_by_kind:
        rows.append(("Δ (R) by perturbation", " · ".join(
            f"{k} {fmt_mean(v.mean)}" + (f" ({summary.relative_by_kind[k].mean:.2f})"
                                         if k in summary.relative_by_kind else "")
            for k, v in summary.delta_by_kind.items())))
    rows.append(("Insensitive users", f"{len(g.insensitive_users)} of {g.n_users} (limit "
                                       f"{100 * g.max_insensitive_share:g} %)"
                 + (f": {', '.join(g.insensitive_users[:8])}" + (" …" if len(g.insensitive_users) > 8 else "")
                    if g.insensitive_users else "")))
    rows.append(("Same text for another user", f"{g.identical} of {g.n_cases} cases"))
    if g.history_reference is not None:
        rows.append(("Mentions the user's history", f"{fmt_interval(g.history_reference)} of explanations"
                     + (f" · needs ≥ {g.min_history_reference:g} · {g.grounding_outcome}"
                        if g.grounding_outcome else "")))
    if g.unsupported is not None:
        rows.append(("Unsupported mentions", f"{fmt_interval(g.unsupported)} of explanations name a "
                                             "catalog category or title in neither history nor item"))
    rows.append(("Guard", describe(g)))
    if g.example is not None:
        ex = g.example
        rows.append((f"Example: item {ex.item_id}", f"for user {ex.user_id}: “{trim(ex.user_text, 160)}” — "
                     f"for user {ex.donor_id}: “{trim(ex.donor_text, 160)}” (ρ {ex.combined:.3f})"))
    return rows


def guard_properties(g: GuardResult) -> list[tuple[str, str]]:
    """The guard's numbers as (name, text) pairs: JUnit properties, one-line summaries."""
    def num(value: float) -> str:
        return f"{value:.4f}" if math.isfinite(value) else "nan"

    props = [("guard", g.outcome), ("rho_swap", num(g.swap.mean)), ("sensitivity", num(g.sensitivity.mean)),
             ("delta", num(g.delta.mean)), ("delta_interval", f"[{num(g.delta.low)}, {num(g.delta.high)}]"),
             ("relative", num(g.relative.mean) if g.relative is not None else "nan"),
             ("insensitive_users", f"{len(g.insensitive_users)}/{g.n_users}"),
             ("identical_for_another_user", f"{g.identical}/{g.n_cases}")]
    if g.history_reference is not None:
        props.append(("history_reference", num(g.history_reference.mean)))
    if g.unsupported is not None:
        props.append(("unsupported_mentions", num(g.unsupported.mean)))
    return props


def guard_line(summary: Summary) -> str:
    """One line on the guard of a model (``compare``, paper tables)."""
    g = summary.sensitivity
    if g is None:
        return f"{summary.model}: no cross-user controls (guard off or an older report)"
    relative = f" · R {_fmt_relative(g.relative)}" if g.relative is not None else ""
    grounding = (f" · mentions the history {100 * g.history_reference.mean:.0f} %"
                 if g.history_reference is not None else "")
    return (f"{summary.model}: ρ_swap {fmt_interval(g.swap)} · S {fmt_interval(g.sensitivity)} · Δ "
            f"{fmt_interval(g.delta)}{relative} · insensitive users {len(g.insensitive_users)} of {g.n_users}"
            f" · identical {g.identical} of {g.n_cases}{grounding} · {g.outcome}")


def _fmt_relative(interval: Interval) -> str:
    if math.isfinite(interval.low) and math.isfinite(interval.high):
        return f"{interval.mean:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
    return f"{interval.mean:.2f} [interval needs ≥ 2 users]"

