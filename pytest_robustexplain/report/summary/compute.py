"""The :class:`Summary` of one model's pairs, computed once for every report format: overall ρ, by kind, by
metric, by severity, kind × severity, per user, severity degradation, noise floor, weakest dimension and
perturbation, generation failures, flagged pairs, the guard and the opt-in attacks, and a one-line
recommendation. Every interval is cluster-robust by user (``stats.cluster_interval``): pairs sharing a user
share a history and an original explanation, so they are not independent.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ...checks import DEFAULT_CHECKS, ModelPart, further
from ...metrics import script_of, tagger_reads
from ...results import (
    METRICS,
    AttackResult,
    FaithfulnessResult,
    Fields,
    Finding,
    FlipResult,
    GuardResult,
    Interval,
    PairKey,
    PairResult,
    PolarityResult,
    RunResult,
    metrics_of,
    plain,
    price_for,
)
from ..formatting import finite, finite_dict, interval_dict
from .advice import argmin, recommend, unless_failed
from .gates import OUTCOME_RANK, gate_thresholds, ordered_kinds
from .spend import model_money, model_time, token_cost

if TYPE_CHECKING:
    from ...stats import KindDifferences, Stratum, UserSpread

METRIC_DESCRIPTIONS: dict[str, str] = {
    "semantic": "BoW cosine", "keyword": "POS Jaccard", "structural": "BLEU-4", "length": "",
    "embedding": "embedding cosine",
}
# The paper: fewer than 50 pairs per kind makes its statistical tests unreliable.
MIN_PAIRS_PER_KIND = 50

@dataclass(frozen=True)
class FailureRecord(Fields):
    """A pair whose original or perturbed explanation could not be generated (scored 0 everywhere)."""

    key: PairKey
    failure: str
    detail: str


@dataclass(frozen=True)
class UserStat(Fields):
    """ρ of one user's pairs: mean, standard deviation and count."""

    user_id: str
    n: int
    mean: float
    sd: float
    history_length: int


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
    # Pairs (controls included) with a reply the server cut at the token limit, their replies cut, all the
    # model's pairs, and the limit the run asked for (num_predict; None when the record does not say).
    cut_pairs: int = 0
    cut_replies: int = 0
    n_all_pairs: int = 0
    num_predict: int | None = None
    # Pairs whose prompt did not fit the model's context (refused or truncated by the server), their users
    # and the first one's sentence (tokens and limit).
    unfit_pairs: int = 0
    unfit_users: tuple[str, ...] = ()
    unfit_detail: str = ""
    # "balanced" when users ran one severity per kind (the rotation), so that severity comparisons are
    # between users; "full" (or unrecorded) when every user ran every severity.
    design: str = "full"
    # What the replies cost as the server counted them (:func:`token_cost`); empty when it did not say.
    cost: dict[str, Any] = field(default_factory=dict)
    # How long the model took (:func:`model_time`); empty when no reply was timed.
    time: dict[str, Any] = field(default_factory=dict)
    # What the replies cost at the model's price (:func:`model_money`); empty without a price or tokens.
    money: dict[str, Any] = field(default_factory=dict)
    # Pairs with an explanation the keyword tagger cannot read (not Latin script: ``metrics.tagger_reads``)
    # and the scripts those were in, most pairs first.
    keyword_unread: int = 0
    unread_scripts: tuple[str, ...] = ()
    # The faithfulness judge over every explanation it read of this model (judge-model); None without one.
    faithfulness: FaithfulnessResult | None = None
    # Preference polarity over this model's original explanations; None when no history had a dislike.
    polarity: PolarityResult | None = None
    # The counterfactual preference flip over this model's preference_flip pairs; None when not run.
    flip: FlipResult | None = None
    # Every check's row from the model's gate where it came out worst (what a check's report section may
    # read, beside its pooled record above).
    findings: tuple[Finding, ...] = ()
    # The limits the model's items were gated at for polarity and the judge ("polarity":
    # max-misattributed-rate, "faithful": min-faithful-rate), when any item was: the pooled rows above are
    # reported as they are, each item decided on its own slice; absent, those rows gate nothing.
    item_limits: dict[str, float] = field(default_factory=dict)

    @cached_property
    def kind_tests(self) -> KindDifferences | None:
        """Do kinds differ? Friedman, ANOVA and (when read) Tukey HSD over ``kind_pairs``; None with fewer
        than 3 kinds. Computed on first read: only reports that show it pay for it (and ``scipy.stats``)."""
        if self.kind_pairs is None:
            return None
        from ...stats import kind_differences  # lazy: loads numpy

        return kind_differences(self.kind_pairs)

    @property
    def checks(self) -> tuple[Finding, ...]:
        """The rows of the checks without a report section of their own (the user's): the writers' table
        of further checks."""
        return further(DEFAULT_CHECKS, self.findings)

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
            "cut_pairs": self.cut_pairs,
            "cut_replies": self.cut_replies,
            "design": self.design,
            "cost": self.cost,
            "time": self.time,
            "money": self.money,
            "unfit_pairs": self.unfit_pairs,
            "unfit_users": list(self.unfit_users),
            "failures": [f.to_dict() for f in self.failures],
            "keyword_empty": [asdict(k) for k in self.keyword_empty],
            "keyword_unread": self.keyword_unread,
            "unread_scripts": list(self.unread_scripts),
            "small_kinds": list(self.small_kinds),
            "user_spread": {"sd": finite(self.user_spread.sd), "sd_limit": self.user_spread.sd_limit,
                            "stratified": self.user_spread.stratified,
                            "strata": [_stratum(st) for st in self.user_spread.strata],
                            "diversity_strata": [_stratum(st) for st in self.user_spread.diversity_strata]},
            "recommendation": self.recommendation,
            "kind_tests": plain(self.kind_tests.to_dict()) if self.kind_tests else None,
            "sensitivity": plain(self.sensitivity.to_dict()) if self.sensitivity else None,
            "delta_by_kind": {k: interval_dict(v) for k, v in self.delta_by_kind.items()},
            "relative_by_kind": {k: interval_dict(v) for k, v in self.relative_by_kind.items()},
            "attacks": [plain(a.to_dict()) for a in self.attacks],
            "faithfulness": plain({k: v for k, v in self.faithfulness.to_dict().items() if k != "texts"})
            if self.faithfulness else None,
            "polarity": plain({k: v for k, v in self.polarity.to_dict().items() if k != "cases"})
            if self.polarity else None,
            "flip": plain(self.flip.to_dict()) if self.flip else None,
            "checks": [plain(f.to_dict()) for f in self.checks],
        }


