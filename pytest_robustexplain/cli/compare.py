"""``robustexplain compare``: paired comparison of two runs, or two models of one run, after refusing runs
whose scores or pairs do not mean the same thing; exit 1 on a regression when asked.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checks.sections import section_named
from ..report.comparison import MIN_SHARED, regression, relative_of, shared_fraction, with_failures
from ..report.json_report import read_json
from ..report.markdown import comparison_markdown, text
from ..report.markdown import text as md_text
from ..report.summary import JUDGE_COST_LABEL, blocks, judge_cost_lines, model_names, money_text, summarize
from ..report.terminal import comparison_lines
from ..results import counts_of
from ..stats import compare_models
from .common import EXIT_GATE_FAILED, EXIT_OK, PROG, CommandError, terminal_width, write_output
from .report import partial_note

if TYPE_CHECKING:
    from ..results import RunResult
    from ..stats import Comparison

# Settings under which one pair key (user, item, kind, severity, repeat) names another input: refused.
_SAME_INPUT_SETTINGS = ("dataset_name", "max_history")
# Settings of how explanations are generated: a reason to compare two runs, so they may differ (warned).
_GENERATION_SETTINGS = ("prompt", "temperature", "num_predict", "num_ctx", "judge_signature")


def cmd_compare(args: argparse.Namespace) -> int:
    """``robustexplain compare``: paired comparison of two runs, or two models of one run."""
    if len(args.reports) > 2:
        raise CommandError(f"compare takes one or two reports, got {len(args.reports)}")
    if args.max_regression is not None and not args.max_regression >= 0:
        raise CommandError(f"--max-regression {args.max_regression}: expected a drop in ρ ≥ 0, e.g. 0.02")
    path_a = args.reports[0]
    path_b = args.reports[1] if len(args.reports) == 2 else path_a
    run_a = read_json(path_a)
    run_b = run_a if path_b == path_a else read_json(path_b)
    for run, path in ((run_a, path_a), (run_b, path_b)):
        partial_note(run, path)
    check_comparable(run_a, path_a, run_b, path_b)
    model_a, model_b = _compared_models(model_names(run_a), path_a, args.model_a, model_names(run_b),
                                        path_b, args.model_b, same_file=path_a == path_b)
    names = comparison_names(model_a, path_a, model_b, path_b)
    try:
        comparison = compare_models(run_a.model_pairs(model_a), run_b.model_pairs(model_b), names=names,
                                    alpha=args.alpha, unit=args.unit,
                                    relative=relative_of(run_a, model_a, run_b, model_b))
    except ValueError as exc:  # no matched pairs, duplicated keys
        raise CommandError(f"cannot compare: {exc}") from None
    _check_shared(comparison, path_a, path_b)
    comparison = with_failures(comparison, run_a, model_a, run_b, model_b)
    warnings = _generation_differences(run_a, run_b)
    for warning in warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    regressed = regression(comparison, significant=args.fail_on_regression, max_drop=args.max_regression)
    text = _comparison_text(comparison, args, (path_a, path_b), warnings)
    text += "\n\n" + _guard_comparison(run_a, model_a, run_b, model_b, markdown=args.format == "markdown")
    if regressed is not None:
        text += f"\n\nRegression: {regressed}."
        print(f"{PROG}: FAIL — {regressed}", file=sys.stderr)
    write_output(text, args.output)
    return EXIT_OK if regressed is None else EXIT_GATE_FAILED


def _comparison_text(comparison: Comparison, args: argparse.Namespace, paths: tuple[str, str],
                     warnings: Sequence[str]) -> str:
    if args.format == "markdown":

        return "\n".join([*(f"**Warning:** {text(w)}  " for w in warnings), *comparison_markdown(comparison)])

    head = [f"A = {comparison.names[0]}: {paths[0]}", f"B = {comparison.names[1]}: {paths[1]}",
            *(f"WARNING: {w}" for w in warnings), ""]
    return "\n".join(head + comparison_lines(comparison, terminal_width()))


def _check_shared(comparison: Comparison, path_a: str, path_b: str) -> None:
    """Refuse runs that mostly ran different pairs: their few common pairs are not the runs."""
    share = shared_fraction(comparison)
    if share < MIN_SHARED:
        n = comparison.n_matched
        raise CommandError(
            f"{path_a} and {path_b} share only {n} of their pairs ({100 * share:.0f} % of the larger run; "
            f"{len(comparison.unmatched_a)} only in A, {len(comparison.unmatched_b)} only in B), below "
            f"{100 * MIN_SHARED:.0f} %: they did not run the same cases. Rerun both with the same "
            "--users, --perturbations, --severities, --repeats and dataset.")


def _generation_differences(run_a: RunResult, run_b: RunResult) -> list[str]:
    """Generation settings that differ: compared on purpose (a prompt change), but named loudly."""
    out = []
    for name in _GENERATION_SETTINGS:
        a, b = run_a.settings.get(name), run_b.settings.get(name)
        if a != b:
            out.append(f"the runs differ in {name} ({_short(a)} vs {_short(b)}): the differences below come "
                       "from it as well as from the model")
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _guard_comparison(run_a: RunResult, model_a: str, run_b: RunResult, model_b: str, *,
                      markdown: bool) -> str:
    """Each report section of both sides, row beside row — the cross-user control first, said "not
    measured" too (a model can gain ρ by ignoring the user, docs/guard.md) — in the words every writer
    shows them (``blocks``); then what each side's replies cost at its price."""
    sides = [("A", summarize(run_a, model_a)), ("B", summarize(run_b, model_b))]
    shown = {label: {b.title: b for b in blocks(summary)} for label, summary in sides}
    guard = section_named("sensitivity")
    titles = list(dict.fromkeys([guard.title, *(t for label, _ in sides for t in shown[label])]))
    lines = []

    def say(label: str, text: str, *, row: str = "") -> None:
        text = md_text(text) if markdown else text
        lines.append(f"- {row}{label} = {text}" if markdown else f"  {row}{label} = {text}")

    for title in titles:
        lines.append(f"{title}:")
        rows = {label: dict(shown[label][title].rows) if title in shown[label] else {} for label, _ in sides}
        # An example is one side's case, not a value to set beside the other's: the reports show them.
        labels = [name for name in dict.fromkeys(k for r in rows.values() for k in r)
                  if "example" not in name.lower()]
        for name in labels or [""]:
            for label, _ in sides:
                say(label, rows[label].get(name, "not measured"), row=f"{name}: " if name else "")
    judged = {"A": " · ".join(judge_cost_lines(run_a)), "B": " · ".join(judge_cost_lines(run_b))}
    costs = [("Cost (at the price each run set):", lambda label, s: money_text(s.money) if s.money else "",
              "no price set, or the server counted no tokens"),
             # Run-wide: each run's judges read every model's explanations.
             (f"{JUDGE_COST_LABEL.capitalize()}, each run's judges:", lambda label, _: judged[label],
              "no judge, no price for it, or its server counted no tokens")]
    for title, line_of, missing in costs:
        costed = [(label, line_of(label, summary)) for label, summary in sides]
        if any(line for _, line in costed):
            lines.append(title)
            for label, line in costed:
                say(label, line or missing)
    return "\n".join(lines)


