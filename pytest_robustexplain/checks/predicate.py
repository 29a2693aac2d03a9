"""A user's own check in one line: a predicate over each explanation, gated as a share.

``predicate(text, history, item) -> bool`` says whether one explanation has the property counted ("mentions
a price", "reads above grade 12", "names a competitor"); the check reads each case's original explanation —
what the recommender serves — and FAILs the item when the share that has the property is confidently
above ``max_rate`` (a one-sided exact bound at the gate's alpha, as the copy rate is gated). ``max_rate=0``
means "never": a single hit fails. Under ``decision=sequential`` its own test (each user's share of flagged
explanations, against the limit) may fail the item after its first users, as the copy rate's does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..results import FAIL, PASS
from ..sanitize import visible
from .base import SILENT, Check, Decision, Evidence, originals, share_row

if TYPE_CHECKING:
    from ..data import EvalCase, Item, UserHistory
    from ..results import Finding, PairResult
    from ..stats import StopRule
    from .base import Gate, SliceDesign

Predicate = Callable[["str", "UserHistory", "Item"], bool]
MAX_EXAMPLES = 3


@dataclass(frozen=True)
class PredicateFound:
    """What a predicate check measured: ``hits`` of ``n`` explanations have the property, with one-sided
    exact bounds at alpha, and the first hits (user, item, the explanation) as examples; ``stop_note`` says
    when the check's own sequential test failed the item early (its FAIL stands on the users measured)."""

    hits: int
    n: int
    low: float
    high: float
    examples: tuple[tuple[str, str, str], ...] = ()
    stop_note: str = ""


class PredicateCheck(Check):
    """A check made of a per-explanation predicate and a limit on the share it is true for."""

    def __init__(self, name: str, predicate: Predicate, *, max_rate: float = 0.0,
                 description: str = "") -> None:
        if not callable(predicate):
            raise ConfigError(f"check {name!r}: the predicate must be callable, got "
                              f"{type(predicate).__name__}")
        if not (isinstance(max_rate, (int, float)) and not isinstance(max_rate, bool) and 0 <= max_rate <= 1):
            raise ConfigError(f"check {name!r}: max_rate must be a number between 0 and 1, got {max_rate!r}")
        self.name = name  # type: ignore[misc]  # an instance's name: one class serves every user predicate
        self.predicate = predicate
        self.max_rate = self.default_limit = float(max_rate)
        self.description = description or f"are flagged by {name}"

    def measure(self, evidence: Evidence) -> PredicateFound | None:
        from ..stats import check_alphas, user_share_bounds  # lazy: loads numpy

        every = (*evidence.pairs, *evidence.flips, *evidence.controls, *evidence.swaps)
        texts = originals(evidence.cases, every)
        if not texts:
            return None
        predicate = self.predicate_for(evidence.gate)
        held = [(case, text, self._holds(predicate, text, case.history, case.item, case.user_id))
                for case, _, text in texts]
        hits = [(case.user_id, case.item_id, text) for case, text, flagged in held if flagged]
        # Users are the unit of the bounds: one user's explanations are not independent of each other. When
        # its own sequential test ran, that test spent its share of the alpha (stats.check_alphas).
        alpha = check_alphas(evidence.gate.alpha)[1] if self.name in evidence.stops else evidence.gate.alpha
        low, high = user_share_bounds([(case.user_id, flagged) for case, _, flagged in held], alpha)
        stopped = evidence.stopped
        note = stopped.note() if stopped is not None and stopped.check == self.name else ""
        return PredicateFound(len(hits), len(texts), low, high, tuple(hits[:MAX_EXAMPLES]), note)

    def stop_rules(self, design: SliceDesign) -> tuple[StopRule, ...]:
        """Each user's share of flagged explanations, against the limit: an explainer that has the property
        fails after its first users (at a limit of 0, at its first hit — under "never" no hit is ever
        drawn, so that stop cannot be wrong). The predicate needs each case's history and item, which a
        pair does not carry: the rule keeps the slice's cases by user."""
        from ..stats import ABOVE, StopRule, check_alphas  # lazy: loads numpy

        gate = design.gate
        by_user: dict[str, list[EvalCase]] = {}
        for case in design.cases:
            by_user.setdefault(case.user_id, []).append(case)
        predicate = self.predicate_for(gate)
        test, kept = check_alphas(gate.alpha)
        share = lambda pairs, swaps: self._user_share(predicate, by_user, (*pairs, *swaps))  # noqa: E731
        return (StopRule(self.name, self.limit_of(gate), ABOVE, test, share, kept=kept),)

    def predicate_for(self, gate: Gate) -> Predicate:
        """The predicate a test's gate asks for: the one registered. A built-in check with a setting of its
        own (``Check.options``: a word count, a list) overrides this to read it (``gate.<its field>``)."""
        return self.predicate

    def _user_share(self, predicate: Predicate, by_user: Mapping[str, Sequence[EvalCase]],
                    pairs: Sequence[PairResult]) -> float | None:
        """The share of one user's original explanations the predicate flags (None: none to read)."""
        texts = originals(by_user.get(pairs[0].key.user_id, ()), pairs) if pairs else []
        try:
            flagged = [self._holds(predicate, text, case.history, case.item, case.user_id)
                       for case, _, text in texts]
        except ConfigError:
            return None  # the fixed rule raises it, with its one sentence, when the item is decided
        return sum(flagged) / len(flagged) if flagged else None

    def _holds(self, predicate: Predicate, text: str, history: UserHistory, item: Item, user: str) -> bool:
        try:
            value: Any = predicate(text, history, item)
        except Exception as exc:  # the user's code: one sentence naming the check, never a traceback
            raise ConfigError(f"check {self.name!r}: its predicate raised {type(exc).__name__}: {exc} "
                              f"(on user {user}'s explanation)") from None
        if not (isinstance(value, bool) or type(value).__name__ == "bool_"):
            raise ConfigError(f"check {self.name!r}: its predicate must return True or False, got "
                              f"{type(value).__name__} {value!r:.40}")
        return bool(value)

    def limit(self, evidence: Evidence) -> float:
        return self.limit_of(evidence.gate)

    def reason(self, found: PredicateFound, limit: float) -> str:
        return (f"{found.hits} of {found.n} explanations {self.description} (rate "
                f"{found.hits / found.n:.2f}, one-sided bounds [{found.low:.2f}, {found.high:.2f}], limit "
                f"{limit:g})")

    def outcome(self, found: PredicateFound, limit: float) -> str:
        return FAIL if found.stop_note or found.low > limit else PASS

    def decide(self, found: PredicateFound, evidence: Evidence) -> Decision:
        limit = self.limit(evidence)
        if self.outcome(found, limit) != FAIL:
            return SILENT
        return Decision(FAIL, f"Check {self.name} FAIL: {self.reason(found, limit)}."
                              + (f" {found.stop_note}" if found.stop_note else ""))

    def finding(self, found: PredicateFound, evidence: Evidence) -> Finding:


        # The row shows the value, bounds and limit beside the reason: the reason is the sentence alone.
        said = f"{found.hits} of {found.n} explanations {self.description}." + (
            f" {found.stop_note}" if found.stop_note else "")
        limit = self.limit(evidence)
        row = share_row(self.name, self.outcome(found, limit), said, found.hits, found.n,
                        found.low, found.high, limit, confidence=1 - evidence.gate.alpha)
        shown = tuple(visible(f"user {u} · item {i}: {text[:160]}") for u, i, text in found.examples)
        return replace(row, examples=shown)
