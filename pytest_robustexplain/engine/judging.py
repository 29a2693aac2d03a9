"""The faithfulness judge in a run: which explanations of a finished slice it reads, and its finding.

Each case's original explanation (the first sample when ``repeats`` > 1) is judged twice — the history as
the explainer saw it, and the same lines in reverse order — and, with ``judge=all``, each perturbed
explanation and each control once, against the history *its* prompt showed (the perturbed one, or the
donor's for a cross-user control). The calls run concurrently on the sweep's loop through
:class:`~pytest_robustexplain.explainers.judge.Judge`, which asks a prompt once per run; the rules are
``checks/judge``'s.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checks import originals
from ..checks.judge import Faithfulness
from ..checks.judge.measure import JudgeReply, read_labels, summarise
from ..checks.judge.prompt import read_criteria
from ..checks.polarity.measure import case_of, summarise_polarity
from ..errors import ConfigError
from ..metrics.mentions import Vocabulary
from ..results import (
    ORIGINAL,
    JudgedText,
    ModelInfo,
    PairKey,
    PairResult,
    RunResult,
    money,
    price_for,
    tokens_cost,
)
from ..stats import check_alphas
from .pace import load_judge_tokens, remember_judge_tokens
from .plan import calls_per_user
from .setup import JUDGE_NUM_PREDICT, build_judge, judge_backend

if TYPE_CHECKING:
    from ..checks import Probe
    from ..checks.judge.measure import JudgeReply
    from ..data import Catalog, EvalCase, Item, UserHistory
    from ..explainers.judge import Judge
    from ..metrics.mentions import Vocabulary
    from ..results import FaithfulnessResult, PolarityResult
    from ..settings import GateSettings, Settings
    from ..store import Store
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
    jobs = original_jobs(originals_of(sliced))
    if scope != "all" or not seen:
        return jobs
    for p in sorted((*sliced.pairs, *sliced.controls, *sliced.swaps), key=lambda p: p.key):
        if p.failure is None and p.perturbed.strip() and p.key in seen:
            history, item = seen[p.key]
            k = p.key
            jobs.append(JudgeJob((k.user_id, k.item_id, k.kind, k.severity, k.repeat), history, item,
                                 p.perturbed, reorder=False))
    return jobs


def original_jobs(found: Sequence[tuple[EvalCase, int, str]]) -> list[JudgeJob]:
    """Each (case, repeat, text) original explanation to judge, also with the history reversed: one
    shape for a finished slice's finding and for the sequential test's user, so both ask the same prompts
    (the judge asks a prompt once a run)."""
    return [JudgeJob((case.user_id, case.item_id, ORIGINAL, 0, repeat), case.history, case.item, text,
                     reorder=True) for case, repeat, text in found]


def originals_of(sliced: SliceResult) -> list[tuple[EvalCase, int, str]]:
    """(case, repeat, text) of each case's original explanation (:func:`checks.originals`)."""
    return originals(sliced.spec.cases, (*sliced.pairs, *sliced.controls, *sliced.swaps))


def polarity_finding(sliced: SliceResult, vocabulary: Vocabulary, gate: GateSettings
                     ) -> PolarityResult | None:
    """Preference polarity of the slice's original explanations (``checks/polarity``; text only, no call)."""
    cases = [case_of(case.user_id, case.item_id, repeat, text, case.history, case.item, vocabulary)
             for case, repeat, text in originals_of(sliced)]
    return summarise_polarity(cases, max_rate=gate.max_misattributed_rate, alpha=gate.alpha)


# A judge's answer: its reply, whether it came from the cache, its verdict with the history reversed.
Answer = tuple["JudgeReply", bool, "bool | None"]


async def run_jobs(judges: Judge | Sequence[Judge], jobs: Sequence[JudgeJob]) -> list[JudgedText]:
    """Every job's verdict (and reordered verdict) from each judge, asked concurrently; the order of
    ``jobs`` kept. With several judges a text's verdict is their majority (:func:`majority`)."""
    panel = [judges] if not isinstance(judges, Sequence) else list(judges)

    async def ask(judge: Judge, job: JudgeJob) -> Answer:
        asked = [judge.verdict(job.history, job.item, job.explanation)]
        if job.reorder:
            asked.append(judge.verdict(job.history, job.item, job.explanation, reverse=True))
        (reply, cached), *back = await asyncio.gather(*asked)
        return reply, cached, back[0][0].faithful if back else None

    async def one(job: JudgeJob) -> JudgedText:
        answers = await asyncio.gather(*(ask(judge, job) for judge in panel))
        user, item, kind, severity, repeat = job.key
        reply, cached, reordered = answers[0] if len(answers) == 1 else majority(answers)
        verdicts = tuple(-1 if r.faithful is None else int(r.faithful) for r, _, _ in answers)
        return JudgedText(user, item, kind, severity, repeat, reply.faithful, reply.unsupported,
                          reply.rationale, reply.failure, reordered, cached,
                          verdicts=verdicts if len(answers) > 1 else ())

    return list(await asyncio.gather(*(one(job) for job in jobs)))


