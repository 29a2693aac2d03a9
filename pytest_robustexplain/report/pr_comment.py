"""The pull-request comment: this change against the baseline, in one short Markdown table per model.

``robustexplain report robustness.json --format pr-comment --baseline baseline.json`` writes it; the
reusable GitHub Action (``action.yml``) posts it once per pull request and updates that same comment on
every push (it finds it by :data:`MARKER`). Every value goes through
:func:`~pytest_robustexplain.sanitize.markdown_inert`, so nothing from a model or a data file renders as a
link, an image or HTML on the pull request.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..results import FAIL, INCONCLUSIVE, INSENSITIVE, PASS, GateResult, Interval, RunResult, money
from ..sanitize import comment_inert
from ..settings import option
from .summary import (
    JUDGE_COST_LABEL,
    Summary,
    fmt_interval,
    judge_cost_lines,
    model_names,
    model_outcome,
    named_headline,
    recent_runs,
    summarize,
)

MARKER = "<!-- robustexplain:pr-comment -->"


# GitHub refuses a comment over 65,536 characters (35 failing tests once made 77,392): the body stays under
# this, the note that it was cut included.
MAX_COMMENT_CHARS = 60_000
_CUT_NOTE = "_Cut to fit GitHub's comment size: the full report is in {where}._"


def _cell(text: object) -> str:
    return comment_inert(str(text))


def _delta(now: Interval | None, before: Interval | None, *, higher_is_better: bool = True) -> str:
    """The change, in words as well as a sign (a rate under a ``max`` limit: lower is better)."""
    if now is None or before is None:
        return "—"
    change = now.mean - before.mean
    if round(change, 3) == 0:
        return "±0.000"
    return f"{change:+.3f} ({'better' if (change > 0) == higher_is_better else 'worse'})"


def _sensitivity_delta(now: Summary, before: Summary | None, margin: float) -> str:
    """S's change. S = ρ_floor − ρ_swap rises when the explanations differ more between users — and just as
    much when a model collapses into noise that also changes them for the user's own perturbed history. So a
    rise reads as better only while ρ held (fell no more than the regression margin); with ρ down, it is
    said as what it is, and R (how far the perturbed explanation stands from another user's) is the row
    that weighs the two."""
    g = now.sensitivity
    b = before.sensitivity if before is not None else None
    if g is None or b is None or before is None:
        return "—"
    rise = g.sensitivity.mean - b.sensitivity.mean
    fall = before.overall.mean - now.overall.mean
    if round(rise, 3) > 0 and fall > margin:
        return (f"{rise:+.3f} (not better: ρ fell {fall:.3f} with it — explanations that changed for "
                "everyone; see R)")
    return _delta(g.sensitivity, b.sensitivity)


def _rows(now: Summary, before: Summary | None, margin: float) -> list[list[str]]:
    rows = [["Overall ρ", fmt_interval(before.overall) if before else "—", fmt_interval(now.overall),
             _delta(now.overall, before.overall if before else None)]]
    for kind, interval in now.by_kind.items():
        old = before.by_kind.get(kind) if before else None
        rows.append([f"ρ {kind}", fmt_interval(old) if old else "—", fmt_interval(interval),
                     _delta(interval, old)])
    g, b = now.sensitivity, before.sensitivity if before else None
    if g is not None:
        rows.append(["Sensitivity S (another user's history)", fmt_interval(b.sensitivity) if b else "—",
                     fmt_interval(g.sensitivity), _sensitivity_delta(now, before, margin)])
        rows.append(["Insensitive users", f"{len(b.insensitive_users)} of {b.n_users}" if b else "—",
                     f"{len(g.insensitive_users)} of {g.n_users}", "—"])
        if g.relative_robustness.interval is not None:
            old_r = b.relative_robustness.interval if b else None
            rows.append(["Relative robustness R (gated kinds; 0: as far as another user's)",
                         fmt_interval(old_r) if old_r else "—", fmt_interval(g.relative_robustness.interval),
                         _delta(g.relative_robustness.interval, old_r)])
    rows += _faithfulness_rows(now, before)
    rows += _check_rows(now, before)
    if now.money:  # at the price set: what the replies these verdicts read cost
        was = before.money.get("total") if before is not None and before.money else None
        rows.append(["Cost of the replies read (at the price set)", money(was) if was is not None else "—",
                     money(now.money["total"]), "—"])
    for attack in now.attacks:
        was = next((a for a in before.attacks if a.kind == attack.kind), None) if before else None
        rows.append([f"{attack.kind} succeeded", f"{was.successes} of {was.n}" if was else "—",
                     f"{attack.successes} of {attack.n}", "—"])
    return rows


def _faithfulness_rows(now: Summary, before: Summary | None) -> list[list[str]]:
    """The judge's faithful rate, the misattributed-preference rate and the flip, when measured: counts
    beside counts, their change in points of the share."""
    rows = []
    f, fb = now.faithfulness, before.faithfulness if before else None
    if f is not None:
        rows.append(_count_row("Judged faithful (originals)", (f.faithful, f.judged),
                               (fb.faithful, fb.judged) if fb else None))
        if f.judges:  # several judges: how far they agree beyond chance
            rows.append([f"Judges agree ({f.judges['statistic']} κ)", "—", _kappa(f.judges["kappa"][0]),
                         f"{f.judges['judges']} judges, the majority decides"])
        if f.people:  # the judge checked against people's verdicts (judge-labels)
            before_kappa = _kappa(fb.people["kappa"][0] if fb is not None and fb.people else None,
                                  measured=fb is not None and bool(fb.people))
            rows.append(["Judge against people (Cohen's κ)", before_kappa, _kappa(f.people["kappa"][0]),
                         f"{f.people['agree']} of {f.people['labelled']} labelled cases agree"])
    p, pb = now.polarity, before.polarity if before else None
    if p is not None:
        rows.append(_count_row("Cites a dislike as a reason to like", (p.misattributed, p.eligible),
                               (pb.misattributed, pb.eligible) if pb else None))
    flip, was = now.flip, before.flip if before else None
    if flip is not None:
        old = was.sensitivity if was else None
        rows.append(["Preference flip moved it (ρ_floor − ρ_flip)", fmt_interval(old) if old else "—",
                     fmt_interval(flip.sensitivity), _delta(flip.sensitivity, old)])
    return rows


def _kappa(value: float | None, *, measured: bool = True) -> str:
    if not measured:
        return "—"
    return "undefined" if value is None else f"{value:.2f}"


def _check_rows(now: Summary, before: Summary | None) -> list[list[str]]:
    """The checks without a section of their own (the user's): value beside value, and its change said as
    better or worse by the side its threshold binds (a ``max`` limit: lower is better)."""
    rows = []
    for f in now.checks:
        was = next((b for b in before.checks if b.check == f.check), None) if before else None
        rows.append([f"{f.check} ({f.outcome or 'reported'})", fmt_interval(was.value, 2) if was else "—",
                     fmt_interval(f.value, 2),
                     _delta(f.value, was.value if was else None, higher_is_better=f.bound == "min")])
    return rows


def _count_row(label: str, now: tuple[int, int], before: tuple[int, int] | None) -> list[str]:
    def shown(count: tuple[int, int] | None) -> str:
        return f"{count[0]} of {count[1]}" if count and count[1] else "—"

    change = (f"{100 * (now[0] / now[1] - before[0] / before[1]):+.0f} points"
              if before and before[1] and now[1] else "—")
    return [label, shown(before), shown(now), change]


def _failed(gates: Sequence[GateResult]) -> list[str]:
    lines = []
    for gate in gates:
        if gate.verdict.outcome == PASS:
            continue
        reason = named_headline(gate.verdict)
        lines.append(f"- {_cell(gate.nodeid)} — **{_cell(gate.verdict.outcome)}**: {_cell(reason)}")
    return lines


def render_pr_comment(run: RunResult, baseline: RunResult | None = None, *, baseline_note: str = "",
                      max_chars: int = MAX_COMMENT_CHARS, details_url: str = "") -> str:
    """The comment body: a status line, then per model the table (baseline | this change | Δ) and the
    items that did not pass with their first reason.

    ``baseline_note`` is said when there is no baseline (the Action: "the default branch saves one"); a body
    over ``max_chars`` lists the items that did not pass as a count, then is cut at a line, ending with
    where the full report is (``details_url``, the workflow run).
    """
    where = f"[the workflow run's artifacts]({details_url})" if _plain_url(details_url) else \
        "the uploaded robustness reports"
    body = _render(run, baseline, baseline_note, details="")
    if len(body) > max_chars:
        body = _render(run, baseline, baseline_note, details=where)
    if len(body) <= max_chars:
        return body
    note = _CUT_NOTE.format(where=where)
    kept: list[str] = []
    for line in body.splitlines():
        if sum(len(k) + 1 for k in kept) + len(line) + len(note) + 3 > max_chars:
            break
        kept.append(line)
    return "\n".join([*kept, "", note]) + "\n"


def _margin(run: RunResult) -> float:
    """The run's regression margin in ρ (its ``max_regression`` setting, else the option's default)."""
    value = run.settings.get("max_regression")
    return float(value) if isinstance(value, (int, float)) else float(option("max-regression").default)


def _plain_url(url: str) -> bool:
    """An http(s) URL a Markdown link can hold as it is (the Action's run URL; nothing from a model)."""
    return bool(re.fullmatch(r"https?://[\w.:-]+(/[\w./%-]*)?", url))


def _render(run: RunResult, baseline: RunResult | None, baseline_note: str, *, details: str) -> str:
    """The body; ``details`` empty lists the items that did not pass, else says where they are listed."""
    names = model_names(run)
    outcomes = [model_outcome(run, n) for n in names]
    margin = _margin(run)
    status = next((o for o in (FAIL, INSENSITIVE, INCONCLUSIVE) if o in outcomes), PASS)
    base_names = model_names(baseline) if baseline is not None else []
    title = f"### Robustness of recommendation explanations: **{status}**"
    lines = [MARKER, title, ""]
    if baseline is None and baseline_note:
        lines += [f"_{_cell(baseline_note)}_", ""]
    for name in names:
        now = summarize(run, name)
        # The baseline's model of the same name, or its only model (a new model replacing the old one).
        base_name = name if name in base_names else (base_names[0] if len(base_names) == 1 else None)
        before = summarize(baseline, base_name) if baseline is not None and base_name else None
        outcome = model_outcome(run, name) or "not gated"
        lines += [f"**{_cell(name)}** — {_cell(outcome)} · {now.n_users} users · {now.n_pairs} pairs", "",
                  "| | baseline | this change | Δ |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in _rows(now, before, margin)]
        recent = recent_runs(run, name)
        if recent:  # the run history: is this change part of a slide, or where it jumped?
            lines += ["", "Recent runs:", *(f"- {_cell(line)}" for line in recent)]
        failed = _failed(run.model_gates(name))
        if failed and not details:
            lines += ["", "<details><summary>Items that did not pass</summary>", "", *failed, "",
                      "</details>"]
        elif failed:
            lines += ["", f"{len(failed)} items did not pass: listed in {details}."]
        lines.append("")
    judged = judge_cost_lines(run)  # the judges' calls, run-wide: each judges every model's explanations
    if judged:
        lines += [f"{JUDGE_COST_LABEL.capitalize()}:", *(f"- {_cell(line)}" for line in judged), ""]
    lines.append(f"<sub>pytest-robustexplain {_cell(run.package_version)} · signature "
                 f"{_cell(run.signature)}</sub>")
    return "\n".join(lines) + "\n"