def check_comparable(run_a: RunResult, path_a: str, run_b: RunResult, path_b: str) -> None:
    """Refuse runs whose scores or pairs do not mean the same thing (CommandError with the reason)."""
    counts_a, counts_b = counts_of(run_a.signature), counts_of(run_b.signature)
    if counts_a != counts_b:  # said before the signature that records it: the cause, not a symptom
        raise CommandError(
            f"{path_a} perturbed its histories with perturbation-counts={counts_a} and {path_b} with "
            f"{counts_b}: noise and dilution insert other numbers of items, so the same pair key names a "
            "different history in each. Rerun one with the other's perturbation-counts.")
    if run_a.signature != run_b.signature:
        parts_a, parts_b = run_a.signature.split("|"), run_b.signature.split("|")
        differ = [f"{a} vs {b}" for a, b in zip(parts_a, parts_b, strict=False) if a != b]
        if len(parts_a) != len(parts_b):
            differ.append(f"{len(parts_a)} vs {len(parts_b)} parts")
        raise CommandError(
            f"{path_a} and {path_b} were scored with different metric signatures ({'; '.join(differ)}): "
            "their scores are not comparable. Rerun both with the same pytest-robustexplain version, "
            f"tagger and weights.\n  A: {run_a.signature}\n  B: {run_b.signature}")
    for name in _SAME_INPUT_SETTINGS:
        a, b = run_a.settings.get(name), run_b.settings.get(name)
        if a is not None and b is not None and a != b:
            raise CommandError(
                f"{path_a} has {name} {a} and {path_b} {name} {b}: the same pair key names a different "
                f"history in each, so their scores are not comparable. Rerun one with the other's {name}.")
    if run_a.seed != run_b.seed:
        raise CommandError(
            f"{path_a} has seed {run_a.seed} and {path_b} seed {run_b.seed}: pairs are matched by (user, "
            "item, kind, severity, repeat), which name the same perturbation only under the same seed. "
            "Rerun one of them with the other's --seed.")


