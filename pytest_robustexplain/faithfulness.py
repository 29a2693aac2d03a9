"""The faithfulness judge's rules: reading its reply, and what its verdicts say of a slice.

ρ measures stability, the guard measures whether the explanation depends on the user; neither can tell an
explanation from a text that merely looks grounded (one title echoed, the history listed back). The opt-in
judge (``judge-model``) reads each original explanation beside the history the explainer saw and the item,
and answers in one fixed JSON shape (the prompt is in ``explainers/judge.py``, the design in
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
from collections.abc import Sequence
from dataclasses import dataclass

from .guard import user_share_bounds
from .results import (  # noqa: F401  (JUDGE_SCOPES: what the judge reads, named here too)
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


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_verdict(text: str, *, cut: bool = False) -> JudgeReply:
    """The judge's verdict from its reply (the last JSON object holding ``faithful``), or a failure.

    The shape is fixed: ``faithful`` 0 or 1 (true/false accepted), ``unsupported`` a list of strings,
    ``rationale`` a string. A verdict of 1 that lists an unsupported claim is read as not faithful.
    ``cut``: the server cut the reply at the token limit, said in the failure when it is unreadable.
    """
    candidates = [o for o in _objects(text) if "faithful" in o]
    if not candidates:
        why = "no JSON object with \"faithful\" in the reply"
        return JudgeReply(None, failure=f"{why} (cut at the token limit)" if cut else why)
    verdict = candidates[-1]
    faithful = verdict.get("faithful")
    if isinstance(faithful, bool):
        value = faithful
    elif type(faithful) is int and faithful in (0, 1):
        value = bool(faithful)
    else:
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
    from .stats import cluster_interval

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
             bounds: tuple[float, float], agreement_high: float) -> tuple[str, str]:
    """(outcome, reason) of the min-faithful-rate gate; ``bounds`` of the faithful rate and the upper
    bound of the reorder agreement, with users as the unit."""
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
    if high < min_rate:
        return FAIL, f"{rate}, confidently below min-faithful-rate {min_rate:g}"
    if low >= min_rate:
        return PASS, f"{rate}, confidently at or above min-faithful-rate {min_rate:g}"
    return INCONCLUSIVE, (f"{rate}: not enough evidence either way against min-faithful-rate {min_rate:g}; "
                          "more users would decide it")


def summarise(texts: Sequence[JudgedText], *, judge: str, scope: str, min_rate: float | None,
              alpha: float) -> FaithfulnessResult:
    """The judge's finding in one slice from its verdicts (originals; every text with ``scope="all"``)."""
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
        agreement_high=agreement_high)
    if outcome is None:
        message = f"{_rate(faithful, len(read))} original explanations were judged faithful"
    if both and agreed < len(both) and "order of the history" not in message:
        message += (f"; the judge changed its verdict on {len(both) - agreed} of {len(both)} cases when the "
                    "history was listed in reverse order")
    return FaithfulnessResult(
        judge=judge, scope=scope, judged=len(read), faithful=faithful, failures=failures,
        low=low, high=high, agreed=agreed, compared=len(both), agreement_high=agreement_high,
        min_rate=min_rate, outcome=outcome, message=message, by_kind=dict(sorted(by_kind.items())),
        drop_by_kind=_drops(texts, alpha), texts=tuple(texts), alpha=alpha)
