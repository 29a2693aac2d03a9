"""The interface every check implements, and the evidence it reads.

A check turns one decided slice's evidence into a finding and a decision: it **measures** (``measure``:
its own record, or None when the slice gave it nothing to measure), **decides** (``decide``: the outcome it
imposes on the item, if any, and the one sentence that says why) and gives its **row** (``finding``: the
check, the value with its interval, the threshold, the outcome and the reason — what every writer shows).
The engine runs the registry's checks in order and folds their decisions into the item's verdict by the one
combining rule (:mod:`.combine`); a check never edits the verdict itself.

Built-in checks that keep a detailed record for the reports (the cross-user control's ``GuardResult``, the
attacks, the judge, polarity, the flip) name the key of :attr:`~..results.Verdict.details` it goes in
(``record``); a user's check has its row alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from ..results import ORIGINAL_FAILED, Finding, Interval, is_number

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from ..data import EvalCase
    from ..options import OptionSpec
    from ..results import Finding, PairResult, RunResult, Verdict
    from ..stats import StopRule


class Gate(Protocol):
    """What a check reads of one test's gate (``settings.GateSettings``, above the checks, is one): the
    run's own gate settings by name, the thresholds of a slice, and — through ``__getattr__`` — every
    setting a check declares (``Check.options``) by its field name (``gate.max_copy_rate``)."""

    @property
    def alpha(self) -> float: ...
    @property
    def guard(self) -> str: ...
    @property
    def decision(self) -> str: ...
    @property
    def inconclusive(self) -> str: ...
    @property
    def perturbations(self) -> tuple[str, ...]: ...
    @property
    def weights(self) -> tuple[float, ...] | Mapping[str, float]: ...
    @property
    def per_kind(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def check_limits(self) -> Mapping[str, float]: ...
    @property
    def sources(self) -> Mapping[str, str]: ...

    def explicit(self, name: str) -> bool: ...
    def combined_threshold(self, kind: str | None = None) -> float: ...
    def relative_threshold(self, kind: str | None = None) -> float | None: ...
    def gated_metrics(self, kind: str | None = None) -> tuple[str, ...]: ...
    def thresholds(self, kind: str | None = None) -> dict[str, float]: ...
    def __getattr__(self, name: str) -> Any: ...


# A service's value of one user, from the user's finished pairs (the judge: the share of the user's
# original explanations judged faithful), awaited on the sweep's loop; None: the user gave it nothing.
Probe = Callable[[Sequence["PairResult"]], "Awaitable[float | None]"]


@dataclass
class Evidence:
    """What the checks of one slice read: its pairs (ρ under the slice's weights), noise-floor controls,
    cross-user controls (reweighted alike), cases, the gate and the item's kind (None: the overall slice).

    ``flips`` are the opt-in ``preference_flip`` pairs, kept apart from ``pairs`` (a flip is decided by
    its own rule, never by the stability thresholds). ``measured`` holds what the engine measured with its
    own services for a check (the judge's calls; polarity's vocabulary), by check name. Measurements two
    checks share (the cross-user control behind four of them) are computed once through :meth:`memo`.
    """

    gate: Gate
    kind: str | None
    pairs: Sequence[PairResult]
    controls: Sequence[PairResult] = ()
    swaps: Sequence[PairResult] = ()
    kinds: tuple[str, ...] = ()
    donors: bool = False
    cases: Sequence[EvalCase] = ()
    flips: Sequence[PairResult] = ()
    sequential: Any = None  # the slice's sequential gate (sweep.SequentialGate), when it ran one
    # The checks that ran an anytime-valid test of their own on the slice (their fixed rules keep the rest
    # of their alpha), and the one that ended it early, if one did (``stats.Stopped``).
    stops: frozenset[str] = frozenset()
    stopped: Any = None
    measured: Mapping[str, Any] = field(default_factory=dict)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once for this slice, shared by the checks that read it."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @property
    def floor(self) -> float:
        """ρ_floor: the noise floor's mean (1 when the slice has no noise-floor controls: temperature 0)."""
        from .. import stats  # lazy: loads numpy

        found = self.memo("floor", lambda: stats.noise_floor(self.controls))
        return found.mean if found is not None else 1.0


@dataclass(frozen=True)
class SliceDesign:
    """One slice as a check's sequential tests are made for it (``Check.stop_rules``): the test's gate, the
    item's kind (None: the overall slice), whether ρ_floor is 1 from the first user on (no noise floor is
    measured: temperature 0), the slice's cases, the users it plans, and the engine's service that measures
    the check (``probe``: the judge's calls), when one does."""

    gate: Gate
    kind: str | None
    floor_is_one: bool = True
    cases: Sequence[EvalCase] = ()
    planned: int = 0
    probe: Probe | None = None


@dataclass(frozen=True)
class Decision:
    """What a check does to its item: ``outcome`` FAIL, INSENSITIVE or INCONCLUSIVE (None: nothing), and
    ``note``, the sentence the verdict's message leads with ("" when the check has nothing to say)."""

    outcome: str | None = None
    note: str = ""


SILENT = Decision()

# The row of the rules that make an item "Not measured" (replies cut at the token limit, prompts that did not
# fit, the time budget): not a check, but the reason an item's scores are not a measurement, beside the rows.
MEASUREMENT = "measurement"


class Check:
    """One check over one slice. Subclasses set ``name`` and implement :meth:`measure`, :meth:`decide`
    and :meth:`finding`; a module, a line in ``registry.BUILTIN`` (or one ``register_check`` call) and a
    test file make a new one.

    ``stage`` groups checks whose notes share one sentence of context in the verdict's message
    (``connector`` leads what the item said before them: "Stability alone: …"); a check's own name is its
    stage unless it says otherwise. ``after_validity`` checks run after the rules that make an item "Not
    measured" (cut replies, prompts that did not fit, the time budget): they read the explanations' text,
    which stays evidence when the scores do not. ``settings`` are the gate settings the check reads.
    """

    name: ClassVar[str] = ""
    stage: ClassVar[str] = ""
    connector: ClassVar[str] = "Without it: "
    record: ClassVar[str | None] = None
    after_validity: ClassVar[bool] = True
    settings: ClassVar[tuple[str, ...]] = ()
    # The settings this check owns, declared once here: the option table adds each beside the run's own
    # (flag, ini key, environment variable, YAML key, origin, did-you-mean, ``--help`` and docs/options.md),
    # ``marker=True`` makes it a keyword of ``@pytest.mark.robustness`` and a field of the test's gate, which
    # the check reads back by name (``gate.max_copy_rate``). Built-in checks only: the table is read when
    # pytest adds its options, before a conftest registers a check (theirs set a limit: ``default_limit``).
    options: ClassVar[tuple[OptionSpec, ...]] = ()
    # The report section this check's rows go in (``checks/sections.py`` names each section's heading and
    # where it stands): the method's checks have one (stability's is the writers' own tables). Any other
    # check — the user's, or a new built-in without one — is a row of the writers' table of further checks,
    # in the one vocabulary (outcome · value [bounds] · limit · reason).
    section: ClassVar[str | None] = None
    # A limit people set per test, declared by the check itself: with a default here, the limit is a gate
    # setting like any other — ``check_limits={name: x}`` in the marker, ``--robustexplain-check-limits``,
    # its ini key, environment variable or YAML, with its origin and did-you-mean — and no entry in the
    # option table or GateSettings of its own. A share or threshold in [0, 1]; ``limit_bound`` says which
    # side fails ("max": above it, "min": below it), as a Finding's ``bound`` does. None: no such limit.
    default_limit: float | None = None
    limit_bound: ClassVar[str] = "max"

    def measure(self, evidence: Evidence) -> Any | None:
        """This check's measurement of the slice, or None when the slice gives it nothing to measure."""
        raise NotImplementedError

    def stop_rules(self, design: SliceDesign) -> tuple[StopRule, ...]:
        """Under ``decision=sequential``, the check's own anytime-valid tests of the slice, fed user by user
        (none by default: the check decides on every user measured). A FAIL rule that rejects ends the
        slice, and ``Evidence.stopped`` names it; a PASS rule (``StopRule.verdict``) is evidence a slice
        decided PASS by ρ waits for. A check measured with a service of the engine's (the judge's calls)
        reads each user's value from ``design.probe``; one whose user value needs the cases themselves (a
        predicate over each explanation with its history and item) from ``design.cases``."""
        return ()

    def users_needed(self, design: SliceDesign, rules: Sequence[StopRule]) -> int:
        """Where the check's burden of proof sits under ``decision=sequential``: the users a slice must have
        fed before it may stop with PASS, as far as this check goes (``rules``: its tests on the slice).

        A check that must show PASS does so by a PASS rule of its own, whose rejection the slice waits for
        (0 here). One that passes unless shown to fail — a FAIL rule — holds the PASS until its fixed rule,
        at the alpha it keeps beside the test, would catch a clear failure about as often as on all the
        design's ``planned`` users (:func:`~..stats.users_to_catch`): its test alone, at the 7–10 users
        after which ρ decides, let an explainer flagged in every explanation pass."""
        from ..stats import users_to_catch  # lazy: loads numpy

        return max((users_to_catch(r.limit, r.side, r.kept, design.planned) for r in rules
                    if r.kept is not None), default=0)

    def limit_of(self, gate: Gate) -> float:
        """The test's limit for this check (``check-limits``), else its own (``default_limit``)."""
        if self.default_limit is None:
            raise TypeError(f"check {self.name!r} declares no limit (default_limit)")
        return float(gate.check_limits.get(self.name, self.default_limit))

    def decide(self, found: Any, evidence: Evidence) -> Decision:
        """The outcome ``found`` imposes on the item and the sentence that says why."""
        raise NotImplementedError

    def finding(self, found: Any, evidence: Evidence) -> Finding:
        """The row every writer shows."""
        raise NotImplementedError

    def keep(self, verdict: Verdict, found: Any) -> Verdict:
        """The verdict with this check's detailed record in its ``details`` (under ``record``), when it has
        one."""
        return verdict.with_detail(self.record, found) if self.record else verdict

    @property
    def group(self) -> str:
        return self.stage or self.name

    # ------------------------------------------------------------------ its report section
    def section_rows(self, pooled: Any) -> Rows:
        """This check's rows in its section, worded from ``pooled`` — one model's records over its items
        (the report's ``Summary``: ``findings``, ``sensitivity``, ``attacks``, ``faithfulness``, ``polarity``,
        ``flip``, ``item_limits``) — the same rows in every writer; by default its finding's, in the words
        of the table of further checks."""
        return [row for f in pooled.findings if f.check == self.name for row in f.rows()]

    def section_about(self, pooled: Any) -> str:
        """What this check adds to its section's heading ("" when nothing)."""
        return ""

    def shown_briefly(self, pooled: Any) -> bool:
        """Whether the short report (pytest without ``-v``) shows this check's section: when it found or
        gated something."""
        return False

    def section_table(self, pooled: Any) -> Table | None:
        """A table of the cases behind the rows, for the writers with room for one (HTML)."""
        return None

    def pool(self, part: ModelPart) -> dict[str, Any]:
        """This check's records over one model's items, which its section words: the report summary's
        fields it fills (``sensitivity``, ``attacks``, …; what two checks pool into one field adds up).
        Nothing by default: every check's worst row is pooled for it anyway (``findings``)."""
        return {}


# A report section's rows: (label, value) in words.
Rows = list[tuple[str, str]]


D = TypeVar("D", float, None)


@dataclass(frozen=True)
class ModelPart:
    """One model's part of a finished run, as the checks pool their records for its report: the run, the
    model, its pairs and noise-floor controls, the threshold its ρ was gated at and its kinds in the
    report's order."""

    run: RunResult
    model: str
    pairs: Sequence[PairResult]
    controls: Sequence[PairResult]
    threshold: float
    kinds: Sequence[str]

    def number(self, name: str, default: D) -> float | D:
        """The run's recorded setting ``name`` when it is a number, else ``default`` (an older report)."""
        value = self.run.settings.get(name)

        return float(value) if is_number(value) else default


@dataclass(frozen=True)
class Table:
    """Cases behind a section's rows: a heading, the columns, plain-text rows and a note under them."""

    heading: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    note: str = ""


def gated_note(pooled: Any, rate: str, side: str, option: str) -> str:
    """Whether a pooled rate's row gated anything: each item at its limit on its own slice (``pooled``'s
    ``item_limits``), or nothing."""
    limit = pooled.item_limits.get(rate)
    return (f" · each item gated on its own slice ({side} {limit:g})" if limit is not None
            else f" · reported, not gated ({option} gates it)")


def originals(cases: Sequence[EvalCase], pairs: Sequence[PairResult]) -> list[tuple[EvalCase, int, str]]:
    """(case, repeat, text) of each case's original explanation — the first sample (repeat 0) when
    ``repeats`` > 1, so that the verdicts are independent across cases and exact bounds hold — in order;
    an original that failed has no text to read."""
    by_key = {(c.user_id, c.item_id): c for c in cases}
    found: dict[tuple[str, str], tuple[int, str]] = {}
    for p in pairs:
        failed_original = p.failure is not None and p.failure_detail.startswith(ORIGINAL_FAILED)
        key = (p.key.user_id, p.key.item_id)
        if not failed_original and p.original.strip() and p.key.repeat < found.get(key, (1 << 30, ""))[0]:
            found[key] = (p.key.repeat, p.original)
    return [(by_key[key], r, text) for key, (r, text) in sorted(found.items()) if key in by_key]


def share_row(check: str, outcome: str | None, reason: str, hits: int, n: int, low: float, high: float,
              threshold: float | None, *, bound: str = "max", enforced: bool = True, confidence: float = 0.95,
              counted: str = "explanations") -> Finding:
    """The row of a share (hits of n) with its exact bounds, as every rate-based check writes it."""
    value = Interval(hits / n if n else math.nan, low, high, n, n, confidence)
    return Finding(check, outcome, reason, value, threshold, bound, enforced, {"hits": hits, counted: n})
