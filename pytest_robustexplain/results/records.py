"""Plain result records shared by the sweep, the statistics and the reports.

Kept free of heavy imports so the plugin, the reports and the CLI can all use them cheaply. A
:class:`PairResult` is one (original, perturbed) explanation pair with its four scores; control pairs
(the same history explained again with another sample seed) use ``kind == CONTROL_KIND`` and severity 0
and measure the model's own noise floor. Cross-user control pairs (``kind == SWAP_KIND``, severity 0) hold
the explanation of the same item for the user and for a *donor* user with a different history: how much
the explanation depends on the user at all (see :mod:`pytest_robustexplain.checks.controls`).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, TypeGuard, cast

from ..sanitize import visible
from ..wording import fmt_interval, trim

if TYPE_CHECKING:  # types only: the records below refer to them, no module above is imported
    from .controls import AttackResult, GuardResult
    from .faithful import FaithfulnessResult, FlipResult, PolarityResult

NO_LEGACY = object()


@dataclass(frozen=True)
class Rule:
    """What the report reader (``results.readers``) checks of a field beyond its type — ``test`` on the
    value read, refused as "expected <expected>" — and what a report written before the field was recorded
    reads as (``legacy``), attached to a record's field with ``Annotated``: each rule said once, beside its
    field, and read by the one reader that rebuilds every record from its dataclass."""

    test: Callable[[Any], bool] | None = None
    expected: str = ""
    legacy: Any = NO_LEGACY
    # A record nested in schema 3 whose fields an older report wrote flat in the parent: the parent's
    # object -> this field's object, read when the field is absent; for a ``keyed`` mapping, entries an
    # older report wrote in the parent, beside the ones it holds (schema 4's ``checks``).
    moved: Callable[[Mapping[str, Any]], Any] | None = None
    # A mapping whose values' types depend on their keys (``Verdict.details``): key -> the type its value is
    # read as (``Any`` for a key it does not know: a user's check's own details, kept as written).
    keyed: Callable[[str], Any] | None = None


def is_number(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a number as JSON, YAML or a record may hold one: an int or a float, never a bool
    (an int subclass: ``true`` must not read as 1)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_score(value: Any) -> bool:
    """Whether ``value`` is a score: a finite number in [0, 1], not a bool (every score the package reads —
    a report's, a score cache's line, a user metric's answer — is checked by this one rule)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) \
        and 0.0 <= value <= 1.0


# A pair's score: NaN, null or out of range would break every aggregate.
Score = Annotated[float, Rule(is_score, "a score between 0 and 1")]
# Names a writer renders and JUnit properties are built from: a kind's or a metric's shape, nothing else.
KindName = Annotated[str, Rule(lambda v: bool(KIND_NAME.match(v)), "a perturbation kind's name (lowercase "
                                                                   "letters, digits, underscores)")]
Severity = Annotated[int, Rule(lambda v: v == 0 or SEVERITY_RANGE[0] <= v <= SEVERITY_RANGE[1],
                               "0 (a control) or 1–5")]
# Which of a pair's replies were cut, or prompts did not fit: each side once.
Sides = Annotated[tuple[str, ...], Rule(lambda v: all(c in CUT_REPLIES for c in v) and len(set(v)) == len(v),
                                        "a list of original / perturbed")]
Tokens = Annotated[tuple[int, ...], Rule(lambda v: not v or (len(v) == 4 and all(n >= 0 for n in v)),
                                         "four token counts >= 0")]
# Each judge model's token counts (``JudgeStats.tokens``): what its replies cost at the price set.
JudgeTokens = Annotated[dict[str, dict[str, int]], Rule(
    lambda v: all(n >= 0 for counts in v.values() for n in counts.values()), "token counts >= 0")]
UserScores = Annotated[dict[str, float], Rule(
    lambda v: all(KIND_NAME.match(k) and is_score(x) for k, x in v.items()),
    "metric names with scores between 0 and 1")]

METRICS: tuple[str, ...] = ("semantic", "keyword", "structural", "length")  # the paper's four
# Relative robustness R (guard.relative_terms) where a comparison or a baseline sets it beside the scores.
RELATIVE = "relative"
# The opt-in fifth metric (cosine of embeddings; ``embed_model``): absent unless configured, so the paper's
# protocol, reports and signature are unchanged without it.
EMBEDDING = "embedding"
ALL_METRICS: tuple[str, ...] = (*METRICS, EMBEDDING)


def user_metric_name(name: object) -> bool:
    """Whether ``name`` can name a user's own metric (``metrics.user``): a lower-case identifier that is not
    a built-in quantity and not one typo away from a built-in metric — such a name in ``min_metric`` or
    ``weights`` is taken for the typo (``semantc``), so a metric cannot be registered under it either."""
    if not isinstance(name, str) or not KIND_NAME.match(name) or name in (*ALL_METRICS, "combined", RELATIVE):
        return False
    return not difflib.get_close_matches(name, ALL_METRICS, n=1, cutoff=TYPO_CUTOFF)


# How close (difflib's ratio) an unknown name must be to a known one to be called its typo ("did you mean").
TYPO_CUTOFF = 0.6
# RunResult.calls key prefix of the calls each host answered, when the run spread them over several hosts:
# "answered by http://box-a:11434" -> 120 (every report lists the calls, so each names the hosts).
ANSWERED_BY = "answered by "
# The run's call counter of prompt tokens the server took from its prompt cache (what it said it skipped).
REUSED_TOKENS = "prompt tokens the server reused"
# PairResult.failure_detail of a pair whose *original* explanation failed (every pair of that user then
# scores 0): the reports count these by user.
ORIGINAL_FAILED = "the original explanation failed"
CONTROL_KIND = "control"
SWAP_KIND = "swap"
CONTROL_KINDS: frozenset[str] = frozenset({CONTROL_KIND, SWAP_KIND})  # pairs that are never gated as such
OVERALL = "overall"  # the slice of a test item that gates all its perturbation kinds together
# How many items noise and dilution insert at severity s: round(0.1·s·n) of a history of n (the package's
# rule), or exactly s (the paper's and the guide's words). A run-wide setting, in the signature when "paper".
COUNTS_PROPORTIONAL, COUNTS_PAPER = "proportional", "paper"
PERTURBATION_COUNTS: tuple[str, ...] = (COUNTS_PROPORTIONAL, COUNTS_PAPER)


def counts_signature(counts: str) -> str:
    """The signature's part for the perturbation counts: '' for the default (every signature written before
    the setting existed stays valid), ``|counts:paper`` for the paper's literal rule."""
    return "" if counts == COUNTS_PROPORTIONAL else f"|counts:{counts}"


def counts_of(signature: str) -> str:
    """The perturbation-counts rule a run's signature records (:func:`counts_signature`; the default when
    it records none, as every signature written before the setting existed)."""
    return next((part.split(":", 1)[1] for part in signature.split("|") if part.startswith("counts:")),
                COUNTS_PROPORTIONAL)


@dataclass(frozen=True, order=True)
class PairKey:
    """Identifies a pair across runs: baselines and model comparisons match on it (model aside)."""

    model: str
    user_id: str
    item_id: str
    kind: KindName
    severity: Severity
    repeat: int

    def match_key(self) -> tuple[str, str, str, int, int]:
        """The key without the model, for pairing two runs or two models."""
        return (self.user_id, self.item_id, self.kind, self.severity, self.repeat)

    def label(self) -> str:
        # ids come from data files: one line, controls shown

        return visible(f"user {self.user_id} · item {self.item_id} · {self.kind} L{self.severity} · "
                       f"r{self.repeat}")


@dataclass(frozen=True)
class PairResult:
    """One scored pair.

    ``failure`` is None for a scored pair, otherwise why it scores 0 everywhere ("empty", "refusal",
    "error"), for the original or perturbed explanation. ``keyword_empty`` flags pairs whose keyword sets
    were both empty (scored 0.0, to be reviewed).
    """

    key: PairKey
    semantic: Score
    keyword: Score
    structural: Score
    length: Score
    combined: Score
    original: str
    perturbed: str
    changes: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    failure_detail: str = ""
    keyword_empty: bool = False
    cached_original: bool = False
    cached_perturbed: bool = False
    latency_s: float = 0.0  # the perturbed (or control) reply's generation time
    history_length: int = 0
    embedding: Score | None = None  # the opt-in fifth metric; None when the run has no embedding model
    # Which of the pair's replies ("original", "perturbed") the server cut at the token limit (num_predict):
    # scores of unfinished text, which a gate must not take as a measurement (MAX_CUT_SHARE).
    cut: Sides = ()
    # Which of the pair's prompts did not fit the model's context — refused by the server (failure
    # "context") or truncated by it (Ollama drops the start silently) — and how far the first overran it:
    # the model did not see the history whole, so no gate takes the pair as a measurement.
    overflow: Sides = ()
    overflow_detail: str = ""
    # What the pair's two replies took as the server counted them: (original prompt, original completion,
    # perturbed prompt, perturbed completion) tokens, 0 where it did not say; empty when neither did
    # (template explainer, older reports). Cached replies keep the count of the call that made them.
    tokens: Tokens = ()
    # The original reply's generation time (shared by the user's pairs; a cached reply keeps the time of the
    # call that made it); 0 in reports written before it was recorded.
    original_latency_s: float = 0.0
    # The original history's interaction diversity (``UserHistory.diversity``: the effective number of its
    # categories); None in reports written before it was recorded.
    history_diversity: float | None = None
    # The user's own metrics (``metrics.user``) measured for the test that holds the pair, by name; empty
    # when it has none (and then not written, as before they existed).
    user_metrics: UserScores = field(default_factory=dict)

    def carries(self, name: str) -> bool:
        """Whether the pair has this metric: a user metric only its test measured, the embedding only when
        the run measured it."""
        if name in self.user_metrics:
            return True
        return name in (*ALL_METRICS, "combined") and getattr(self, name) is not None

    def metric(self, name: str) -> float:
        """A metric by name; ``combined`` (ρ) and the user's own metrics included."""
        if name in self.user_metrics:
            return float(self.user_metrics[name])
        if name not in (*ALL_METRICS, "combined"):
            raise KeyError(f"pair {self.key.label()} has no metric {name!r} (its user metrics: "
                           f"{', '.join(self.user_metrics) or 'none'})")
        return float(getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.embedding is None:  # runs without the fifth metric write what they always wrote
            del data["embedding"]
        for name in ("cut", "overflow", "tokens"):  # nor pairs whose replies were whole and prompts fitted
            if getattr(self, name):
                data[name] = list(getattr(self, name))
            else:
                del data[name]
        if not self.overflow_detail:
            del data["overflow_detail"]
        if not self.user_metrics:
            del data["user_metrics"]
        if self.history_diversity is None:
            del data["history_diversity"]
        return data


def merge_pairs(known: PairResult | None, pair: PairResult) -> PairResult:
    """One pair two tests share, recorded once: with the user metrics of both (each test measures its own
    directory's), names sorted so every door and process writes it alike."""
    if known is None or not known.user_metrics:
        return pair
    return replace(pair, user_metrics=dict(sorted({**known.user_metrics, **pair.user_metrics}.items())))


def answered_by(calls: dict[str, int]) -> dict[str, int]:
    """Calls per host (sorted by URL), from ``RunResult.calls``; empty unless the run spread its calls over
    several hosts."""
    return {k[len(ANSWERED_BY):]: n for k, n in sorted(calls.items()) if k.startswith(ANSWERED_BY)}


def metrics_of(pairs: Iterable[PairResult]) -> tuple[str, ...]:
    """The metrics these pairs carry: the four, ``embedding`` when the run measured it, then the user's own
    (sorted by name, so every door and every process lists them alike)."""
    pairs = list(pairs)
    builtin = ALL_METRICS if any(p.embedding is not None for p in pairs) else METRICS
    return (*builtin, *sorted({name for p in pairs for name in p.user_metrics}))


# Cut replies: the replies a pair can have cut, and the share of a gate's pairs with a cut reply above which
# the gate is not measured (INCONCLUSIVE, naming the fix) rather than scored as normal.
CUT_REPLIES: tuple[str, ...] = ("original", "perturbed")
MAX_CUT_SHARE = 0.05


def too_many_cut(cut: int, pairs: int) -> bool:
    """Whether ``cut`` of ``pairs`` pairs with a cut reply is more than a gate tolerates (the one rule the
    gate, the findings row and the recommendation read)."""
    return pairs > 0 and cut > MAX_CUT_SHARE * pairs

# Gate outcomes.
PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"
INSENSITIVE = "INSENSITIVE"  # the explanations do not depend on the user's history (the guard)
OUTCOMES: tuple[str, ...] = (PASS, FAIL, INCONCLUSIVE, INSENSITIVE)

# Perturbation severities (controls and cross-user pairs have severity 0) and the shape of a kind's name.
SEVERITY_RANGE = (1, 5)
KIND_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

# What the faithfulness judge reads (``judge``): each case's original, or every explanation too.
JUDGE_SCOPES: tuple[str, ...] = ("originals", "all")
ORIGINAL = "original"  # JudgedText.kind of the user's own (unperturbed) explanation

# Guard policies: what an INSENSITIVE finding does to the gate.
GUARD_POLICIES: tuple[str, ...] = ("fail", "warn", "off")
# The method's thresholds (RobustExplain): the defaults of min-combined and min-metric, and what a report that
# records none was gated at.
DEFAULT_MIN_COMBINED = 0.5
DEFAULT_MIN_METRIC = 0.35
# The defaults of the cross-user control's checks (the checks declare the settings; the records that keep
# them default to the same numbers, and ``guard`` hands them on).
DEFAULT_MIN_SENSITIVITY = 0.05
DEFAULT_MAX_INSENSITIVE_SHARE = 0.2
DEFAULT_MAX_IDENTICAL_SHARE = 0.05
DEFAULT_MIN_RELATIVE = 0.5
DEFAULT_MAX_COPY_RATE = 0.1
DEFAULT_MIN_HISTORY_REFERENCE = 0.5
DEFAULT_MAX_UNSUPPORTED_RATE = 0.5
# The attacks' limits (max-injection-rate: any confirmed injection fails; max-hijack-rate), declared by their
# checks and read by the reports of a run that recorded none.
DEFAULT_MAX_INJECTION_RATE = 0.0
DEFAULT_MAX_HIJACK_RATE = 0.2


class Fields:
    """A record whose JSON form is its fields, records within it included (``dataclasses.asdict``)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(cast(Any, self))


def is_control(kind: str) -> bool:
    """Whether a pair of this kind is a control (noise floor or cross-user swap), not a perturbation."""
    return kind in CONTROL_KINDS


@dataclass(frozen=True)
class Interval(Fields):
    """A mean with its confidence interval (cluster-robust by user; see ``stats.cluster_interval``)."""

    mean: float
    low: float
    high: float
    n: int
    n_clusters: int
    confidence: float = 0.95

    def fmt(self, digits: int = 3) -> str:
        """``0.513 [0.497, 0.529]`` — the only way a score is ever shown (``— [0.000, 1.000]`` unmeasured)."""
        mean = "—" if math.isnan(self.mean) else f"{self.mean:.{digits}f}"
        return f"{mean} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


@dataclass(frozen=True)
class GateCheck(Fields):
    """One gated quantity (``combined`` or a metric name) against its threshold."""

    quantity: str
    threshold: float
    interval: Interval
    outcome: str  # PASS / FAIL / INCONCLUSIVE
    fragile: bool = False  # the interval straddles the threshold: a rerun could flip it
    flip_probability: float | None = None


@dataclass(frozen=True)
class Finding(Fields):
    """One check's row in a verdict (``checks/``): the one vocabulary every writer shows — the check, the
    measured value with its interval, the threshold it was held to, the outcome and the reason.

    ``outcome`` is PASS / FAIL / INCONCLUSIVE / INSENSITIVE, or None for a check measured and reported but
    not gated (a grounding rate without a limit, the judge without ``min-faithful-rate``). ``bound`` says
    which side ``threshold`` binds: ``"min"`` (the value must reach it) or ``"max"`` (it must not exceed
    it). ``enforced`` is False where the outcome only warns (``guard=warn``) or is not gated. ``value``
    is a rate's or a mean's interval (a share's exact one-sided bounds as its ends); ``counts`` the
    numbers behind it (e.g. ``{"hits": 2, "explanations": 40}``).
    """

    check: str
    outcome: str | None
    reason: str = ""
    value: Interval | None = None
    threshold: float | None = None
    bound: str = "min"
    enforced: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    examples: tuple[str, ...] = ()  # a few cases behind a failing share, one line each
    # What the verdict's message said for it when it decided something ("Relative FAIL: …"); "" when it
    # said nothing (it passed, or it is the stability verdict the message starts from).
    note: str = ""
    # The report section its check names (``Check.section``), so a writer without the check's code — the
    # JSON read in another process, a conftest's check — still shows it there; "" for the further checks.
    section: str = ""

    def rows(self) -> list[tuple[str, str]]:
        """This row in words, the same in every writer — outcome, the value with its interval, the threshold
        and the reason — then its first example."""
        outcome = self.outcome or "reported, not gated"
        if self.outcome and not self.enforced:
            outcome += " (a warning only)"
        side = "needs ≥" if self.bound == "min" else "at most"
        limit = "" if self.threshold is None else f" · {side} {self.threshold:g}"
        text = f"{outcome} · {fmt_interval(self.value, 2)}{limit} · {self.reason}"
        return [(self.check, text), *((f"{self.check} example", trim(e, 200)) for e in self.examples[:1])]


@dataclass(frozen=True)
class Verdict(Fields):
    """The decision for one gated slice (a test item: one perturbation kind, or all of them)."""

    outcome: str
    mode: str = "mean"  # "mean" (the method's rule), "confident", "sequential"
    message: str = ""
    users_needed: int | None = None  # INCONCLUSIVE: how many more users would likely decide it
    # Every check's row (``checks/``), keyed by check name in the order they were decided: what every writer
    # shows of a check, the user's own included.
    findings: Annotated[Mapping[str, Finding], Rule(lambda v: all(KIND_NAME.match(k) for k in v),
                                                    "check names as keys")] = field(default_factory=dict)
    # Each check's own detailed record, by the name it keeps it under (``Check.record``, :data:`DETAILS`):
    # stability's rows (``stability``: ρ and each metric against its threshold), the cross-user control's
    # ``guard`` (the four checks read from it), ``attacks``, ``faithfulness``, ``polarity``, ``flip``. Before
    # schema 5 stability's rows were the verdict's ``checks``, before schema 4 the others its fields too:
    # read from there.
    details: Annotated[Mapping[str, Any], Rule(
        lambda v: all(KIND_NAME.match(k) for k in v), "record names as keys", keyed=lambda k: detail_type(k),
        moved=lambda v: {k: v[was] for k, was in _BEFORE.items() if v.get(was) not in (None, [])},
    )] = field(default_factory=dict)

    @classmethod
    def of(cls, outcome: str, rows: Iterable[GateCheck], **fields: Any) -> Verdict:
        """A stability verdict: ``outcome`` with its rows (ρ and each metric against its threshold)."""
        return cls(outcome, details={"stability": tuple(rows)}, **fields)

    @property
    def checks(self) -> tuple[GateCheck, ...]:
        """Stability's rows: ρ and each gated metric against its threshold (``details["stability"]``)."""
        return tuple(self.details.get("stability", ()))

    @property
    def guard(self) -> GuardResult | None:
        """The cross-user control, when the run measured it (``details["guard"]``)."""
        return self.details.get("guard")

    @property
    def attacks(self) -> tuple[AttackResult, ...]:
        """Prompt injection / shilling in this slice, when run (``details["attacks"]``)."""
        return tuple(self.details.get("attacks", ()))

    @property
    def faithfulness(self) -> FaithfulnessResult | None:
        """The opt-in judge's finding (``judge-model``; ``details["faithfulness"]``)."""
        return self.details.get("faithfulness")

    @property
    def polarity(self) -> PolarityResult | None:
        """Liked vs disliked (ratings in the history; ``details["polarity"]``); None without."""
        return self.details.get("polarity")

    @property
    def flip(self) -> FlipResult | None:
        """The counterfactual preference flip, when the slice ran it (``details["flip"]``)."""
        return self.details.get("flip")

    def with_detail(self, name: str, record: Any) -> Verdict:
        """This verdict with a check's detailed record kept under ``name``."""
        return replace(self, details={**self.details, name: record})

    @property
    def failed_checks(self) -> tuple[GateCheck, ...]:
        return tuple(c for c in self.checks if c.outcome == FAIL)

    @property
    def failing(self) -> tuple[str, ...]:
        """The checks that failed the item — each enforced finding that came out FAIL or INSENSITIVE, the
        regression against a baseline among them — in the order they were decided: what a writer names."""
        return tuple(name for name, f in self.findings.items()
                     if f.enforced and f.outcome in (FAIL, INSENSITIVE))


# The records the built-in checks keep in ``Verdict.details``, by name: each read back as its type.
DETAILS: tuple[str, ...] = ("stability", "guard", "attacks", "faithfulness", "polarity", "flip")
# Where a report before schema 5 (4 for the others) wrote each record in the verdict.
_BEFORE = {**{name: name for name in DETAILS}, "stability": "checks"}


def detail_type(name: str) -> Any:
    """The type a verdict's detailed record ``name`` is read as (``Any``: a name no built-in keeps)."""
    from . import controls, faithful  # cycle: the checks' records, modules that import this one

    return {"stability": tuple[GateCheck, ...], "guard": controls.GuardResult,
            "attacks": tuple[controls.AttackResult, ...],
            "faithfulness": faithful.FaithfulnessResult, "polarity": faithful.PolarityResult,
            "flip": faithful.FlipResult}.get(name, Any)


@dataclass(frozen=True)
class GateResult(Fields):
    """The verdict of one gated test item (``slice`` is a perturbation kind or ``OVERALL``).

    ``scope`` is what the verdict judged (``kinds``, ``severities``, ``users``; see :func:`gate_scope`), so
    reports show a test's worst pairs from its own slice when several tests gate one kind; empty in
    reports written before it was recorded.
    """

    nodeid: str
    slice: str
    model: str
    verdict: Verdict
    thresholds: dict[str, float] = field(default_factory=dict)
    scope: dict[str, list[Any]] = field(default_factory=dict)
    # A shard's gate (``engine/shards.py``): the gate's settings and planned users, what a merge plans from.
    plan: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        if not self.plan:  # written by shards only
            del data["plan"]
        return data

    def covers(self, pair: PairResult) -> bool:
        """Whether ``pair`` (of this gate's model) lies in the slice the verdict judged."""
        if not self.scope:  # an older report: the slice's kind is all that is known
            return self.slice == OVERALL or pair.key.kind == self.slice
        key = pair.key
        return (key.kind in self.scope.get("kinds", ()) and key.severity in self.scope.get("severities", ())
                and key.user_id in self.scope.get("users", ()))


def gate_scope(pairs: Iterable[PairResult]) -> dict[str, list[Any]]:
    """The kinds, severities and users of the pairs a verdict judged."""
    keys = [p.key for p in pairs]
    return {"kinds": sorted({k.kind for k in keys}), "severities": sorted({k.severity for k in keys}),
            "users": sorted({k.user_id for k in keys})}


@dataclass
class RunResult:
    """Everything one run produced; the JSON report is its serialisation and every renderer reads it.

    ``pairs`` holds perturbation pairs and control pairs (noise floor, cross-user swap) alike; ``calls``
    counts model calls: ``made``, ``cached`` (served from the response cache), ``failed``, ``cancelled``
    (skipped because a sequential gate had already decided).
    """

    signature: str
    seed: int
    models: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    pairs: list[PairResult] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    started_at: str = ""
    finished_at: str = ""
    package_version: str = ""
    # The faithfulness judges' tokens per judge model, summed over the run's processes (a cached reply
    # keeps its counts; ``made_*`` are the calls made now): what the judge cost. Empty without a judge.
    judge_tokens: JudgeTokens = field(default_factory=dict)
    # A shard's run (``engine/shards.py``): ``shard`` ("2/4"), ``plan`` (the plan's fingerprint), ``users``.
    shard: dict[str, Any] = field(default_factory=dict)

    def model_pairs(self, model: str, *, controls: bool = False) -> list[PairResult]:
        """This model's perturbation pairs, or its noise-floor control pairs with ``controls``."""
        if controls:
            return [p for p in self.pairs if p.key.model == model and p.key.kind == CONTROL_KIND]
        return [p for p in self.pairs if p.key.model == model and not is_control(p.key.kind)]

    def model_gates(self, model: str) -> list[GateResult]:
        """This model's gates in one order, by test id and slice, whatever order they were recorded in
        (under xdist, as they finish): what a writer picks "first" must not depend on timing."""
        return sorted((g for g in self.gates if g.model == model), key=lambda g: (g.nodeid, g.slice))

    def model_swaps(self, model: str) -> list[PairResult]:
        """This model's cross-user control pairs (explanation for the user vs for a donor user)."""
        return [p for p in self.pairs if p.key.model == model and p.key.kind == SWAP_KIND]


@dataclass(frozen=True)
class ModelInfo:
    """What preflight learned about the model; shown in report headers and part of cache keys."""

    name: str
    backend: str
    is_llm: bool = True
    digest: str | None = None
    parameter_size: str | None = None
    quantization: str | None = None
    server_version: str | None = None
    host: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        """One-line description for report headers, e.g. ``llama3.1:8b (sha256:ab12…, 8.0B, Q4_K_M)``."""
        details = [d for d in (self._short_digest(), self.parameter_size, self.quantization) if d]
        # Names and details come from the server: outside text.
        text = visible(f"{self.name} ({', '.join(details)})" if details else self.name)
        kind = self.extra.get("kind") or "template explainer"
        return text if self.is_llm else f"{text} [{kind} — not a language model]"

    def _short_digest(self) -> str | None:
        if not self.digest:
            return None
        algo, _, hexpart = self.digest.rpartition(":")
        return f"{algo + ':' if algo else ''}{hexpart[:4]}…"