def _compared_models(names_a: Sequence[str], path_a: str, chosen_a: str | None, names_b: Sequence[str],
                     path_b: str, chosen_b: str | None, *, same_file: bool) -> tuple[str, str]:
    if same_file:
        if len(names_a) < 2 and (chosen_a is None or chosen_b is None):
            raise CommandError(f"{path_a} holds {len(names_a)} model(s) ({', '.join(names_a) or 'none'}); "
                               "give two reports, or a report with two models")
        if chosen_a is None and chosen_b is None and len(names_a) > 2:
            raise CommandError(f"{path_a} holds {len(names_a)} models ({', '.join(names_a)}): choose two "
                               "with --model-a and --model-b")
        defaults = [n for n in names_a if n not in (chosen_a, chosen_b)]
        model_a = chosen_a or defaults.pop(0)
        model_b = chosen_b or next(n for n in names_a if n != model_a)
        if model_a == model_b:
            raise CommandError(f"--model-a and --model-b both name {model_a}: choose two different models")
        return _known(model_a, names_a, path_a, "--model-a"), _known(model_b, names_a, path_a, "--model-b")
    return (_one_model(names_a, path_a, chosen_a, "--model-a"),
            _one_model(names_b, path_b, chosen_b, "--model-b"))


def _one_model(names: Sequence[str], path: str, chosen: str | None, flag: str) -> str:
    if chosen is not None:
        return _known(chosen, names, path, flag)
    if len(names) != 1:
        raise CommandError(f"{path} holds {len(names)} models ({', '.join(names) or 'none'}): choose one "
                           f"with {flag}")
    return names[0]


def _known(name: str, names: Sequence[str], path: str, flag: str) -> str:
    if name not in names:
        raise CommandError(f"{flag} {name}: no such model in {path} (models: {', '.join(names) or 'none'})")
    return name


def comparison_names(model_a: str, path_a: str, model_b: str, path_b: str) -> tuple[str, str]:
    """Column names: the models, told apart by their report file when both runs used the same model."""
    if model_a != model_b:
        return model_a, model_b
    stem_a, stem_b = Path(path_a).stem, Path(path_b).stem
    if stem_a != stem_b:
        return f"{model_a} ({stem_a})", f"{model_b} ({stem_b})"
    return f"{model_a} (A)", f"{model_b} (B)"
