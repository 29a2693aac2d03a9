"""A finished pair's two explanations → its :class:`~pytest_robustexplain.results.PairResult`: the metrics
(through the score cache, which owns when the metrics' Scorer is ready), a failure's account, and what the
pair's changes were — a perturbation's own record, an attack's outcome (``adversarial``), a cross-user
control's grounding (``grounding``) and copied share (``copying``). The sweep injects one
:class:`PairScorer` and only hands it finished calls.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..data import Catalog, EvalCase
from ..explainers.prompt import PromptTemplate
from ..metrics.copies import copied_share
from ..metrics.mentions import Vocabulary
from ..results import METRICS, ORIGINAL_FAILED, PairResult
from ..score_cache import CachedScorer
from .records import Pair

if TYPE_CHECKING:
    from ..explainers.base import Explanation
    from ..metrics import Scorer
    from ..metrics.mentions import Vocabulary


class PairScorer:
    """Scores the sweep's pairs with one scorer over one catalog (the grounding vocabulary's)."""

    def __init__(self, scorer: CachedScorer | Scorer, catalog: Catalog) -> None:
        self.scorer = CachedScorer.around(scorer)
        self._catalog = catalog
        self._vocabulary: Vocabulary | None = None

    def readiness(self, e: str, e_prime: str) -> Future[Scorer] | None:
        """None when the pair can be scored now, else the future to wait for (see ``CachedScorer``)."""
        return self.scorer.readiness(e, e_prime)

    @property
    def requested(self) -> bool:
        """Whether a pair waits for the waiting thread to build the metrics' Scorer."""
        return self.scorer.requested

    def build_requested(self) -> None:
        self.scorer.build_requested()

    def score(self, pair: Pair, original: Explanation, other: Explanation) -> PairResult:
        failed = original if original.failure is not None else other
        vectors = None if original.embedding is None or other.embedding is None else (
            original.embedding, other.embedding)
        scores = self.scorer.score(original.text, other.text, vectors=vectors)
        failure = failed.failure
        if failure is None and scores.generation_failure:
            failure = "empty"
            failed = original if not original.text.strip() else other
        detail = failed.detail if failure else ""
        if failure and failed is original:
            # One failed original zeroes every pair of its user: the reports say where the zeros come from.
            detail = f"{ORIGINAL_FAILED} ({failure}){': ' + detail if detail else ''}"
        values: dict[str, Any] = {m: 0.0 if failure else getattr(scores, m) for m in METRICS}
        if scores.embedding is not None:  # the opt-in fifth metric
            values["embedding"] = 0.0 if failure else scores.embedding
        return PairResult(
            key=pair.key, **values, combined=0.0 if failure else scores.combined,
            original=original.text, perturbed=other.text,
            changes=self.changes(pair, original, other),
            failure=failure, failure_detail=detail,
            keyword_empty=scores.keyword_empty and not failure,
            cached_original=original.cached, cached_perturbed=other.cached,
            latency_s=other.latency_s, history_length=len(pair.case.history),
            history_diversity=round(pair.case.history.diversity, 4),
            cut=tuple(name for name, e in (("original", original), ("perturbed", other)) if e.cut),
            **overflow(original, other), tokens=tokens(original, other),
            original_latency_s=original.latency_s,
        )

    def changes(self, pair: Pair, original: Explanation, other: Explanation) -> dict[str, Any]:
        """What the pair changed: the perturbation's record (with an attack's outcome), a resampling, or a
        cross-user control's donor, grounding and copied share."""
        if pair.perturbation is not None:
            from ..checks.attacks.measure import attack_outcome  # lazy: loads numpy

            changes = dict(pair.perturbation.changes)
            outcome = attack_outcome(pair.key.kind, changes, original.text, other.text)
            if outcome is not None:  # prompt injection and shilling: what the attack achieved
                changes["attack"] = outcome
            return changes
        if pair.donor is None:
            return {"control": "resampled"}
        if self._vocabulary is None:

            self._vocabulary = Vocabulary(self._catalog)
        grounding = self._vocabulary.ground(original.text, pair.case.history, pair.case.item)
        return {"donor": pair.donor.donor_id, "donor_history_length": pair.donor.donor_length,
                "control_length": len(pair.donor.history), "copied": copied(original.text, pair.case),
                "grounding": grounding.to_dict()}


def copied(text: str, case: EvalCase) -> float:
    """The share of the original explanation copied from its prompt (``metrics/copies.py``): the default
    prompt's rendering of the case, which holds every history line and the item's line."""
    return round(copied_share(text, PromptTemplate().render(case.history, case.item)), 4)


def overflow(original: Explanation, other: Explanation) -> dict[str, Any]:
    """The pair's prompts that did not fit the context, and the first one's sentence (with its user)."""
    sides = tuple(name for name, e in (("original", original), ("perturbed", other)) if e.unfit)
    if not sides:
        return {}
    first = original if original.unfit else other
    return {"overflow": sides, "overflow_detail": f"{sides[0]} explanation: {first.detail}"}


def tokens(original: Explanation, other: Explanation) -> tuple[int, ...]:
    """The two replies' token counts as the server reported them; () when it reported none."""
    counts = (original.prompt_tokens, original.completion_tokens, other.prompt_tokens,
              other.completion_tokens)
    return () if all(n is None for n in counts) else tuple(n or 0 for n in counts)
