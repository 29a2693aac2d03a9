"""The faithfulness judge in a run: which explanations of a finished slice it reads, and its finding.

Each case's original explanation (the first sample when ``repeats`` > 1) is judged twice — the history as
the explainer saw it, and the same lines in reverse order — and, with ``judge=all``, each perturbed
explanation and each control once, against the history *its* prompt showed (the perturbed one, or the
donor's for a cross-user control). The calls run concurrently on the sweep's loop through
:class:`~pytest_robustexplain.explainers.judge.Judge`, which asks a prompt once per run; the rules are
``faithfulness.py``'s.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..results import ORIGINAL, JudgedText, ModelInfo, PairKey

if TYPE_CHECKING:
    from ..data import Catalog, EvalCase, Item, UserHistory
    from ..explainers.judge import Judge
    from ..grounding import Vocabulary
    from ..results import FaithfulnessResult, PolarityResult
    from ..settings import GateSettings, Settings
    from ..sweep import SliceResult, Sweep


@dataclass(frozen=True)
class JudgeJob:
    """One explanation to judge, with what its explainer was shown."""

    key: tuple[str, str, str, int, int]  # user, item, kind (ORIGINAL or the pair's), severity, repeat
    history: UserHistory
    item: Item
    explanation: str
    reorder: bool  # also judged with the history lines in reverse order (originals)


def judge_jobs(sliced: SliceResult, scope: str,
               seen: Mapping[PairKey, tuple[UserHistory, Item]] | None = None) -> list[JudgeJob]:
    """The slice's explanations to judge: its originals, and with ``scope="all"`` every pair's second
    explanation (``seen``: what each pair's second prompt showed, from the sweep)."""
    jobs = [JudgeJob((case.user_id, case.item_id, ORIGINAL, 0, repeat), case.history, case.item, text,
                     reorder=True) for case, repeat, text in originals_of(sliced)]
    if scope != "all" or not seen:
        return jobs
    for p in sorted((*sliced.pairs, *sliced.controls, *sliced.swaps), key=lambda p: p.key):
        if p.failure is None and p.perturbed.strip() and p.key in seen:
            history, item = seen[p.key]
            k = p.key
            jobs.append(JudgeJob((k.user_id, k.item_id, k.kind, k.severity, k.repeat), history, item,
                                 p.perturbed, reorder=False))
    return jobs


def originals_of(sliced: SliceResult) -> list[tuple[EvalCase, int, str]]:
    """(case, repeat, text) of each case's original explanation (:func:`checks.originals`)."""
    from ..checks import originals

    return originals(sliced.spec.cases, (*sliced.pairs, *sliced.controls, *sliced.swaps))


def polarity_finding(sliced: SliceResult, vocabulary: Vocabulary, gate: GateSettings
                     ) -> PolarityResult | None:
    """Preference polarity of the slice's original explanations (``polarity.py``; text only, no call)."""
    from ..polarity import case_of, summarise_polarity

    cases = [case_of(case.user_id, case.item_id, repeat, text, case.history, case.item, vocabulary)
             for case, repeat, text in originals_of(sliced)]
    return summarise_polarity(cases, max_rate=gate.max_misattributed_rate, alpha=gate.alpha)


async def run_jobs(judge: Judge, jobs: Sequence[JudgeJob]) -> list[JudgedText]:
    """Every job's verdict (and reordered verdict), asked concurrently; the order of ``jobs`` kept."""

    async def one(job: JudgeJob) -> JudgedText:
        ask = [judge.verdict(job.history, job.item, job.explanation)]
        if job.reorder:
            ask.append(judge.verdict(job.history, job.item, job.explanation, reverse=True))
        (reply, cached), *back = await asyncio.gather(*ask)
        user, item, kind, severity, repeat = job.key
        return JudgedText(user, item, kind, severity, repeat, reply.faithful, reply.unsupported,
                          reply.rationale, reply.failure, back[0][0].faithful if back else None, cached)

    return list(await asyncio.gather(*(one(job) for job in jobs)))


def planned_judge_calls(cases: int, scope: str, pairs: int) -> int:
    """The judge calls a slice plans at most: two per case's original (forward, reversed), and with
    ``scope="all"`` one per pair (perturbed and control explanations)."""
    return 2 * cases + (pairs if scope == "all" else 0)


class RunJudge:
    """The run's faithfulness judge (``judge-model``): built and preflighted once — a dead judge server or a
    missing judge model fails the run before its calls — then asked for every finished slice."""

    def __init__(self, settings: Settings, *, cache_dir: Path, cross_process: bool = False) -> None:
        self.settings = settings
        self._cache_dir = cache_dir
        self._cross_process = cross_process
        self._judge: Judge | None = None
        self.info: ModelInfo | None = None  # the judge model's facts (its digest), from preflight
        self._vocabulary: Vocabulary | None = None
        self.criteria = ""  # read now: a bad criteria or labels file is an error before any call
        self.labels: Mapping[tuple[str, str], bool] = {}
        if self.on and settings.judge_criteria is not None:
            from ..explainers.judge import read_criteria

            self.criteria = read_criteria(settings.judge_criteria)
        if self.on and settings.judge_labels is not None:
            from ..faithfulness import read_labels

            self.labels = read_labels(settings.judge_labels)

    def vocabulary(self, catalog: Catalog) -> Vocabulary:
        """The catalog's grounding vocabulary (what polarity matches terms by), built once per run."""
        if self._vocabulary is None:
            from ..grounding import Vocabulary

            self._vocabulary = Vocabulary(catalog)
        return self._vocabulary

    @property
    def on(self) -> bool:
        return self.settings.judge_model is not None

    def start(self, sweep: Sweep) -> None:
        """Build and preflight the judge on the sweep's loop (once; nothing without ``judge-model``)."""
        if not self.on or self._judge is not None:
            return
        from .setup import build_judge

        judge = build_judge(self.settings, cache_dir=self._cache_dir, cross_process=self._cross_process)
        assert judge is not None
        self.info = sweep.run_coroutine(judge.explainer.preflight())
        self._judge = judge

    def finding(self, sweep: Sweep, slice_id: str, sliced: SliceResult, gate: GateSettings
                ) -> FaithfulnessResult | None:
        """The judge's finding on a finished slice (None without a judge)."""
        if not self.on:
            return None
        from ..faithfulness import summarise

        self.start(sweep)
        assert self._judge is not None
        scope = self.settings.judge
        jobs = judge_jobs(sliced, scope, sweep.seen_by(slice_id) if scope == "all" else None)
        texts = sweep.run_coroutine(run_jobs(self._judge, jobs))
        if self.labels:  # people's verdicts beside the judge's, on the originals they labelled
            texts = [replace(t, people=self.labels.get((t.user_id, t.item_id))) if t.kind == ORIGINAL else t
                     for t in texts]
        return summarise(texts, judge=self.label, scope=scope, min_rate=gate.min_faithful_rate,
                         alpha=gate.alpha, min_agreement=gate.min_judge_agreement)

    @property
    def label(self) -> str:
        return self.info.label() if self.info is not None else str(self.settings.judge_model)

    def counters(self) -> dict[str, int]:
        """This process's judge calls (made, from the cache, failed), for the run's call counters."""
        return self._judge.stats.to_dict() if self._judge is not None else {}

    def record(self) -> dict[str, Any]:
        """What the run record says of the judge (settings ``judge_signature``): its model and digest."""
        if not self.on:
            return {}
        name = self.info.name if self.info is not None else self.settings.judge_model
        digest = self.info.digest if self.info is not None else None
        # Verdicts under other criteria are another judge's: the criteria's digest is part of its signature.
        criteria = (f"+criteria:{hashlib.sha256(self.criteria.encode()).hexdigest()[:12]}" if self.criteria
                    else "")
        return {"judge_signature": f"{name}@{digest or 'unknown'}{criteria}"}

    def adopt(self, info: Mapping[str, Any]) -> None:
        """The judge's facts as another process (an xdist worker) found them."""
        if self.info is None and info:
            self.info = ModelInfo(**info)
