"""The faithfulness judge's rules: reading its reply, and what its verdicts say of a slice.

ρ measures stability, the guard measures whether the explanation depends on the user; neither can tell an
explanation from a text that merely looks grounded (one title echoed, the history listed back). The opt-in
judge (``judge-model``) reads each original explanation beside the history the explainer saw and the item,
and answers in one fixed JSON shape (the prompt is in ``prompt``, the design in
``docs/faithfulness.md``)::

    {"preferences": "...", "unsupported": ["..."], "rationale": "...", "faithful": 0 or 1}

Reading it (:func:`read_verdict`) rejects by default: a reply that is not that shape is a *judge failure*
(counted and shown, never a pass), and a verdict of 1 that lists an unsupported claim is not faithful.
Each judged case is also judged with the history lines in reverse order — the facts do not change — and the
agreement of the two verdicts is reported: a judge that flips on reordering is itself not trustworthy.

:func:`summarise` turns the verdicts into a :class:`~pytest_robustexplain.results.FaithfulnessResult`; the
optional gate ``min-faithful-rate`` decides on evidence, with one-sided exact (Clopper–Pearson) bounds at
alpha: FAIL when the faithful rate is confidently below it, PASS when confidently at or above it, and
INCONCLUSIVE in between — and also when the judge failed on more than :data:`MAX_JUDGE_FAILURE_SHARE` of the
explanations or flipped on reordering confidently more often than :data:`MIN_JUDGE_AGREEMENT` allows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...data.io import (
    Where,
    check_fields,
    csv_records,
    document_records,
    extension,
    jsonl_records,
    required_id,
)
from ...errors import DataError
from ...results import (  # noqa: F401  (JUDGE_SCOPES: what the judge reads, named here too)
    FAIL,
    INCONCLUSIVE,
    JUDGE_SCOPES,
    ORIGINAL,
    PASS,
    FaithfulnessResult,
    Interval,
    JudgedText,
)

# More judge failures than this share of the judged explanations leave the gate unmeasured (as cut replies
# do the stability gate): the rate would rest on the replies a weak judge happened to finish.
MAX_JUDGE_FAILURE_SHARE = 0.05
# The judge's verdict should survive listing the same history in reverse order; an agreement rate
# confidently below this leaves the gate unmeasured and the report says the judge is not trustworthy.
MIN_JUDGE_AGREEMENT = 0.8
# Several judges whose agreement beyond chance (Cohen's or Fleiss' kappa) is confidently below this — below
# "moderate" on the usual reading of kappa — leave the gate unmeasured, as a judge that flips on reordering
# does: their majority would rest on which of them happened to be in it.
MIN_JUDGES_KAPPA = 0.4
# ... decided on this many users at least: with 10, two judges at kappa 0.4 were found below it 13.6 % of the
# time at prevalence 0.8 (benchmarks/bench_judge_agreement.py); their kappa is reported either way.
MIN_COMPARED_USERS = 20
# What a hostile or rambling judge may put in a report.
MAX_RATIONALE_CHARS = 400
MAX_CLAIMS = 8
MAX_CLAIM_CHARS = 200


@dataclass(frozen=True)
class JudgeReply:
    """One judge reply read: ``faithful`` None with ``failure`` set when it was not the shape."""

    faithful: bool | None
    unsupported: tuple[str, ...] = ()
    rationale: str = ""
    failure: str = ""


def _objects(text: str) -> list[dict[str, object]]:
    """Every JSON object in ``text`` (fenced or not), in order."""
    decoder = json.JSONDecoder()
    found: list[dict[str, object]] = []
    start = text.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        start = text.find("{", end)
    return found


def _said(faithful: object) -> bool | str:
    """What a ``faithful`` value says: True or False (0/1 or true/false), else its text (not a verdict)."""
    if isinstance(faithful, bool):
        return faithful
    return bool(faithful) if type(faithful) is int and faithful in (0, 1) else repr(faithful)


# A verdict-shaped key inside an explanation: shown to the judge renamed, so that an explanation quoted back
# in the judge's reply cannot be read as the judge's answer.
_VERDICT_KEY = re.compile(r'"\s*faithful\s*"(\s*:)', re.IGNORECASE)
NEUTRALISED_KEY = '"faithful (written in the explanation)"'


def neutralised(explanation: str) -> str:
    """The explanation as the judge's prompt shows it: each ``"faithful":`` key renamed, visibly."""
    return _VERDICT_KEY.sub(lambda m: NEUTRALISED_KEY + m.group(1), explanation)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_verdict(text: str, *, cut: bool = False, explanation: str = "") -> JudgeReply:
    """The judge's verdict from its reply (the last JSON object holding ``faithful``), or a failure.

    The shape is fixed: ``faithful`` 0 or 1 (true/false accepted), ``unsupported`` a list of strings,
    ``rationale`` a string. A verdict of 1 that lists an unsupported claim is read as not faithful.
    ``cut``: the server cut the reply at the token limit, said in the failure when it is unreadable.

    The explanation must never write its own verdict: a reply that repeats a verdict-shaped object of the
    ``explanation`` it judged, or whose verdict-shaped objects disagree (the judge's 0, then the
    explanation's 1 quoted after it), is a judge failure — never a verdict. (The prompt also neutralises
    such objects before the judge sees them: :func:`neutralised`.)
    """
    candidates = [o for o in _objects(text) if "faithful" in o]
    if not candidates:
        why = "no JSON object with \"faithful\" in the reply"
        return JudgeReply(None, failure=f"{why} (cut at the token limit)" if cut else why)
    planted = [o for o in _objects(explanation) if "faithful" in o]
    if any(o in planted for o in candidates):
        return JudgeReply(None, failure="the reply repeats a verdict written in the explanation it judges")
    if len({_said(o.get("faithful")) for o in candidates}) > 1:
        return JudgeReply(None, failure="the reply holds verdicts that disagree (a quoted one among them?)")
    verdict = candidates[-1]
    faithful = verdict.get("faithful")
    value = _said(faithful)
    if not isinstance(value, bool):
        return JudgeReply(None, failure=f"\"faithful\" is {_short(repr(faithful), 40)}, not 0 or 1")
    claims = verdict.get("unsupported")
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        return JudgeReply(None, failure="\"unsupported\" is not a list of strings")
    rationale = verdict.get("rationale")
    if not isinstance(rationale, str) or not rationale.strip():
        return JudgeReply(None, failure="\"rationale\" is missing or empty")
    kept = tuple(_short(c, MAX_CLAIM_CHARS) for c in claims if c.strip())[:MAX_CLAIMS]
    # Reject by default: a claim the judge itself found unsupported outweighs its 1.
    return JudgeReply(value and not kept, kept, _short(rationale, MAX_RATIONALE_CHARS))


