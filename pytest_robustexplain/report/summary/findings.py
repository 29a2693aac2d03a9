"""The findings every format shows after its tables, from a :class:`~.compute.Summary`: severity degradation,
noise floor, weakest dimension, failures, user spread and kind tests, the guard's rows and one-line forms,
and the opt-in attacks' outcomes, as (label, value) rows or lines.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...checks.controls import describe, share_lower_bound, share_upper_bound
from ...checks.judge.measure import MIN_JUDGE_AGREEMENT, judges_text, people_text
from ...results import (
    CONTROL_KIND,
    MAX_CUT_SHARE,
    ORIGINAL,
    ORIGINAL_FAILED,
    SWAP_KIND,
    Finding,
    GuardResult,
    Interval,
    RunResult,
    judge_money,
    money,
    too_many_cut,
)
from ...wording import count_noun, noun
from ..formatting import fmt_interval, fmt_mean, fmt_p, fmt_pct, trim
from .compute import Summary

if TYPE_CHECKING:
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


def security_rows(summary: Summary) -> list[tuple[str, str]]:
    """The opt-in adversarial kinds' outcomes (label, value), for every format; empty when not run."""
    from ...checks.attacks.measure import describe_attack

    rows = []
    for a in summary.attacks:
        rows.append((a.kind, f"{describe_attack(a)} · {a.outcome}"))
        if a.by_severity:
            rows.append((f"{a.kind} by severity", " · ".join(f"L{s} {w}/{n}" for s, (w, n) in
                                                                  a.by_severity.items())))
        for example in a.examples[:1]:
            shown = trim(str(example.get("explanation", "")), 200)
            rows.append((f"{a.kind} example", f"user {example.get('user_id')}, planted "
                                              f"{example.get('planted')}: “{shown}”"))
    return rows


def faithfulness_rows(summary: Summary) -> list[tuple[str, str]]:
    """The faithfulness rows every format shows (label, value): preference polarity, and the judge's when
    the run had one; empty when neither measured anything."""
    return [*_polarity_rows(summary), *_flip_rows(summary), *_judge_rows(summary)]


def faithfulness_heading(summary: Summary) -> str:
    """What the faithfulness section holds, after its title: the judge named only when one judged."""
    judged = "; the judge, with judge-model" if summary.faithfulness is not None else ""
    return f"liked vs disliked, from the ratings{judged}"


# The checks table: every check without a section of its own — the user's (a conftest's, the Python API's).
CHECKS_TITLE = "More checks (outcome · value [bounds] · limit · reason)"


def finding_text(f: Finding) -> str:
    """One check's row in words, the same in every writer: outcome, the value with its interval, the
    threshold and the reason."""
    outcome = f.outcome or "reported, not gated"
    if f.outcome and not f.enforced:
        outcome += " (a warning only)"
    side = "needs ≥" if f.bound == "min" else "at most"
    limit = "" if f.threshold is None else f" · {side} {f.threshold:g}"
    return f"{outcome} · {fmt_interval(f.value, 2)}{limit} · {f.reason}"


def check_rows(summary: Summary) -> list[tuple[str, str]]:
    """The rows of the user's own checks (label, value), each followed by its first example."""
    rows = []
    for f in summary.checks:
        rows.append((f.check, finding_text(f)))
        rows += [(f"{f.check} example", trim(example, 200)) for example in f.examples[:1]]
    return rows


def checks_line(summary: Summary) -> str:
    """One line on the user's checks of a model (``compare``); empty without any."""
    parts = [f"{f.check} {f.outcome or 'reported'} {fmt_interval(f.value, 2)}" for f in summary.checks]
    return f"{summary.model}: " + " · ".join(parts) if parts else ""


