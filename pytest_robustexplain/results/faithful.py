"""The records of the checks beyond the method's stability (``checks/judge``, ``checks/polarity``): the
judge's verdicts and finding, preference polarity, the counterfactual flip.

Apart from ``records`` so that the plugin's start-up (every pytest run of everyone who installs it) does not
build them: :class:`~.records.Verdict` names them as types only, and the package loads this module when one
of its names is first asked for.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from .records import Fields, Interval, Rule


@dataclass(frozen=True)
class JudgedText:
    """One explanation the faithfulness judge read (``checks/judge``).

    ``kind`` is ``original`` for the user's own explanation, else the pair's kind (a perturbation,
    ``control``, ``swap``) with its severity and repeat. ``faithful`` is None when the judge's reply was not
    the fixed shape (``failure`` says why): a judge failure, never a pass. ``reordered`` is the verdict on
    the same facts with the history lines in reverse order (None: not asked, or that reply failed).
    """

    user_id: str
    item_id: str
    kind: str
    severity: int
    repeat: int
    faithful: bool | None
    unsupported: tuple[str, ...] = ()
    rationale: str = ""
    failure: str = ""
    reordered: bool | None = None
    cached: bool = False
    people: bool | None = None  # a person's verdict on this case (judge-labels); None: not labelled
    # With several judges, each one's verdict in judge-model's order — 1 faithful, 0 not, -1 no verdict —
    # of which ``faithful`` is the majority (a tie is not faithful); empty with one judge.
    verdicts: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["unsupported"] = list(self.unsupported)
        return data


# [faithful, judged] per kind, as the judge counted them.
Counts = Annotated[dict[str, list[int]], Rule(lambda v: all(len(c) == 2 and min(c) >= 0 for c in v.values()),
                                              "[faithful, judged] counts per kind")]


@dataclass(frozen=True)
class FaithfulnessResult:
    """What the opt-in faithfulness judge found in one gated slice.

    ``faithful`` of ``judged`` original explanations were judged faithful (judge failures are counted in
    ``failures`` and in neither); ``low``/``high`` are its one-sided exact bounds at alpha (together a
    (1 − 2·alpha) interval). ``agreed`` of ``compared`` verdicts stayed the same with the history lines in
    reverse order. With ``scope="all"``, ``by_kind`` maps a kind to ``[faithful, judged]`` of its perturbed
    (or control) explanations and ``drop_by_kind`` to the mean per-case drop of the faithful share from the
    original explanation (paired by case, cluster-robust by user). ``outcome`` is the ``min_rate`` gate's
    (None when it is not gated).
    """

    judge: str
    scope: str
    judged: int
    faithful: int
    failures: int
    low: float
    high: float
    agreed: int = 0
    compared: int = 0
    agreement_high: float = 1.0  # one-sided exact upper bound of the agreement rate
    min_rate: float | None = None
    outcome: str | None = None
    message: str = ""
    by_kind: Counts = field(default_factory=dict)
    drop_by_kind: dict[str, Interval] = field(default_factory=dict)
    texts: tuple[JudgedText, ...] = ()
    alpha: float = 0.05  # of the bounds (each one-sided), per kind as overall
    # The judge against people's verdicts (judge-labels, ``faithfulness.people_agreement``): labelled cases,
    # agreement and Cohen's kappa with their bounds, the confusion table; empty without labels.
    people: dict[str, Any] = field(default_factory=dict)
    # Several judges (judge-model=a,b): their agreement beyond chance (``faithfulness.judges_agreement``);
    # empty with one.
    judges: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.faithful / self.judged if self.judged else math.nan

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["texts"] = [t.to_dict() for t in self.texts]
        return data


@dataclass(frozen=True)
class MisattributionCase:
    """One original explanation read for preference polarity (``checks/polarity``): whether its history has a
    disliked item or category (``eligible``), the disliked terms it cites as reasons to like, and the first
    sentence that does."""

    user_id: str
    item_id: str
    repeat: int
    eligible: bool
    cited: tuple[str, ...] = ()
    sentence: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cited"] = list(self.cited)
        return data


@dataclass(frozen=True)
class PolarityResult:
    """The misattributed-preference rate of one slice: ``misattributed`` of ``eligible`` original
    explanations cite something the user disliked as a reason to like the item; ``low``/``high`` its
    one-sided exact bounds at alpha; ``outcome`` the ``max_rate`` gate's (None when not gated)."""

    eligible: int
    misattributed: int
    low: float
    high: float
    max_rate: float | None = None
    outcome: str | None = None
    message: str = ""
    cases: tuple[MisattributionCase, ...] = ()
    examples: tuple[MisattributionCase, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cases"] = [c.to_dict() for c in self.cases]
        data["examples"] = [c.to_dict() for c in self.examples]
        return data


@dataclass(frozen=True)
class FlipResult(Fields):
    """The counterfactual preference flip of one slice (the opt-in kind ``preference_flip``), where a
    faithful explainer should change: ``rho`` is ρ of the flipped pairs to their originals,
    ``sensitivity`` = ρ_floor − ρ_flip (how far inverting the preference moved the explanation), beside
    ``robust_rho`` (ρ of the slice's robustness kinds, when it has any); ``still_liked`` of
    ``majority_pairs`` explanations (severity 3 and up: most of the category flipped) still cite the
    flipped category as a reason to like. ``outcome``: PASS / FAIL / INCONCLUSIVE."""

    n_pairs: int
    rho: Interval
    sensitivity: Interval
    min_sensitivity: float
    still_liked: int
    majority_pairs: int
    max_still_liked: float
    outcome: str
    message: str = ""
    robust_rho: Interval | None = None