def _rate(k: int, n: int) -> str:
    return f"{k} of {n} ({k / n:.0%})" if n else "none"


def _drops(texts: Sequence[JudgedText], alpha: float) -> dict[str, Interval]:
    """Per kind: the mean over cases of (original faithful − the kind's faithful share), by user."""
    from ...stats import cluster_interval  # lazy: loads numpy

    original = {(t.user_id, t.item_id): float(t.faithful) for t in texts
                if t.kind == ORIGINAL and t.faithful is not None}
    by_kind: dict[str, dict[tuple[str, str], list[float]]] = {}
    for t in texts:
        if t.kind != ORIGINAL and t.faithful is not None and (t.user_id, t.item_id) in original:
            by_kind.setdefault(t.kind, {}).setdefault((t.user_id, t.item_id), []).append(float(t.faithful))
    out = {}
    for kind, cases in sorted(by_kind.items()):
        keys = sorted(cases)
        values = [original[k] - math.fsum(cases[k]) / len(cases[k]) for k in keys]
        out[kind] = cluster_interval(values, [u for u, _ in keys], confidence=1 - 2 * alpha,
                                     bounds=(-1.0, 1.0))
    return out


def _outcome(judged: int, faithful: int, failures: int, agreed: int, compared: int, *, min_rate: float,
             bounds: tuple[float, float], agreement_high: float, stopped: str | None = None
             ) -> tuple[str, str]:
    """(outcome, reason) of the min-faithful-rate gate; ``bounds`` of the faithful rate and the upper
    bound of the reorder agreement, with users as the unit; ``stopped``: the judge's sequential test
    failed the item (its sentence)."""
    total = judged + failures
    if failures > MAX_JUDGE_FAILURE_SHARE * total:
        return INCONCLUSIVE, (f"the judge's reply was not the verdict's shape for {failures} of {total} "
                              "explanations, so the faithful rate is not measured; use a stronger judge "
                              "model (judge-model) or raise num-predict")
    if compared and agreement_high < MIN_JUDGE_AGREEMENT:
        return INCONCLUSIVE, (f"the judge changed its verdict on {compared - agreed} of {compared} cases "
                              "when only the order of the history lines changed: its verdicts are not "
                              "trustworthy, so the faithful rate is not measured; use a stronger judge model")
    low, high = bounds
    rate = f"{_rate(faithful, judged)} original explanations were judged faithful [{low:.2f}, {high:.2f}]"
    if stopped is not None:  # "…, below min-faithful-rate 0.5 — the sequential test decided it after …"
        said = stopped[:1].lower() + stopped[1:].rstrip(".")
        return FAIL, f"{rate}, below min-faithful-rate {min_rate:g} — {said}"
    if high < min_rate:
        return FAIL, f"{rate}, confidently below min-faithful-rate {min_rate:g}"
    if low >= min_rate:
        return PASS, f"{rate}, confidently at or above min-faithful-rate {min_rate:g}"
    return INCONCLUSIVE, (f"{rate}: not enough evidence either way against min-faithful-rate {min_rate:g}; "
                          "more users would decide it")