class ReportModel:
    """One run as the writers read it: the record and each model's :class:`Summary`, computed once.

    :func:`~pytest_robustexplain.engine.write_reports` makes one per run and hands it to every writer
    (terminal, JSON, Markdown, HTML, the step summary), so the kind tests (Tukey HSD, about half a second
    per model) run once, not once per format. A writer given a bare :class:`RunResult` makes its own.
    """

    def __init__(self, run: RunResult) -> None:
        self.run = run
        self._summaries: dict[str, Summary] = {}

    @classmethod
    def of(cls, run: RunResult | ReportModel) -> ReportModel:
        return run if isinstance(run, ReportModel) else cls(run)

    def summary(self, model: str) -> Summary:
        """Summarise one model's pairs (controls feed the noise floor only), once."""
        if model not in self._summaries:
            self._summaries[model] = _summarize(self.run, model)
        return self._summaries[model]


def summarize(run: RunResult | ReportModel, model: str) -> Summary:
    """Summarise one model's pairs of ``run``; given the run's :class:`ReportModel`, computed once."""
    return ReportModel.of(run).summary(model)


def _summarize(run: RunResult, model: str) -> Summary:
    from ...stats import noise_floor, severity_degradation, user_spread  # lazy: loads numpy

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
    weakest_metric = argmin({m: iv.mean for m, iv in by_metric.items() if m in METRICS})
    # The preference flip is meant to move the explanation: never the "weakest" robustness kind.
    robust_kinds = {k: iv for k, iv in by_kind.items() if k != "preference_flip"}
    weakest_kind = argmin({k: iv.mean for k, iv in robust_kinds.items()})
    users = _user_stats(pairs)
    thresholds = gate_thresholds(run, model)
    failures = tuple(FailureRecord(p.key, p.failure, p.failure_detail) for p in pairs if p.failure)
    every = (*pairs, *controls, *run.model_swaps(model))  # every comparison the model was scored on
    cut = [p for p in every if p.cut]
    unfit = [p for p in every if p.overflow]
    num_predict = run.settings.get("num_predict")
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
        recommendation=unless_failed(run, model, recommend(
            by_metric, robust_kinds, thresholds, n_failures=len(failures), n_pairs=len(pairs), n_cut=len(cut),
            n_all=len(every), n_unfit=len(unfit))),
        kind_pairs=tuple(pairs) if len(kinds) >= 3 else None,
        **_pooled(ModelPart(run, model, pairs, controls, thresholds["combined"], kinds)),
        cut_pairs=len(cut), cut_replies=sum(len(p.cut) for p in cut), n_all_pairs=len(every),
        num_predict=num_predict if type(num_predict) is int else None,  # a record's value, checked
        **_unread(pairs),
        design=_design(pairs), cost=token_cost(every),
        time=model_time(every, run.model_gates(model)),
        money=model_money(every, run.model_gates(model),
                          price_for(run.settings.get("price"), model)),
        unfit_pairs=len(unfit), unfit_users=tuple(sorted({p.key.user_id for p in unfit})),
        unfit_detail=f"user {unfit[0].key.user_id}'s {unfit[0].overflow_detail}" if unfit else "",
        findings=model_checks(run, model),
    )


