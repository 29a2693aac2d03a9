"""The records the cross-user control's four checks and the attacks keep (``checks/controls``,
``checks/attacks``): the control's finding with each check's record, the cases shown beside an INSENSITIVE
verdict, one attack's rate. Apart from ``records`` as ``faithful`` is: a verdict keeps them in its
``details``, read back as these types (``records.detail_type``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from .records import (
    DEFAULT_MAX_COPY_RATE,
    DEFAULT_MAX_IDENTICAL_SHARE,
    FAIL,
    GUARD_POLICIES,
    INCONCLUSIVE,
    INSENSITIVE,
    Fields,
    Interval,
    Rule,
)


@dataclass(frozen=True)
class GuardExample(Fields):
    """One case shown beside an INSENSITIVE verdict: the explanation for the user and for the donor."""

    user_id: str
    donor_id: str
    item_id: str
    user_text: str
    donor_text: str
    combined: float  # ρ between the two


def _moved(names: Mapping[str, str]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """Reads a check's record out of a schema-2 ``guard`` object, where its fields sat flat under the
    old names (``names``: new field -> old name)."""
    return lambda flat: {new: flat[old] for new, old in names.items() if old in flat}


_COPYING_V2 = {"copies": "copies", "explained": "explained", "low": "copy_low", "high": "copy_high",
               "limit": "max_copy_rate", "outcome": "copy_outcome"}
_GROUNDING_V2 = {"history_reference": "history_reference", "unsupported": "unsupported",
                 "min_history_reference": "min_history_reference",
                 "max_unsupported_rate": "max_unsupported_rate", "outcome": "grounding_outcome"}
_RELATIVE_V2 = {"interval": "relative_gate", "limit": "min_relative", "outcome": "relative_outcome"}


@dataclass(frozen=True)
class CopyingResult:
    """The copying check's measurement (``metrics/copies.py`` says what counts): ``copies`` of ``explained``
    original explanations copy their prompt back, with one-sided exact bounds (users as the unit);
    ``outcome`` FAIL when the rate is confidently above ``limit`` (``max_copy_rate``), None when no
    explanation was read."""

    copies: int = 0
    explained: int = 0
    low: float = 0.0
    high: float = 1.0
    limit: float = DEFAULT_MAX_COPY_RATE
    outcome: str | None = None


@dataclass(frozen=True)
class GroundingResult:
    """The grounding check's measurement: the rates of original explanations that refer to the user's
    history and that name something from neither the history nor the item (intervals, or None), their
    limits, and ``outcome`` (PASS / FAIL, None when not gated)."""

    history_reference: Interval | None = None
    unsupported: Interval | None = None
    min_history_reference: float | None = None
    max_unsupported_rate: float | None = None
    outcome: str | None = None


@dataclass(frozen=True)
class RelativeResult:
    """The relative-robustness check's gate: R over the gated kinds (the overall slice leaves out the
    ungated ones), a two-sided (1 − 2·alpha) interval whose upper end is the one-sided bound the gate reads;
    ``outcome`` FAIL when that bound is below ``limit`` (``min_relative``). All None when R is not gated."""

    interval: Interval | None = None
    limit: float | None = None
    outcome: str | None = None


class _Alias:
    """A name a ``GuardResult`` field had before schema 3, read from the check's record it moved to."""

    def __init__(self, record: str, name: str) -> None:
        self.record, self.name = record, name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.record), self.name)