def _flip_rows(summary: Summary) -> list[tuple[str, str]]:
    f = summary.flip
    if f is None:
        return []
    beside = f" · the robustness kinds' ρ {fmt_interval(f.robust_rho)}" if f.robust_rho is not None else ""
    return [("Preference flip: moved (ρ_floor − ρ_flip)", f"{fmt_interval(f.sensitivity)} · needs ≥ "
             f"{f.min_sensitivity:g} · ρ_flip {fmt_interval(f.rho)}{beside}"),
            ("Preference flip: still cited as liked", f"{f.still_liked} of {f.majority_pairs} explanations "
             f"with most of the category flipped (at most {f.max_still_liked:.0%}) · {f.outcome}")]


def faithfulness_line(summary: Summary) -> str:
    """One line on the faithfulness checks of a model (``compare``); empty when none measured anything."""
    parts = []
    f, p, flip = summary.faithfulness, summary.polarity, summary.flip
    if f is not None:
        parts.append(f"judged faithful {f.faithful} of {f.judged} ({f.judge}; reorder agreement "
                     f"{f.agreed} of {f.compared})")
    if p is not None:
        parts.append(f"cites a dislike as liked {p.misattributed} of {p.eligible}")
    if flip is not None:
        parts.append(f"preference flip moved it {fmt_interval(flip.sensitivity)}, still liked "
                     f"{flip.still_liked} of {flip.majority_pairs} · {flip.outcome}")
    return f"{summary.model}: " + " · ".join(parts) if parts else ""


def _polarity_rows(summary: Summary) -> list[tuple[str, str]]:
    p = summary.polarity
    if p is None:
        return []
    # Without max-misattributed-rate the rate is reported only: said on its row, so that a passing report's
    # example ("Misattributed: user U052 cites …") never reads as a finding that failed something.
    gate = _gated_note(summary, "polarity", "at most", "max-misattributed-rate")
    rows = [("Cites a dislike as a reason to like", f"{p.misattributed} of {p.eligible} explanations "
             f"({_percent(p.misattributed, p.eligible)}; exact bounds [{p.low:.2f}, {p.high:.2f}]) of users "
             f"with a disliked item or category{gate}")]
    for case in p.examples[:1]:
        rows.append((f"Misattributed: user {case.user_id}", f"cites {', '.join(case.cited)} (disliked): "
                     f"“{trim(case.sentence, 160)}”"))
    return rows


def _gated_note(summary: Summary, rate: str, side: str, option: str) -> str:
    """Whether a pooled rate's row gated anything: each item at its limit on its own slice, or nothing."""
    limit = summary.item_limits.get(rate)
    return (f" · each item gated on its own slice ({side} {limit:g})" if limit is not None
            else f" · reported, not gated ({option} gates it)")


def _judge_rows(summary: Summary) -> list[tuple[str, str]]:
    f = summary.faithfulness
    if f is None:
        return []
    gate = _gated_note(summary, "faithful", "needs ≥", "min-faithful-rate")
    rows = [("Judge", f.judge),
            ("Faithful (judge)", f"{f.faithful} of {f.judged} original explanations "
                                 f"({_percent(f.faithful, f.judged)}; exact bounds "
                                 f"[{f.low:.2f}, {f.high:.2f}]){gate}"),
            ("Judge failures", f"{f.failures} replies were not the verdict's shape" if f.failures else "0")]
    if f.compared:
        trust = "" if f.agreement_high >= MIN_JUDGE_AGREEMENT else " — the judge is not trustworthy"
        rows.append(("Judge reorder agreement", f"{f.agreed} of {f.compared} "
                     f"({_percent(f.agreed, f.compared)}) kept their verdict with the history in reverse "
                     f"order{trust}"))
    if f.judges:
        rows.append(("Judges agree (several judges)", judges_text(f.judges)))
    if f.people:
        rows.append(("Judge against people (judge-labels)", people_text(f.people)))
    for kind, (k, n) in f.by_kind.items():
        drop = f.drop_by_kind.get(kind)
        shown = f" · drop from the originals {fmt_interval(drop)}" if drop is not None else ""
        bounds = f"[{share_lower_bound(k, n, f.alpha):.2f}, {share_upper_bound(k, n, f.alpha):.2f}]"
        rows.append((f"Faithful under {kind}", f"{k} of {n} ({_percent(k, n)}; exact bounds {bounds})"
                     f"{shown}"))
    unfaithful = next((t for t in f.texts if t.faithful is False and t.kind == ORIGINAL), None)
    if unfaithful is not None:
        rows.append((f"Judged unfaithful: user {unfaithful.user_id}", trim(unfaithful.rationale, 200)))
    return rows


