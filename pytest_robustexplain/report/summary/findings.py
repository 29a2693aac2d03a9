"""The findings every format shows after its tables, from a :class:`~.compute.Summary`: severity degradation,
noise floor, weakest dimension, failures, user spread and kind tests, cost and time, as (label, value) rows
or lines; and the checks' report sections (:func:`blocks`), each worded by its checks, in order.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ...checks import DEFAULT_CHECKS, FURTHER, sections
from ...results import (
    CONTROL_KIND,
    MAX_CUT_SHARE,
    ORIGINAL_FAILED,
    SWAP_KIND,
    RunResult,
    judge_money,
    money,
    too_many_cut,
)
from ...wording import count_noun, noun
from ..formatting import fmt_interval, fmt_mean, fmt_p, fmt_pct
from .compute import Summary

if TYPE_CHECKING:
    from ...checks.base import Table
    from ...stats import KindDifferences


def spread_text(summary: Summary) -> str | None:
    """The spread of user means, with the history-length strata when it exceeds the paper's limit."""
    spread = summary.user_spread
    if spread.sd is None:
        return None
    text = f"sd of user means {spread.sd:.3f}"
    if not spread.stratified:
        return text
    strata = " · ".join(f"{st.label} ({st.min_length:.0f}–{st.max_length:.0f} interactions, "
                        f"{st.n_users} users) {fmt_interval(st.mean)}" for st in spread.strata)
    text = f"{text} > {spread.sd_limit:g}: by history length {strata}"
    if spread.diversity_strata:  # the effective number of categories (data.UserHistory.diversity)
        diverse = " · ".join(f"{st.label} ({st.min_length:.1f}–{st.max_length:.1f} categories in effect, "
                             f"{st.n_users} users) {fmt_interval(st.mean)}" for st in spread.diversity_strata)
        text += f"; by interaction diversity {diverse}"
    return text


def kind_tests_text(tests: KindDifferences | None) -> str | None:
    """Friedman (users as blocks) first, then the paper's one-way ANOVA with partial η²."""
    if tests is None:
        return None
    parts = []
    if tests.friedman is not None:
        stat, p = tests.friedman
        parts.append(f"Friedman χ² {stat:.2f}, p {fmt_p(p)} ({tests.friedman_users} users)")
    anova = tests.anova
    if anova is not None and anova.f is not None:
        eta = f", partial η² {anova.partial_eta_sq:.3f}" if anova.partial_eta_sq is not None else ""
        parts.append(f"ANOVA F({anova.df_between},{anova.df_within}) {anova.f:.2f}, p {fmt_p(anova.p)}{eta}")
    return "; ".join(parts) or None


def facts(summary: Summary, *, failures_note: str = "") -> list[tuple[str, str]]:
    """The findings rows every format shows after the tables, as (label, value) pairs."""
    rows = [("Severity degradation L1 → L5", fmt_pct(summary.degradation_pct)
             + (" (between users: balanced design)" if summary.design == "balanced" else "")),
            ("Noise floor (same history, resampled)",
             fmt_interval(summary.noise_floor) if summary.noise_floor else "not measured (no control pairs)")]
    if summary.weakest_metric:
        mean = summary.by_metric[summary.weakest_metric].mean
        rows.append(("Weakest dimension", f"{summary.weakest_metric} ({fmt_mean(mean)})"))
    if summary.weakest_kind:
        mean = summary.by_kind[summary.weakest_kind].mean
        rows.append(("Weakest perturbation", f"{summary.weakest_kind} ({fmt_mean(mean)})"))
    lengths = sorted(u.history_length for u in summary.by_user)
    if lengths:
        rows.append(("Interactions per prompt", f"{lengths[0]}–{lengths[-1]} (median "
                                                f"{statistics.median(lengths):g}; the original histories)"))
    failures = f"{summary.n_failures}{failures_note}" if summary.n_failures else "0"
    originals = {(f.key.model, f.key.user_id, f.key.item_id) for f in summary.failures
                 if f.detail.startswith(ORIGINAL_FAILED)}
    if originals:
        from_original = sum(f.detail.startswith(ORIGINAL_FAILED) for f in summary.failures)
        users = "1 user's" if len(originals) == 1 else f"{len(originals)} users'"
        failures += (f"; {from_original} of them because {users} original explanation failed, which "
                     "scores every pair of that user 0")
    rows.append(("Generation failures", failures))
    if summary.design == "balanced":
        rows.append(("Design", "balanced — each user ran every kind at one severity, rotated over the users: "
                               "severity degradation and the kind × severity table compare different users"))
    rows.append(("Replies cut at the token limit", cut_text(summary)))
    if summary.unfit_pairs:
        rows.append((UNFIT_LABEL, unfit_text(summary)))
    if summary.cost:
        rows.append(("Tokens (as the server counted)", cost_text(summary.cost)))
    if summary.money:
        rows.append(("Cost (at the price set)", money_text(summary.money)))
    if summary.time:
        rows.append(("Model time", time_text(summary.time)))
    if summary.keyword_empty:
        count = len(summary.keyword_empty)
        rows.append(("Empty keyword sets", f"{count_noun(count, 'pair')} flagged for review"))
    if summary.keyword_unread:
        rows.append((UNREAD_LABEL, unread_text(summary)))
    spread = spread_text(summary)
    if spread:
        rows.append(("User spread", spread))
    kinds_text = kind_tests_text(summary.kind_tests)
    if kinds_text:
        rows.append(("Kinds differ?", kinds_text))
    rows.append(("Recommendation", summary.recommendation))
    return rows


