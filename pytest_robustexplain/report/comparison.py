"""Model comparisons as the reports show them: which pairs of models are compared, the table's footnote, the
conclusion sentence and the regression decision of ``robustexplain compare``.

The conclusion is written from the table's own numbers (each row's Δ, Holm p and significance flag, with
the same formatter), so the sentence can never name a sign or a percentage the table does not show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..checks.controls import relative_terms_of
from ..results import FAIL, INSENSITIVE, RELATIVE, RunResult
from .summary import failing_checks, fmt_p, fmt_pct, model_names

if TYPE_CHECKING:
    from ..stats import Comparison, ComparisonRow

# Two runs are compared only when each holds at least this share of the other's pairs: below it the
# matched pairs are a subset chosen by what happened to run, not the runs themselves.
MIN_SHARED = 0.8
# Below this mean of A a relative change is noise over a base the table shows as 0.000 (+10^280 %).
_MIN_BASE = 0.0005


def model_comparisons(run: RunResult) -> list[Comparison]:
    """Every model after the first compared with the first, when both ran on the same cases.

    Models that share fewer than :data:`MIN_SHARED` of their pairs ran different tests (e.g. two example
    folders of one session): a table of their few common pairs would compare unrelated things, so none
    is made.
    """
    from ..stats import compare_models  # lazy: loads numpy

    names = model_names(run)
    out = []
    for other in names[1:]:
        pair_names = (names[0], other)
        try:
            comparison = compare_models(run.model_pairs(names[0]), run.model_pairs(other), names=pair_names,
                                        relative=relative_of(run, names[0], run, other))
        except ValueError:  # no pairs in common: different cases, nothing to compare
            continue
        if shared_fraction(comparison) >= MIN_SHARED:
            out.append(with_failures(comparison, run, names[0], run, other))
    return out


def with_failures(comparison: Comparison, run_a: RunResult, model_a: str, run_b: RunResult, model_b: str
                  ) -> Comparison:
    """The comparison with what each side's gates failed (``Comparison.failed``), for its conclusion."""
    return replace(comparison, failed=dict(zip(comparison.names, (failed_of(run_a, model_a),
                                                                   failed_of(run_b, model_b)), strict=True)))


def failed_of(run: RunResult, model: str) -> tuple[str, ...]:
    """The checks that failed the model's test items (FAIL or INSENSITIVE), each once, in the order found."""
    return failing_checks(g for g in run.model_gates(model) if g.verdict.outcome in (FAIL, INSENSITIVE))


def relative_of(run_a: RunResult, model_a: str, run_b: RunResult, model_b: str
                ) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]] | None:
    """Both models' per-user terms of R, or None when either has no cross-user controls."""
    a, b = relative_terms_of(run_a, model_a), relative_terms_of(run_b, model_b)
    return (a, b) if a and b else None


def shared_fraction(comparison: Comparison) -> float:
    """The smaller of the two sides' shares of matched pairs (1.0: both ran exactly the same pairs)."""
    n = comparison.n_matched
    larger = n + max(len(comparison.unmatched_a), len(comparison.unmatched_b))
    return n / larger if larger else 0.0


def comparison_note(comparison: Comparison) -> str:
    """The footnote under a comparison table: how p-values were obtained and what was matched."""
    unit = "per-user means" if comparison.unit == "user" else "pairs"
    note = (f"p-values: paired t test on {unit}, Holm-corrected across the {len(comparison.rows)} rows; "
            f"{comparison.n_matched} pairs matched by (user, item, kind, severity, repeat)")
    unmatched = len(comparison.unmatched_a) + len(comparison.unmatched_b)
    note += f"; {unmatched} unmatched pairs left out." if unmatched else "."
    if comparison.relative is not None:
        note += (f" † Relative R (how much less a perturbation moved the explanation than another user's "
                 f"history did, on the kinds R gates): paired t test on the {comparison.relative.n_units} "
                 "users' linearised R, outside the Holm family; 95 % intervals.")
    return note


def delta_text(row: ComparisonRow) -> str:
    """Δ of B relative to A as every comparison table and the conclusion print it (R, which may be near 0
    or negative, as a difference: a percentage of it would mean nothing)."""
    if row.delta_pct is None and row.quantity == RELATIVE:
        return f"{row.mean_b.mean - row.mean_a.mean:+.3f}".replace("-", "−")
    return "n/a" if abs(row.mean_a.mean) < _MIN_BASE else fmt_pct(row.delta_pct)