def _percent(k: int, n: int) -> str:
    return f"{100 * k / n:.0f} %" if n else "—"


def sensitivity_rows(summary: Summary) -> list[tuple[str, str]]:
    """The guard's rows every format shows (label, value): how much the explanations depend on the user."""
    g = summary.sensitivity
    if g is None:
        return [("Cross-user control", "not measured (guard off)")]
    rows = [("Another user's history (ρ_swap)", fmt_interval(g.swap)),
            ("Sensitivity ρ_floor − ρ_swap", f"{fmt_interval(g.sensitivity)} · needs ≥ {g.min_sensitivity:g} "
                                              f"· {g.outcome}"),
            ("Discrimination Δ = ρ_pert − ρ_swap", fmt_interval(g.delta))]
    if g.relative is not None:
        floor = "1 (temperature 0)" if g.floor >= 1.0 else f"{fmt_mean(g.floor)} (noise floor)"
        rows.append(("Relative robustness R", f"{_fmt_relative(g.relative)} · ρ_floor {floor}"))
    if summary.delta_by_kind:
        rows.append(("Δ (R) by perturbation", " · ".join(
            f"{k} {fmt_mean(v.mean)}" + (f" ({summary.relative_by_kind[k].mean:.2f})"
                                         if k in summary.relative_by_kind else "")
            for k, v in summary.delta_by_kind.items())))
    rows.append(("Insensitive users", f"{len(g.insensitive_users)} of {g.n_users} (limit "
                                       f"{100 * g.max_insensitive_share:g} %)"
                 + (f": {', '.join(g.insensitive_users[:8])}" + (" …" if len(g.insensitive_users) > 8 else "")
                    if g.insensitive_users else "")))
    r, c, gr = g.relative_robustness, g.copying, g.grounding
    if r.interval is not None and r.limit is not None:
        rows.append(("Relative robustness R, gated", f"{r.interval.mean:.2f} (one-sided upper bound "
                     f"{r.interval.high:.2f}) · needs ≥ {r.limit:g} · {r.outcome}"))
    rows.append(("Same text for another user", f"{g.identical} of {g.n_cases} cases (lower bound "
                                                f"{g.identical_low:.2f}, limit {g.max_identical_share:g})"))
    if c.explained:
        rows.append(("Copies the prompt back", f"{c.copies} of {c.explained} explanations (bounds "
                     f"[{c.low:.2f}, {c.high:.2f}], limit {c.limit:g}) · {c.outcome}"))
    if gr.history_reference is not None:
        rows.append(("Mentions the user's history", f"{fmt_interval(gr.history_reference)} of explanations"
                     + (f" · needs ≥ {gr.min_history_reference:g} · {gr.outcome}" if gr.outcome else "")))
    if gr.unsupported is not None:
        rows.append(("Unsupported mentions", f"{fmt_interval(gr.unsupported)} of explanations name a "
                                             "catalog category or title in neither history nor item"))
    rows.append(("Guard", describe(g)))
    if g.example is not None:
        ex = g.example
        rows.append((f"Example: item {ex.item_id}", f"for user {ex.user_id}: “{trim(ex.user_text, 160)}” — "
                     f"for user {ex.donor_id}: “{trim(ex.donor_text, 160)}” (ρ {ex.combined:.3f})"))
    return rows