UNREAD_LABEL = "Keyword tagger could not read"


def unread_text(summary: Summary) -> str:
    """``45 of 45 pairs (CJK script): the tagger reads English, so …``."""
    scripts = ", ".join(name.title() if name != "CJK" else name for name in summary.unread_scripts)
    scales = "".join(SCALE_NOTES[name] for name in summary.unread_scripts if name in SCALE_NOTES)
    return (f"{summary.keyword_unread} of {summary.n_pairs} pairs ({scripts or 'non-Latin'} script): the "
            "keyword tagger reads English, so in these pairs the keyword metric counts shared words or "
            "characters, not shared nouns and adjectives; the other metrics split such text into characters "
            f"where it has no spaces (README, Limits){scales}")


# Scripts whose scores sit on another scale than English's (measured in docs/method.md): said where they are.
SCALE_NOTES: Mapping[str, str] = {
    "THAI": "; Thai text scores unrelated explanations higher than English does (ρ 0.42 against 0.26, "
            "docs/method.md), so gate it at thresholds measured on Thai, not at the paper's"}


# The controls as the token and cost rows name them beside the kinds.
CONTROL_NAMES: Mapping[str, str] = {SWAP_KIND: "cross-user controls", CONTROL_KIND: "noise floor"}


def cost_text(cost: Mapping[str, Any]) -> str:
    """``41,210 prompt · 2,310 completion — originals 8,100/420 (20) · noise_injection 8,300/480 (20 pairs)
    … · 41 tokens per history line + 230 for the rest of the prompt``."""
    def part(label: str, entry: Sequence[int], unit: str) -> str:
        return f"{label} {entry[0]:,}/{entry[1]:,} ({entry[2]} {unit})"

    kinds = cost["by_kind"].items()
    parts = [part("originals", cost["originals"], "replies"),
             *(part(CONTROL_NAMES.get(kind, kind), entry, "pairs") for kind, entry in kinds)]
    text = f"{cost['prompt']:,} prompt · {cost['completion']:,} completion — " + " · ".join(parts)
    if "per_line" in cost:
        text += (f" · {cost['per_line']:g} tokens per history line + {cost['fixed']:,} for the rest of the "
                 "prompt")
    return text


def money_text(cost: Mapping[str, Any]) -> str:
    """``0.042 for the replies the verdicts read — originals 0.01 · noise_injection 0.008 … · per verdict
    0.012 on average, 0.042 at most (6 verdicts) · 0.0061 spent this run (cache hits are free) · price
    0.15/0.6 per million tokens``."""
    parts = [f"originals {money(cost['originals'])}",
             *(f"{CONTROL_NAMES.get(kind, kind)} {money(value)}" for kind, value in cost["by_kind"].items())]
    text = f"{money(cost['total'])} for the replies the verdicts read — " + " · ".join(parts)
    if "per_verdict" in cost:
        mean, most, n = cost["per_verdict"]
        verdicts = count_noun(n, "verdict")
        text += f" · per verdict {money(mean)} on average, {money(most)} at most ({verdicts})"
    return text + _spent_and_price(cost)


def _spent_and_price(cost: Mapping[str, Any]) -> str:
    """`` · 0.0061 spent this run (cache hits are free) · price 0.15/0.6 per million tokens``: the end of a
    model's and a judge's cost alike."""
    price = cost["price"]
    return (f" · {money(cost['spent'])} spent this run (cache hits are free) · price "
            f"{price[0]:g}/{price[1]:g} per million tokens")