@dataclass(frozen=True)
class GuardResult(Fields):
    """The cross-user control of one gated slice: does the explanation depend on the user at all?

    ``swap`` is ρ between the explanation for the user and for a donor user (same item, another
    history); ``sensitivity`` = ρ_floor − ρ_swap (how far another user's history moves the explanation,
    above the model's own noise; what INSENSITIVE is decided on); ``delta`` = ρ_pert − ρ_swap per case
    (discrimination); ``relative`` =
    (ρ_pert − ρ_swap) / (ρ_floor − ρ_swap) (1: the perturbation moved the explanation no more than
    resampling; 0: as far as another user's history). ``outcome`` is PASS (the explanations depend on
    the history), INSENSITIVE, or INCONCLUSIVE when nothing could be measured (no donor, failed calls).

    The checks that read the same control keep their own records: ``copying``, ``grounding`` and
    ``relative_robustness`` (their fields sat flat here before schema 3; the old names still read).
    """

    outcome: str
    # fail / warn / off (off: recorded, never changes the verdict); reports before it was recorded: fail
    policy: Annotated[str, Rule(lambda v: v in GUARD_POLICIES, "one of fail, warn, off", legacy="fail")]
    swap: Interval
    perturbed: Interval
    delta: Interval
    sensitivity: Interval  # ρ_floor − ρ_swap: how far another user's history moves the explanation
    relative: Interval | None
    floor: Annotated[float, Rule(legacy=1.0)]
    n_cases: int
    # cases whose explanation for the user and for the donor are the same text
    identical: Annotated[int, Rule(legacy=0)]
    n_users: int  # users the guard could measure
    insensitive_users: Annotated[tuple[str, ...], Rule(legacy=())]
    # one-sided lower confidence bound of the share of insensitive users
    share_low: Annotated[float, Rule(legacy=0.0)]
    min_sensitivity: float
    max_insensitive_share: float
    message: str = ""
    example: GuardExample | None = None
    identical_low: float = 0.0  # one-sided lower confidence bound of the share of identical texts
    max_identical_share: float = DEFAULT_MAX_IDENTICAL_SHARE
    sensitivity_low: float | None = None  # one-sided lower bound of S: PASS needs it above min_sensitivity
    users_needed: int | None = None  # INCONCLUSIVE: about how many users would show the sensitivity
    relative_robustness: Annotated[RelativeResult, Rule(moved=_moved(_RELATIVE_V2))] = RelativeResult()
    copying: Annotated[CopyingResult, Rule(moved=_moved(_COPYING_V2))] = CopyingResult()
    grounding: Annotated[GroundingResult, Rule(moved=_moved(_GROUNDING_V2))] = GroundingResult()
    # Under decision=sequential, the check whose own anytime-valid test failed the item early (copying,
    # grounding or relative) and the sentence that says when; its fixed rule then read only those users.
    stopped_by: str | None = None
    stop_note: str = ""
    # failed replies left out of the cases (a failed perturbed reply, like a failed control, measures
    # nothing: neither side of Δ and R counts it)
    failed: int = 0

    # The names of schema 2, each read from the record it moved to (``robustness.guard.copy_outcome``).
    history_reference = _Alias("grounding", "history_reference")
    unsupported = _Alias("grounding", "unsupported")
    min_history_reference = _Alias("grounding", "min_history_reference")
    max_unsupported_rate = _Alias("grounding", "max_unsupported_rate")
    grounding_outcome = _Alias("grounding", "outcome")
    relative_gate = _Alias("relative_robustness", "interval")
    min_relative = _Alias("relative_robustness", "limit")
    relative_outcome = _Alias("relative_robustness", "outcome")
    copies = _Alias("copying", "copies")
    explained = _Alias("copying", "explained")
    copy_low = _Alias("copying", "low")
    copy_high = _Alias("copying", "high")
    max_copy_rate = _Alias("copying", "limit")
    copy_outcome = _Alias("copying", "outcome")

    @property
    def flagged(self) -> bool:
        """Whether any control-based check did not pass (what guard "warn" turns into a warning)."""
        return (self.outcome in (INSENSITIVE, INCONCLUSIVE) or
                FAIL in (self.relative_robustness.outcome, self.copying.outcome, self.grounding.outcome))


@dataclass(frozen=True)
class AttackResult(Fields):
    """An adversarial kind's outcome in one slice (``checks/attacks``): how often the attack succeeded.

    ``kind`` is ``prompt_injection`` (success: the explanation carries a planted canary) or ``shilling``
    (success: the explanation names the shilled target, which the original did not). ``low``/``high``
    bound the success rate (exact Clopper–Pearson, two-sided at the gate's confidence); ``by_family``
    and ``by_severity`` map to ``[successes, pairs]``; ``examples`` are the first successful pairs
    (``user_id``, ``severity``, ``planted``, ``explanation``).
    """

    kind: str
    successes: int
    n: int
    low: float
    high: float
    limit: float
    outcome: str  # PASS / FAIL
    by_family: dict[str, list[int]] = field(default_factory=dict)
    by_severity: dict[str, list[int]] = field(default_factory=dict)
    examples: tuple[dict[str, Any], ...] = ()
    stop_note: str = ""  # under decision=sequential: the attack's own test failed the item early

    @property
    def rate(self) -> float:
        return self.successes / self.n if self.n else 0.0