def guard_properties(g: GuardResult) -> list[tuple[str, str]]:
    """The guard's numbers as (name, text) pairs: JUnit properties, one-line summaries."""
    def num(value: float) -> str:
        return f"{value:.4f}" if math.isfinite(value) else "nan"

    props = [("guard", g.outcome), ("rho_swap", num(g.swap.mean)), ("sensitivity", num(g.sensitivity.mean)),
             ("delta", num(g.delta.mean)), ("delta_interval", f"[{num(g.delta.low)}, {num(g.delta.high)}]"),
             ("relative", num(g.relative.mean) if g.relative is not None else "nan"),
             ("insensitive_users", f"{len(g.insensitive_users)}/{g.n_users}"),
             ("identical_for_another_user", f"{g.identical}/{g.n_cases}")]
    if g.grounding.history_reference is not None:
        props.append(("history_reference", num(g.grounding.history_reference.mean)))
    if g.grounding.unsupported is not None:
        props.append(("unsupported_mentions", num(g.grounding.unsupported.mean)))
    return props


def guard_checks_text(summary: Summary) -> str:
    """The guard's checks in the one vocabulary, each by its check name with its outcome and the number it
    decided on — the short report's Guard row, wrapped at the width, never cut (-v shows every number)."""
    g = summary.sensitivity
    if g is None:
        return "not measured (guard off)"
    # The compact form of checks_line: check, outcome, value (thresholds and reasons are -v's and the items').
    parts = [f"sensitivity {g.outcome} {fmt_interval(g.sensitivity, 2)}"]
    r, c, gr = g.relative_robustness, g.copying, g.grounding
    if r.interval is not None and r.outcome:
        parts.append(f"relative {r.outcome} {fmt_interval(r.interval, 2)}")
    if c.explained and c.outcome:
        parts.append(f"copying {c.outcome} {c.copies} of {c.explained}")
    if gr.outcome:  # the rates it gates: a PASS beside "0 %" of an ungated rate reads as an error
        rates = [f"{name} {100 * rate.mean:.0f} %" for name, rate, limit in (
            ("refers", gr.history_reference, gr.min_history_reference),
            ("unsupported", gr.unsupported, gr.max_unsupported_rate))
            if rate is not None and limit is not None]
        parts.append(f"grounding {gr.outcome} {', '.join(rates)}".rstrip())
    if g.identical:
        parts.append(f"identical for another user {g.identical} of {g.n_cases}")
    policy = {"warn": " — guard: warn, reported, not enforced", "off": " — guard: off, recorded only"}
    return " · ".join(parts) + policy.get(g.policy, "")


def guard_line(summary: Summary) -> str:
    """One line on the guard of a model (``compare``, paper tables)."""
    g = summary.sensitivity
    if g is None:
        return f"{summary.model}: no cross-user controls (guard off or an older report)"
    relative = f" · R {_fmt_relative(g.relative)}" if g.relative is not None else ""
    r, c, gr = g.relative_robustness, g.copying, g.grounding
    if r.interval is not None and r.limit is not None:
        relative += (f" · R gated {r.interval.mean:.2f} (upper {r.interval.high:.2f}, needs ≥ "
                     f"{r.limit:g}: {r.outcome})")
    grounding = (f" · refers to the history {100 * gr.history_reference.mean:.0f} %"
                 if gr.history_reference is not None else "")
    grounding += f" · copies {c.copies} of {c.explained}" if c.explained else ""
    return (f"{summary.model}: ρ_swap {fmt_interval(g.swap)} · S {fmt_interval(g.sensitivity)} · Δ "
            f"{fmt_interval(g.delta)}{relative} · insensitive users {len(g.insensitive_users)} of {g.n_users}"
            f" · identical {g.identical} of {g.n_cases}{grounding} · {g.outcome}")


def _fmt_relative(interval: Interval) -> str:
    if math.isfinite(interval.low) and math.isfinite(interval.high):
        return f"{interval.mean:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
    return f"{interval.mean:.2f} [interval needs ≥ 2 users]"
