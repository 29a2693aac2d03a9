"""The record of a decided slice (:class:`Robustness`): its verdict, intervals and worst pairs, each
perturbation's line and the regression against a baseline. Apart from ``records``, which holds what a run
keeps; these are what the engine hands the reports and the ``robustness`` fixture.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .records import PASS, Fields, Interval, PairResult, Verdict

if TYPE_CHECKING:  # types only
    from ..data import UserHistory
    from .controls import GuardResult


@dataclass(frozen=True)
class NonInferiorityRow(Fields):
    """One quantity: mean of per-user differences (current − baseline) with its (1 − 2·alpha) interval.

    That interval's low end is the one-sided test's bound: the row passes when it lies above −margin.
    A row with ``gated`` False (relative robustness R, whose scale is not the margin's) is reported with
    the baseline's and the current value (``before`` → ``after``) and does not decide.
    """

    quantity: str
    diff: Interval
    p_value: float | None
    passed: bool
    n_users: int
    gated: bool = True
    before: float | None = None
    after: float | None = None


@dataclass(frozen=True)
class NonInferiorityResult:
    """Is the current run no worse than the baseline by more than ``margin`` on every quantity?"""

    passed: bool
    margin: float
    alpha: float
    rows: tuple[NonInferiorityRow, ...]
    n_matched: int
    unmatched_baseline: tuple[tuple[str, str, str, int, int], ...]  # PairKey.match_key()
    unmatched_current: tuple[tuple[str, str, str, int, int], ...]
    message: str

    @property
    def failed_rows(self) -> tuple[NonInferiorityRow, ...]:
        return tuple(r for r in self.rows if r.gated and not r.passed)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["n_unmatched_baseline"] = len(self.unmatched_baseline)
        out["n_unmatched_current"] = len(self.unmatched_current)
        return out


@dataclass(frozen=True)
class PerturbationResult:
    """One perturbed history, the history it came from and what changed (made by ``apply_perturbation``,
    which also writes the one-line ``description`` of the change)."""

    kind: str
    severity: int
    repeat: int
    original: UserHistory
    perturbed: UserHistory
    changes: dict[str, Any]
    description: str = ""

    @property
    def identical(self) -> bool:
        """Whether the perturbation left the history unchanged (such pairs are not evaluated)."""
        return self.perturbed == self.original

    @property
    def summary(self) -> str:
        """A one-line human description of the change."""
        return f"{self.description} (history unchanged)" if self.identical else self.description

    def to_dict(self) -> dict[str, Any]:
        """The kind, severity, repeat, summary and changes (not the histories), for reports."""
        return {"kind": self.kind, "severity": self.severity, "repeat": self.repeat,
                "summary": self.summary, "identical": self.identical, "changes": self.changes}


@dataclass(frozen=True)
class Robustness:
    """The finished result of one gated item's slice (the ``robustness`` fixture's value)."""

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
    # The slice's perturbations, computed when read (a sequence that keeps no perturbed history).
    perturbations: Sequence[PerturbationResult] = ()
    regression: NonInferiorityResult | None = None  # against the baseline, when one is given
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