def _pooled(part: ModelPart) -> dict[str, Any]:
    """What the checks pool over the model's items for their sections (``Check.pool``), by summary field;
    what several checks pool into one field adds up (the attacks' records, the limits items were gated at)."""
    out: dict[str, Any] = {}
    for check in DEFAULT_CHECKS:
        for name, value in check.pool(part).items():
            before = out.get(name)
            out[name] = ({**before, **value} if isinstance(before, dict) else
                         (*before, *value) if isinstance(before, tuple) else value)
    return out


def model_checks(run: RunResult, model: str) -> tuple[Finding, ...]:
    """Every check's row over this model's gates: per check, the gate where it came out worst (FAIL before
    INCONCLUSIVE before PASS; the first on a tie)."""
    worst: dict[str, Finding] = {}
    for gate in run.model_gates(model):
        for name, row in gate.verdict.findings.items():
            if name not in worst or _rank(row) < _rank(worst[name]):
                worst[name] = row
    return tuple(worst.values())


def _rank(row: Finding) -> int:
    return OUTCOME_RANK.get(row.outcome or "", len(OUTCOME_RANK))


def _design(pairs: Sequence[PairResult]) -> str:
    """"balanced" when the pairs show it — the run had several severities, and no user ran one kind at
    two of them — else "full" (a marker may set the design per test, so the pairs decide)."""
    seen: dict[tuple[str, str, str], set[int]] = {}
    for p in pairs:
        seen.setdefault((p.key.user_id, p.key.item_id, p.key.kind), set()).add(p.key.severity)
    several = len({p.key.severity for p in pairs}) > 1
    return "balanced" if several and len(seen) > 1 and all(len(s) == 1 for s in seen.values()) else "full"


def _stratum(st: Stratum) -> dict[str, Any]:
    """A user-spread stratum in the JSON (``min_length``/``max_length``: the range of the measure it is cut
    by, history length or diversity)."""
    return {"label": st.label, "min_length": st.min_length, "max_length": st.max_length,
            "n_users": st.n_users, "mean": interval_dict(st.mean)}


def _unread(pairs: Sequence[PairResult]) -> dict[str, Any]:
    """How many pairs have an explanation the keyword tagger cannot read, and in which scripts (each
    distinct text looked at once: an original serves many pairs)."""
    script: dict[str, str | None] = {}  # text -> None when the tagger reads it, else its script
    scripts: Counter[str] = Counter()
    unread = 0
    for p in pairs:
        texts = [t for t in (p.original, p.perturbed) if p.failure is None and t.strip()]
        for t in texts:
            if t not in script:
                script[t] = None if tagger_reads(t) else script_of(t)
        missed = [script[t] for t in texts if script[t] is not None]
        if missed:
            unread += 1
            scripts[missed[0] or ""] += 1
    return {"keyword_unread": unread, "unread_scripts": tuple(name for name, _ in scripts.most_common())}


def interval_of(pairs: Sequence[PairResult], quantity: str = "combined") -> Interval:
    """Mean of ``quantity`` over ``pairs`` with its user-clustered interval (a user metric: over the pairs
    of the tests that measured it)."""
    from ...stats import cluster_interval  # lazy: loads numpy

    pairs = [p for p in pairs if p.carries(quantity)]
    return cluster_interval([p.metric(quantity) for p in pairs], [p.key.user_id for p in pairs])


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