# ------------------------------------------------------------------------------------------ people's verdicts
LABEL_FIELDS = ("user_id", "item_id", "faithful")
# Below this many labelled users the kappa bound's error exceeds alpha (benchmarks/bench_judge_agreement.py):
# min-judge-agreement then never trusts the judge.
MIN_LABELLED_USERS = 20
_YES = {"1", "true", "yes", "faithful"}
_NO = {"0", "false", "no", "unfaithful", "not faithful"}


def read_labels(path: Path) -> dict[tuple[str, str], bool]:
    """People's verdicts by (user, item) from ``judge-labels``: CSV (user_id,item_id,faithful), JSON or
    YAML (a list, or ``{labels: [...]}``) or JSONL. A DataError names the file, record and field."""
    ext = extension(path)
    if ext == ".csv":
        records = csv_records(path, LABEL_FIELDS, LABEL_FIELDS, None)
    elif ext == ".jsonl":
        records = jsonl_records(path)
    else:
        records = document_records(path, ext, "labels")
    labels: dict[tuple[str, str], bool] = {}
    for record in records:
        where = Where(str(path), record.loc)
        obj = check_fields(record.value, LABEL_FIELDS, where, "label")
        key = (required_id(obj, where, "user_id"), required_id(obj, where, "item_id"))
        if key in labels:
            raise where.error(f"user {key[0]}, item {key[1]} is labelled twice", "user_id")
        labels[key] = _verdict(obj.get("faithful"), where)
    if not labels:
        raise DataError("no labels: write one line per case, user_id,item_id,faithful", source=str(path))
    return labels