def table_rows(comparison: Comparison) -> list[tuple[ComparisonRow, str]]:
    """The rows every comparison table prints, each with its p as printed: Holm-adjusted for the scores,
    R's own (marked †) beside them."""
    rows = [(r, fmt_p(r.p_holm)) for r in comparison.rows]
    if comparison.relative is not None:
        rows.append((comparison.relative, f"{fmt_p(comparison.relative.p_value)} †"))
    return rows


def direction(row: ComparisonRow) -> int:
    """+1 when B scored higher on this row, −1 when A did, 0 when the means are equal."""
    diff = row.mean_b.mean - row.mean_a.mean
    return (diff > 0) - (diff < 0)


def conclusion(comparison: Comparison) -> str:
    """One sentence naming the more robust model, quoting the table's Δ (B relative to A) and Holm p;
    and R's difference when its own test finds one. Robustness is ranked only between explainers whose
    gate did not fail: a side that failed is said to have, with what failed, and is never named the more
    robust (an explainer that ignores the user is perfectly stable)."""
    failed = {name: checks for name, checks in comparison.failed.items() if checks}
    if failed:
        said = "; ".join(f"{name}'s gate failed ({', '.join(checks)})" for name, checks in failed.items())
        kept = [name for name in comparison.names if name not in failed]
        rest = (f"only {kept[0]}'s passed, so its scores are not ranked against a failed gate's" if kept else
                "neither is ranked")
        return (f"Not ranked: {said}; robustness is compared only between explainers whose gate did not "
                f"fail, and {rest}.")
    r = comparison.relative
    if r is None or not r.significant or not direction(r):
        return _scores_conclusion(comparison)
    higher = comparison.names[1] if direction(r) > 0 else comparison.names[0]
    return (f"{_scores_conclusion(comparison)} Relative robustness R differs: {higher} is higher "
            f"({r.mean_a.mean:.3f} → {r.mean_b.mean:.3f}, Δ {delta_text(r)}, p {fmt_p(r.p_value)}).")


def _scores_conclusion(comparison: Comparison) -> str:
    name_a, name_b = comparison.names
    overall, metrics = comparison.rows[0], comparison.rows[1:]
    if overall.significant and direction(overall):
        winner = name_b if direction(overall) > 0 else name_a
        text = (f"{winner} is more robust: {_delta(overall, comparison.names)} (Holm p "
                f"{fmt_p(overall.p_holm)})")
        same_side = [r for r in metrics if r.significant and direction(r) == direction(overall)]
        if same_side:
            text += f"; largest metric difference: {_delta(_largest(same_side), comparison.names)}"
        return text + "."
    significant = [r for r in metrics if r.significant and direction(r)]
    if significant:
        return (f"No significant difference in overall robustness (Holm p {fmt_p(overall.p_holm)} ≥ "
                f"{comparison.alpha:g}); largest significant metric difference: "
                f"{_delta(_largest(significant), comparison.names)}.")
    return (f"No significant difference between {name_a} and {name_b} (Holm-corrected p ≥ "
            f"{comparison.alpha:g} on every row).")


def _delta(row: ComparisonRow, names: tuple[str, str]) -> str:
    label = "overall ρ" if row.quantity == "combined" else row.label.lower()
    return f"{label} of {names[1]} {delta_text(row)} relative to {names[0]}"


def _largest(rows: Sequence[ComparisonRow]) -> ComparisonRow:
    """The row with the largest Δ as the table prints it (an undefined Δ, A's mean 0, counts as largest)."""
    return max(rows, key=lambda r: math.inf if delta_text(r) == "n/a" else abs(r.delta_pct or 0.0))


def regression(comparison: Comparison, *, significant: bool, max_drop: float | None) -> str | None:
    """Why B regressed against A (``compare --fail-on-regression`` / ``--max-regression``), or None.

    ``significant``: overall ρ of B is lower with Holm p < alpha. ``max_drop``: the mean overall ρ on the
    matched pairs fell by more than this (in ρ, like the baseline's margin), significant or not.
    """
    overall = comparison.rows[0]
    drop = overall.mean_a.mean - overall.mean_b.mean
    name_a, name_b = comparison.names
    if significant and overall.significant and direction(overall) < 0:
        return (f"{name_b} regressed against {name_a}: {_delta(overall, comparison.names)}, significant "
                f"(Holm p {fmt_p(overall.p_holm)} < {comparison.alpha:g})")
    if max_drop is not None and drop > max_drop:
        return (f"{name_b} regressed against {name_a}: overall ρ fell by {drop:.3f} "
                f"({overall.mean_a.mean:.3f} → {overall.mean_b.mean:.3f}), more than --max-regression "
                f"{max_drop:g}")
    return None
