"""The cross-user control's report section: its record over one model's items (:func:`pool_controls`, from
the run's recorded settings) and its words, once for every writer — its rows (terminal, Markdown, HTML),
its one-line forms (the short report's Guard row, ``compare``, the paper tables) and its JUnit properties,
from ``pooled`` (the report's ``Summary``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...results import (
    DEFAULT_MAX_COPY_RATE,
    DEFAULT_MAX_IDENTICAL_SHARE,
    DEFAULT_MAX_INSENSITIVE_SHARE,
    DEFAULT_MAX_UNSUPPORTED_RATE,
    DEFAULT_MIN_RELATIVE,
    DEFAULT_MIN_SENSITIVITY,
    GuardResult,
    Interval,
    PairResult,
    RunResult,
)
from ...wording import fmt_interval, fmt_mean, trim
from .cases import RELATIVE_UNGATED, GuardSettings
from .evaluate import evaluate
from .relative import by_kind, relative_terms
from .sensitivity import describe

if TYPE_CHECKING:
    from ..base import ModelPart


def guard_settings(part: ModelPart) -> GuardSettings:
    """The guard's settings as the run recorded them (the defaults for a report that has none)."""
    return GuardSettings(
        policy=str(part.run.settings.get("guard", "fail")),
        min_sensitivity=part.number("min_sensitivity", DEFAULT_MIN_SENSITIVITY),
        max_insensitive_share=part.number("max_insensitive_share", DEFAULT_MAX_INSENSITIVE_SHARE),
        max_identical_share=part.number("max_identical_share", DEFAULT_MAX_IDENTICAL_SHARE),
        min_relative=part.number("min_relative", DEFAULT_MIN_RELATIVE),
        max_copy_rate=part.number("max_copy_rate", DEFAULT_MAX_COPY_RATE),
        min_history_reference=part.number("min_history_reference", None),
        max_unsupported_rate=part.number("max_unsupported_rate", DEFAULT_MAX_UNSUPPORTED_RATE),
        alpha=part.number("alpha", 0.05))


def pool_controls(part: ModelPart) -> dict[str, Any]:
    """The guard over all of the model's pairs, and Δ and R by kind (nothing without cross-user controls)."""
    swaps = part.run.model_swaps(part.model)
    if not swaps or not part.pairs:
        return {}
    from ...stats import noise_floor  # lazy: loads numpy

    floor = noise_floor(part.controls)
    settings = guard_settings(part)
    floor_value = floor.mean if floor is not None else 1.0
    per_kind = by_kind(part.pairs, swaps, alpha=settings.alpha, floor=floor_value)
    kinds = [k for k in part.kinds if k in per_kind]
    return {"sensitivity": evaluate(part.pairs, swaps, combined_threshold=part.threshold, settings=settings,
                                    floor=floor_value, relative_pairs=relative_gated(part.run, part.pairs)),
            "delta_by_kind": {k: per_kind[k][0] for k in kinds},
            "relative_by_kind": {k: r for k in kinds if (r := per_kind[k][1]) is not None}}


def relative_gated(run: RunResult, pairs: Sequence[PairResult]) -> list[PairResult]:
    """The pairs on the kinds gated at the run's R threshold, as the overall item decides R."""
    from ...perturbations.attacks import ATTACK_KINDS  # lazy: loads numpy

    overrides = run.settings.get("per_kind")
    overrides = overrides if isinstance(overrides, Mapping) else {}
    return [p for p in pairs if p.key.kind not in (*RELATIVE_UNGATED, *ATTACK_KINDS)
            and "min_relative" not in (overrides.get(p.key.kind) or {})]


def relative_terms_of(run: RunResult, model: str) -> dict[str, tuple[float, float]]:
    """Each user's terms of R for ``model`` over those kinds ({} without cross-user controls): what the
    model comparisons set beside their rows."""
    from ...stats import noise_floor  # lazy: loads numpy

    swaps = run.model_swaps(model)
    if not swaps:
        return {}
    floor = noise_floor(run.model_pairs(model, controls=True))
    return relative_terms(relative_gated(run, run.model_pairs(model)), swaps,
                          floor.mean if floor is not None else 1.0)


def sensitivity_rows(pooled: Any) -> list[tuple[str, str]]:
    """The section's rows (label, value): how much the explanations depend on the user."""
    g = pooled.sensitivity
    if g is None:
        return [("Cross-user control", "not measured (guard off)")]
    rows = [("Another user's history (ρ_swap)", fmt_interval(g.swap)),
            ("Sensitivity ρ_floor − ρ_swap", f"{fmt_interval(g.sensitivity)} · needs ≥ {g.min_sensitivity:g} "
                                              f"· {g.outcome}"),
            ("Discrimination Δ = ρ_pert − ρ_swap", fmt_interval(g.delta))]
    if g.relative is not None:
        floor = "1 (temperature 0)" if g.floor >= 1.0 else f"{fmt_mean(g.floor)} (noise floor)"
        rows.append(("Relative robustness R", f"{_fmt_relative(g.relative)} · ρ_floor {floor}"))
    if pooled.delta_by_kind:
        rows.append(("Δ (R) by perturbation", " · ".join(
            f"{k} {fmt_mean(v.mean)}" + (f" ({pooled.relative_by_kind[k].mean:.2f})"
                                         if k in pooled.relative_by_kind else "")
            for k, v in pooled.delta_by_kind.items())))
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


def guard_checks_text(pooled: Any) -> str:
    """The guard's checks in the one vocabulary, each by its check name with its outcome and the number it
    decided on — the short report's Guard row, wrapped at the width, never cut (-v shows every number)."""
    g = pooled.sensitivity
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


def guard_line(pooled: Any) -> str:
    """One line on the guard of a model (``compare``, paper tables)."""
    g = pooled.sensitivity
    if g is None:
        return f"{pooled.model}: no cross-user controls (guard off or an older report)"
    relative = f" · R {_fmt_relative(g.relative)}" if g.relative is not None else ""
    r, c, gr = g.relative_robustness, g.copying, g.grounding
    if r.interval is not None and r.limit is not None:
        relative += (f" · R gated {r.interval.mean:.2f} (upper {r.interval.high:.2f}, needs ≥ "
                     f"{r.limit:g}: {r.outcome})")
    grounding = (f" · refers to the history {100 * gr.history_reference.mean:.0f} %"
                 if gr.history_reference is not None else "")
    grounding += f" · copies {c.copies} of {c.explained}" if c.explained else ""
    return (f"{pooled.model}: ρ_swap {fmt_interval(g.swap)} · S {fmt_interval(g.sensitivity)} · Δ "
            f"{fmt_interval(g.delta)}{relative} · insensitive users {len(g.insensitive_users)} of {g.n_users}"
            f" · identical {g.identical} of {g.n_cases}{grounding} · {g.outcome}")


def _fmt_relative(interval: Interval) -> str:
    if math.isfinite(interval.low) and math.isfinite(interval.high):
        return f"{interval.mean:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
    return f"{interval.mean:.2f} [interval needs ≥ 2 users]"