def _verdict(value: Any, where: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else ""
    if text in _YES or text in _NO:
        return text in _YES
    raise where.error(f"faithful must be 1 or 0 (true/false, yes/no), got {value!r:.40}", "faithful")


def _kappa(people: Sequence[float], judge: Sequence[float]) -> float:
    """Cohen's kappa of two binary raters (NaN when chance agreement is 1)."""
    total = len(people)
    agree = sum(p == j for p, j in zip(people, judge, strict=True)) / total
    p1 = sum(bool(p) for p in people) / total
    j1 = sum(bool(j) for j in judge) / total
    chance = p1 * j1 + (1 - p1) * (1 - j1)
    return math.nan if chance >= 1 - 1e-12 else (agree - chance) / (1 - chance)


def _kappa_bounds(cases: Sequence[tuple[str, bool, bool]], alpha: float) -> tuple[float, float]:
    """One-sided bounds of people's and the judge's kappa at ``alpha`` each (:func:`_jackknife`)."""
    def kappa(rows: Sequence[tuple[bool, bool]]) -> float:
        return _kappa([p for p, _ in rows], [j for _, j in rows])

    return _jackknife([u for u, _, _ in cases], [(p, j) for _, p, j in cases], kappa, alpha)


def _jackknife(owners: Sequence[str], rows: Sequence[Any], statistic: Callable[[Sequence[Any]], float],
               alpha: float) -> tuple[float, float]:
    """One-sided bounds of ``statistic(rows)`` at ``alpha`` each: the value ± t(users − 1) times its
    jackknife standard error over users (a user's rows go together; each user left out in turn), the t
    quantile taken at alpha/2. At alpha itself — and with a percentile bootstrap, tried first — a judge
    whose true kappa is the limit was trusted 6–12 % of the time with 10–100 users
    (``benchmarks/bench_judge_agreement.py``, docs/statistics.md); the halved level is what keeps that at
    alpha. Leave-out values where kappa is undefined count as 0."""
    from scipy import stats as sps  # lazy: loads numpy, scipy

    users = sorted(set(owners))
    if len(users) < 2:
        return -1.0, 1.0
    full = statistic(rows)
    left = []
    for user in users:
        kept = [row for owner, row in zip(owners, rows, strict=True) if owner != user]
        value = statistic(kept) if kept else math.nan
        left.append(0.0 if math.isnan(value) else value)
    mean = sum(left) / len(left)
    n = len(users)
    se = math.sqrt((n - 1) / n * sum((v - mean) ** 2 for v in left))
    half = float(sps.t.ppf(1 - alpha / 2, n - 1)) * se
    return max(-1.0, full - half), min(1.0, full + half)


def _fleiss(rows: Sequence[Sequence[int]]) -> float:
    """Fleiss' kappa of binary verdicts (1/0), every row rated by the same number of judges (NaN when
    chance agreement is 1)."""
    raters = len(rows[0])
    yes = [sum(row) for row in rows]
    agree = sum(y * (y - 1) + (raters - y) * (raters - y - 1) for y in yes) / (
        len(rows) * raters * (raters - 1))
    p1 = sum(yes) / (len(rows) * raters)
    chance = p1 * p1 + (1 - p1) * (1 - p1)
    return math.nan if chance >= 1 - 1e-12 else (agree - chance) / (1 - chance)


def _between(rows: Sequence[Sequence[int]]) -> float:
    """The judges' agreement beyond chance: Cohen's kappa for two, Fleiss' for more."""
    if len(rows[0]) == 2:
        return _kappa([r[0] for r in rows], [r[1] for r in rows])
    return _fleiss(rows)


def judges_agreement(texts: Sequence[JudgedText], alpha: float) -> dict[str, Any]:
    """How far several judges agree beyond chance on the original explanations every one of them judged:
    Cohen's kappa for two, Fleiss' for more, with jackknife bounds over users; empty with one judge."""
    rows = [(t.user_id, t.verdicts) for t in texts
            if t.kind == ORIGINAL and t.verdicts and -1 not in t.verdicts]
    if not rows:
        return {}
    verdicts = [v for _, v in rows]
    value = _between(verdicts)
    bounds = ([value, *_jackknife([u for u, _ in rows], verdicts, _between, alpha)] if not math.isnan(value)
              else [None, None, None])
    return {"judges": len(verdicts[0]), "compared": len(rows), "users": len({u for u, _ in rows}),
            "statistic": "Cohen's" if len(verdicts[0]) == 2 else "Fleiss'", "kappa": bounds}


def judges_text(judges: Mapping[str, Any]) -> str:
    """``Cohen's κ 0.12 [-0.20, 0.45] between 2 judges on 6 explanations; the majority decides``."""
    kappa, low, high = judges["kappa"]
    between = f"between {judges['judges']} judges on {judges['compared']} explanations"
    if kappa is None:  # one plain sentence: the agreement cannot be measured, and why
        said = f"{judges['statistic']} κ cannot be measured {between}: each judge gave the one same verdict"
    else:
        said = f"{judges['statistic']} κ {kappa:.2f} [{low:.2f}, {high:.2f}] {between}"
    return f"{said}; the majority decides (a tie is not faithful)"


def people_agreement(texts: Sequence[JudgedText], alpha: float) -> dict[str, Any]:
    """The judge against people on the original explanations both judged: agreement (one-sided exact
    bounds, users as the unit), Cohen's kappa (jackknife bounds over users), and the confusion table; empty
    when no labelled case was judged."""
    cases = [(t.user_id, bool(t.people), bool(t.faithful)) for t in texts
             if t.kind == ORIGINAL and t.people is not None and t.faithful is not None]
    if not cases:
        return {}
    from ...stats import user_share_bounds  # lazy: loads numpy, when the judge has been read

    agree = sum(p == j for _, p, j in cases)
    low, high = user_share_bounds([(u, p == j) for u, p, j in cases], alpha)
    kappa = _kappa([p for _, p, _ in cases], [j for _, _, j in cases])
    # Undefined (one verdict only on a side) is None: the JSON report holds no NaN.
    bounds = [kappa, *_kappa_bounds(cases, alpha)] if not math.isnan(kappa) else [None, None, None]
    table = {"both_faithful": sum(p and j for _, p, j in cases),
             "people_only": sum(p and not j for _, p, j in cases),
             "judge_only": sum(j and not p for _, p, j in cases),
             "neither": sum(not p and not j for _, p, j in cases)}
    return {"labelled": len(cases), "users": len({u for u, _, _ in cases}), "agree": agree,
            "agreement": [agree / len(cases), low, high], "kappa": bounds, "confusion": table}


def people_text(people: Mapping[str, Any]) -> str:
    """``6 of 8 labelled cases agree (75 % [0.41, 0.95]) · κ 0.50 [0.00, 0.88] · both faithful 3, …``."""
    share, low, high = people["agreement"]
    kappa, k_low, k_high = people["kappa"]
    t = people["confusion"]
    said = "undefined: people or the judge gave one verdict only" if kappa is None else (
        f"{kappa:.2f} [{k_low:.2f}, {k_high:.2f}]")
    return (f"{people['agree']} of {people['labelled']} labelled cases agree ({100 * share:.0f} % "
            f"[{low:.2f}, {high:.2f}]) · Cohen's κ {said} · both faithful {t['both_faithful']}, people only "
            f"{t['people_only']}, judge only {t['judge_only']}, neither {t['neither']}")


def summarise(texts: Sequence[JudgedText], *, judge: str, scope: str, min_rate: float | None,
              alpha: float, min_agreement: float | None = None, stopped: str | None = None
              ) -> FaithfulnessResult:
    """The judge's finding in one slice from its verdicts (originals; every text with ``scope="all"``);
    with people's verdicts on some cases, the judge's agreement with them — and, with ``min_agreement``,
    a gate whose faithful rate counts only when kappa is confidently at least that. ``stopped``: the
    sentence of the judge's own sequential test that ended the slice (its FAIL stands on the users it
    saw, unless the judge is not to be trusted: failures, flips, people or other judges say so)."""
    from ...stats import user_share_bounds  # lazy: loads numpy, when the judge has been read

    originals = [t for t in texts if t.kind == ORIGINAL]
    read = [t for t in originals if t.faithful is not None]
    faithful = sum(1 for t in read if t.faithful)
    failures = len(originals) - len(read)
    both = [t for t in read if t.reordered is not None]
    agreed = sum(1 for t in both if t.reordered == t.faithful)
    by_kind: dict[str, list[int]] = {}
    for t in texts:
        if t.kind != ORIGINAL and t.faithful is not None:
            counts = by_kind.setdefault(t.kind, [0, 0])
            counts[0] += int(t.faithful)
            counts[1] += 1
    # Users are the unit of every bound: one user's explanations are not independent of each other.
    low, high = user_share_bounds([(t.user_id, bool(t.faithful)) for t in read], alpha)
    agreement_high = user_share_bounds([(t.user_id, t.reordered == t.faithful) for t in both], alpha)[1]
    outcome, message = (None, "") if min_rate is None else _outcome(
        len(read), faithful, failures, agreed, len(both), min_rate=min_rate, bounds=(low, high),
        agreement_high=agreement_high, stopped=stopped)
    people = people_agreement(texts, alpha)
    if min_rate is not None and min_agreement is not None and outcome in (PASS, FAIL):
        distrust = judge_distrust(people, min_agreement)
        if distrust:
            outcome, message = INCONCLUSIVE, distrust
    judges = judges_agreement(texts, alpha)
    if (min_rate is not None and outcome in (PASS, FAIL) and judges and judges["users"] >= MIN_COMPARED_USERS
            and judges["kappa"][2] is not None and judges["kappa"][2] < MIN_JUDGES_KAPPA):
        outcome, message = INCONCLUSIVE, (
            f"the judges disagree: {judges_text(judges)}, confidently below {MIN_JUDGES_KAPPA:g}, so their "
            "faithful rate is not measured — one of them does not judge as the others do")
    if outcome is None:
        message = f"{_rate(faithful, len(read))} original explanations were judged faithful"
    if both and agreed < len(both) and "order of the history" not in message:
        message += (f"; the judge changed its verdict on {len(both) - agreed} of {len(both)} cases when the "
                    "history was listed in reverse order")
    return FaithfulnessResult(
        judge=judge, scope=scope, judged=len(read), faithful=faithful, failures=failures,
        low=low, high=high, agreed=agreed, compared=len(both), agreement_high=agreement_high,
        min_rate=min_rate, outcome=outcome, message=message, by_kind=dict(sorted(by_kind.items())),
        drop_by_kind=_drops(texts, alpha), texts=tuple(texts), alpha=alpha, people=people, judges=judges)


def judge_distrust(people: Mapping[str, Any], min_agreement: float) -> str:
    """Why the judge's verdicts do not count against people's (min-judge-agreement), or ""."""
    if not people:
        return ("no labelled case was judged (judge-labels names none of this item's users and items), so "
                f"the judge's agreement with people is unknown and min-judge-agreement {min_agreement:g} "
                "leaves its faithful rate unmeasured")
    kappa, k_low, _ = people["kappa"]
    users = people["users"]
    if users < MIN_LABELLED_USERS:
        return (f"the judge against people: {people_text(people)}; {users} labelled users are too few to "
                f"show its kappa is at least min-judge-agreement {min_agreement:g} (it takes "
                f"{MIN_LABELLED_USERS}), so the faithful rate is not measured — label cases of more users")
    if kappa is None or k_low < min_agreement:
        return (f"the judge agrees with people beyond chance too little to count: {people_text(people)}; "
                f"κ is not confidently at least min-judge-agreement {min_agreement:g}, so the faithful rate "
                "is not measured — use a stronger judge model (judge-model) or label more cases")
    return ""