JUDGE_COST_LABEL = "judge cost (at the price set)"  # the label of judge_cost_lines in every writer


def judge_cost_lines(run: RunResult) -> list[str]:
    """What each priced judge's replies cost, one text per judge model — ``judge-m: 0.0021 for 24 replies ·
    0.0011 spent this run (cache hits are free) · price 0.15/0.6 per million tokens`` — empty without a
    judge, a price for it, or tokens its server counted."""
    lines = []
    for model, cost in judge_money(run.judge_tokens, run.settings.get("price")).items():
        replies = f"{cost['replies']:,} {noun(cost['replies'], 'reply', 'replies')}"
        lines.append(f"{model}: {money(cost['total'])} for {replies}" + _spent_and_price(cost))
    return lines


def time_text(time: Mapping[str, Any]) -> str:
    """``23.4 min in 140 calls (median 37.0 s a call) · per verdict 9.6 min on average, 23.4 min at most
    (6 verdicts)``."""
    text = f"{duration(time['seconds'])} in {time['calls']:,} calls (median {time['median']:.1f} s a call)"
    if "per_verdict" in time:
        mean, most, count = time["per_verdict"]
        text += (f" · per verdict {duration(mean)} on average, {duration(most)} at most "
                 f"({count_noun(count, 'verdict')})")
    return text + "; cached replies count the time of the call that made them"


def duration(seconds: float) -> str:
    """``4.2 s``, ``3.5 min``, ``1.8 h``."""
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


UNFIT_LABEL = "Prompts longer than the context"


def unfit_text(summary: Summary) -> str:
    """How many pairs had a prompt the model's context did not hold, whose, and what that does to a gate."""
    users = summary.unfit_users
    shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
    return (f"{summary.unfit_pairs} of {summary.n_all_pairs} pairs ({count_noun(len(users), 'user')}: "
            f"{shown}; {summary.unfit_detail}) — refused or truncated by "
            "the server, so the model did not see the whole history: gates with such pairs are not measured "
            "(INCONCLUSIVE); lower max-history or raise the context")


def cut_text(summary: Summary) -> str:
    """How many pairs compare a reply the server cut at num_predict, and what that does to the gates."""
    if not summary.cut_pairs:
        return "0"
    limit = f"num_predict = {summary.num_predict}" if summary.num_predict is not None else "num_predict"
    share = summary.cut_pairs / summary.n_all_pairs  # the cut pairs are among the model's pairs: never 0
    tolerated = f"{100 * MAX_CUT_SHARE:.0f} %"
    consequence = (f"over {tolerated}: gates with that many are not measured (INCONCLUSIVE)"
                   if too_many_cut(summary.cut_pairs, summary.n_all_pairs)
                   else f"within the {tolerated} a gate tolerates")
    return (f"{summary.cut_pairs} of {summary.n_all_pairs} pairs ({100 * share:.0f} %; {summary.cut_replies} "
            f"replies) cut at {limit} — {consequence}; raise num-predict")


class Block(NamedTuple):
    """One report section as every writer shows it: its title, what it holds (after the title), a table's
    columns, its rows and the tables of cases behind them (the writers with room for them)."""

    title: str
    about: str
    columns: tuple[str, str]
    rows: list[tuple[str, str]]
    tables: list[Table]

    def heading(self, between: str = " (", after: str = ")") -> str:
        """The title, then what it holds when said (a new check's own section says nothing)."""
        return f"{self.title}{between}{self.about}{after}" if self.about else self.title


def blocks(summary: Summary, *, brief: bool = False) -> list[Block]:
    """The sections of one model's report, in order, each worded by its checks (``Check.section_rows``);
    a section without rows is left out, and ``brief`` (the short report) keeps only the sections whose
    checks found or gated something (``Check.shown_briefly``) and the table of further checks."""
    out = []
    for section, checks, foreign in sections(DEFAULT_CHECKS, summary.findings):
        if section.name == FURTHER:
            rows, shown = [row for f in summary.checks for row in f.rows()], True
        else:
            rows = [row for check in checks for row in check.section_rows(summary)]
            rows += [row for f in foreign for row in f.rows()]
            shown = not brief or bool(foreign) or any(check.shown_briefly(summary) for check in checks)
        if rows and shown:
            about = "; ".join(filter(None, [section.about, *(c.section_about(summary) for c in checks)]))
            tables = [t for t in (c.section_table(summary) for c in checks) if t is not None]
            out.append(Block(section.title, about, section.columns, rows, tables))
    return out