def majority(answers: Sequence[Answer]) -> Answer:
    """Several judges' answers as one: faithful when more than half of the judges that answered say so (a
    tie is not faithful: reject by default), with the reasons of the first judge that voted with the
    majority; the reordered verdict by the same rule; no verdict when none answered."""
    cached = all(c for _, c, _ in answers)
    read = [r for r, _, _ in answers if r.faithful is not None]
    if not read:
        return answers[0][0], cached, None
    faithful = 2 * sum(bool(r.faithful) for r in read) > len(read)
    voice = next(r for r in read if r.faithful == faithful)
    back = [b for _, _, b in answers if b is not None]
    reordered = 2 * sum(back) > len(back) if back else None
    return JudgeReply(faithful, voice.unsupported, voice.rationale), cached, reordered


def planned_judge_calls(cases: int, scope: str, pairs: int) -> int:
    """The judge calls a slice plans at most: two per case's original (forward, reversed), and with
    ``scope="all"`` one per pair (perturbed and control explanations)."""
    return 2 * cases + (pairs if scope == "all" else 0)


class RunJudge:
    """The run's faithfulness judge (``judge-model``): built and preflighted once — a dead judge server or a
    missing judge model fails the run before its calls — then asked for every finished slice."""

    def __init__(self, settings: Settings, *, cache_dir: Path, kept: Store, cross_process: bool = False
                 ) -> None:
        self.settings = settings
        self._cache_dir = cache_dir
        self._kept = kept
        self._cross_process = cross_process
        self._judges: list[Judge] = []  # one per judge model, in the order judge-model names them
        self.infos: dict[str, ModelInfo] = {}  # each judge model's facts (its digest), from preflight
        self._vocabulary: Vocabulary | None = None
        self.criteria = ""  # read now: a bad criteria or labels file is an error before any call
        self.labels: Mapping[tuple[str, str], bool] = {}
        if self.on and settings.judge_criteria is not None:

            self.criteria = read_criteria(settings.judge_criteria)
        if self.on and settings.judge_labels is not None:

            self.labels = read_labels(settings.judge_labels)

    def vocabulary(self, catalog: Catalog) -> Vocabulary:
        """The catalog's grounding vocabulary (what polarity matches terms by), built once per run."""
        if self._vocabulary is None:

            self._vocabulary = Vocabulary(catalog)
        return self._vocabulary

    @property
    def on(self) -> bool:
        return self.settings.judge_model is not None

    @property
    def info(self) -> ModelInfo | None:
        """The first judge model's facts (what an xdist worker sends, and a one-judge run records)."""
        return self.infos.get(self.settings.judge_models[0]) if self.on else None

    def start(self, sweep: Sweep) -> None:
        """Build and preflight the judges on the sweep's loop (once; nothing without ``judge-model``)."""
        if not self.on or self._judges:
            return

        judges = []
        for model in self.settings.judge_models:
            judge = build_judge(self.settings, model=model, cache_dir=self._cache_dir, kept=self._kept,
                                cross_process=self._cross_process)
            assert judge is not None
            self.infos[model] = sweep.run_coroutine(judge.explainer.preflight())
            judges.append(judge)
        self._judges = judges

    def finding(self, sweep: Sweep, slice_id: str, sliced: SliceResult, gate: GateSettings
                ) -> FaithfulnessResult | None:
        """The judge's finding on a finished slice (None without a judge). When the slice ran the judge's
        own sequential test, the fixed rule decides at the alpha the test left, and the test's FAIL, if it
        ended the slice, stands unless the judge is not to be trusted (``summarise``'s ``stopped``)."""
        if not self.on:
            return None

        self.start(sweep)
        scope = self.settings.judge
        jobs = judge_jobs(sliced, scope, sweep.seen_by(slice_id) if scope == "all" else None)
        texts = sweep.run_coroutine(run_jobs(self._judges, jobs))  # the test's verdicts: asked once a run
        if self.labels:  # people's verdicts beside the judge's, on the originals they labelled
            texts = [replace(t, people=self.labels.get((t.user_id, t.item_id))) if t.kind == ORIGINAL else t
                     for t in texts]
        ended = sliced.stopped
        stopped = ended.note() if ended is not None and ended.check == Faithfulness.name else None
        tested = Faithfulness.name in sliced.stops
        return summarise(texts, judge=self.label, scope=scope, min_rate=gate.min_faithful_rate,
                         alpha=check_alphas(gate.alpha)[1] if tested else gate.alpha,
                         min_agreement=gate.min_judge_agreement, stopped=stopped)

    def probe_for(self, cases: Sequence[EvalCase]) -> Probe | None:
        """The judge's value of one user for its sequential test (None without a judge): the share of the
        user's original explanations it judged faithful, each also asked with the history reversed as the
        finding asks it — the same prompts, so the finding asks none of them again."""
        if not self.on:
            return None
        async def probe(pairs: Sequence[PairResult]) -> float | None:
            jobs = original_jobs(originals(cases, pairs))
            read = [t.faithful for t in await run_jobs(self._judges, jobs) if t.faithful is not None]
            return sum(read) / len(read) if read else None

        return probe

    @property
    def label(self) -> str:
        """The judges as the reports name them ("a (ollama, …) + b (…)" when several)."""
        return " + ".join(self.infos[m].label() if m in self.infos else m for m in self.settings.judge_models)

    def counters(self) -> dict[str, int]:
        """This process's judge calls (made, from the cache, failed), for the run's call counters."""
        total: dict[str, int] = {}
        for judge in self._judges:
            for name, value in judge.stats.to_dict().items():
                total[name] = total.get(name, 0) + value
        return total

    def tokens(self) -> dict[str, dict[str, int]]:
        """This process's judge tokens per judge model (``JudgeStats.tokens``), for the run's cost."""
        # No judges yet (a process that never judged): nothing counted. Built in judge-model's order.
        found = {model: judge.stats.tokens()
                 for model, judge in zip(self.settings.judge_models, self._judges, strict=False)}
        return {model: counts for model, counts in found.items() if counts}

    # ------------------------------------------------------------------ what the judges cost
    def call_costs(self) -> list[tuple[str, float, str]]:
        """Each judge model, the most one of its calls costs at its price, and on what that rests: its tokens
        a call last time (:func:`~.pace.load_judge_tokens`), else the most a judge call can take (a full
        num-ctx prompt and the judge's reply room). A judge without a price is a ConfigError under max-cost:
        its calls count."""
        settings, found = self.settings, []
        room = max(settings.num_predict, JUDGE_NUM_PREDICT)
        for model in settings.judge_models if self.on else ():
            price = price_for(settings.price, model)
            if price is None:
                named = ", ".join(settings.price) or "none"
                raise ConfigError(f"max-cost {settings.max_cost:g}: judge model {model!r} has no price "
                                  f"(price: {named}); the judge's calls count — give it one (0/0 for a "
                                  "judge that costs nothing), or a price for every model")
            measured = load_judge_tokens(self._kept, judge_backend(settings), model)
            if measured is not None:
                found.append((model, measured.call_cost(price), f"{model}'s tokens a judge call last time"))
            else:
                found.append((model, tokens_cost(settings.num_ctx, room, price),
                              f"{model} before any measured judge call: a full context of "
                              f"{settings.num_ctx:,} prompt and {room:,} completion tokens"))
        return found

    def user_cost(self, gate: GateSettings) -> tuple[float, str]:
        """What the judges' calls on one user of ``gate`` cost at most (each judge reads the user's original
        forward and reversed, and with judge=all every pair), and the clause that says so; (0, "") without
        a judge."""
        costs = self.call_costs()
        if not costs:
            return 0.0, ""
        calls = planned_judge_calls(1, self.settings.judge, calls_per_user(self.settings, gate) - 1)
        total = sum(calls * cost for _, cost, _ in costs)
        said = "; ".join(f"{calls} at {money(cost)}, {basis}" for _, cost, basis in costs)
        return total, f"; and judge calls: {said}"

    def dry_run_lines(self, judge_calls: int) -> list[str]:
        """What the dry run says the judges' ``judge_calls`` (each judge's, at most) will cost at their
        prices, from their tokens a call last time; nothing for a judge without a price."""
        lines = []
        for model in self.settings.judge_models if self.on and judge_calls else ():
            price = price_for(self.settings.price, model)
            if price is None:
                continue
            measured = load_judge_tokens(self._kept, judge_backend(self.settings), model)
            if measured is None:
                lines.append(f"{model} (judge): the cost is known once a run has counted a judge call's "
                             "tokens (none recorded yet)")
                continue
            lines.append(f"{model} (judge): ≈ {money(measured.call_cost(price) * judge_calls)} for these "
                         f"{judge_calls:,} judge calls at its price ({measured.prompt_tokens:,.0f} prompt + "
                         f"{measured.completion_tokens:,.0f} completion tokens a judge call last time; cache "
                         "hits are free)")
        return lines

    def remember(self, result: RunResult) -> None:
        """Keep each judge's tokens a call for the next dry run and max-cost (the run's cache writes)."""
        if self.on:
            remember_judge_tokens(self._kept, result, backend=judge_backend(self.settings))

    def record(self) -> dict[str, Any]:
        """What the run record says of the judges (settings ``judge_signature``): each model and digest."""
        if not self.on:
            return {}
        signed = []
        for model in self.settings.judge_models:
            info = self.infos.get(model)
            digest = info.digest if info is not None else None
            signed.append(f"{info.name if info is not None else model}@{digest or 'unknown'}")
        # Verdicts under other criteria are another judge's: the criteria's digest is part of its signature.
        criteria = (f"+criteria:{hashlib.sha256(self.criteria.encode()).hexdigest()[:12]}" if self.criteria
                    else "")
        return {"judge_signature": ",".join(signed) + criteria}

    def adopt(self, info: Mapping[str, Any], every: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """The judges' facts as another process (an xdist worker) found them: ``every`` judge's by the
        model named, or (a payload of one judge) the first judge's."""
        if not self.on:
            return
        for model, found in (every or {self.settings.judge_models[0]: info}).items():
            if found:
                self.infos.setdefault(model, ModelInfo(**found))
