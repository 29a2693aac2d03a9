"""The ``robustexplain`` command: the robustness sweep outside pytest, saved reports, comparisons, datasets.

    robustexplain run --model qwen2.5:7b,llama3.1:8b --protocol paper --json run.json
    robustexplain report run.json --tables paper
    robustexplain compare before.json after.json
    robustexplain dataset generate --out data/  |  robustexplain dataset import --movielens ml/ --out data/

``run`` resolves its options exactly as the plugin does (command line > ``ROBUSTEXPLAIN_*`` environment >
``robustexplain.yaml`` > default; ``settings.resolve_settings``), so values are validated with the same
messages, and gates every model on all its pairs together (the ``overall`` slice). Exit codes:
0 every gate passed · 1 a gate failed · 2 usage, configuration or data error · 3 the model backend
cannot serve the run · 130 interrupted (Ctrl-C; the finished pairs are in the response cache and an
identical rerun resumes from them).

Heavy modules (numpy, the metrics, the model clients) are imported inside the subcommands, so
``robustexplain --help`` answers at once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from . import __version__
from .engine import DEFAULT_CACHE_DIR
from .errors import BackendError, CacheMissError, ConfigError, RobustExplainError
from .results import INSENSITIVE, PASS, GateResult
from .settings import DEFAULT_PERTURBATIONS, OPTIONS, YAML_NAME, OptionSpec, Settings, option

if TYPE_CHECKING:
    from .data import Dataset
    from .engine import GatedSlice, Run, SlicePlan
    from .results import RunResult
    from .stats import Comparison
    from .sweep import Counters

PROG = "robustexplain"
NODEID = "robustexplain run"  # the GateResult.nodeid of the command's verdicts
DEFAULT_DATASET_DIR = "robustexplain-dataset"
PARTIAL_REPORT = "partial-report.json"

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_BACKEND, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# The plugin options ``run`` mirrors, by group. Pytest-only ones (require-model, baselines) are left out.
RUN_OPTION_GROUPS: Mapping[str, tuple[str, ...]] = {
    "model and backend": ("model", "backend", "host", "api-key-env", "temperature", "num-predict",
                          "num-ctx", "concurrency", "connect-timeout", "timeout", "retries", "prompt",
                          "embed-model"),
    "data and sweep": ("dataset", "histories", "catalog", "cases", "perturbations", "severities", "users",
                       "max-history", "repeats", "seed", "noise-floor"),
    "response cache": ("cache", "cache-dir"),
    "gate": ("min-combined", "min-metric", "per-kind", "weights", "decision", "alpha", "inconclusive",
             "max-users"),
    "guard (cross-user control)": ("guard", "min-sensitivity", "max-insensitive-share",
                                   "min-history-reference"),
    "security (opt-in kinds prompt_injection, shilling)": ("max-injection-rate", "max-hijack-rate"),
    "reports": ("json", "html", "markdown", "progress"),
    "settings file": ("config",),
}
RUN_OPTIONS: frozenset[str] = frozenset(name for names in RUN_OPTION_GROUPS.values() for name in names)
RUN_BACKENDS: tuple[str, ...] = ("ollama", "openai", "template")

# Where the plugin's help text does not fit the command.
_HELP_OVERRIDES: Mapping[str, str] = {
    "model": "Model(s) to run, comma-separated (e.g. llama3.1:8b,qwen2.5:7b); required unless "
             "--backend template.",
    "backend": "Explanation backend: ollama (default), openai (any OpenAI-compatible server) or template "
               "(the deterministic offline non-LLM explainer, to try the command).",
    "cache-dir": f"Response cache directory; default ./{DEFAULT_CACHE_DIR}. Finished pairs are kept "
                 "there, so an interrupted run resumes from them.",
    "progress": "Progress bar on stderr: in place on a terminal, a line every 10 s otherwise; 'off' "
                "hides it. Default auto.",
    "config": f"Settings file (YAML, the plugin's keys); default ./{YAML_NAME} if it exists.",
    "users": "Number of evaluation cases (users) to use; default all (20 in the synthetic set).",
}


@dataclass(frozen=True)
class Protocol:
    """A published evaluation setup that ``--protocol`` applies over the environment and settings file."""

    name: str
    description: str
    values: Mapping[str, Any]  # Settings field -> value


PROTOCOLS: Mapping[str, Protocol] = {
    "paper": Protocol(
        "paper", "the RobustExplain paper's setup: the synthetic dataset, 20 evaluation users × 5 kinds × "
        "5 severities × 1 repeat = 500 pairs per model",
        {"dataset": "synthetic", "histories": None, "catalog": None, "cases": None, "users": 20,
         "perturbations": DEFAULT_PERTURBATIONS, "severities": (1, 2, 3, 4, 5), "repeats": 1}),
}


class CommandError(RobustExplainError):
    """A usage problem of the command itself (exit 2), with the message to print."""


# ------------------------------------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``robustexplain`` command and its subcommands."""
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill("Robustness of LLM-generated recommendation explanations (RobustExplain) "
                                  "outside pytest: benchmark models, render saved reports, compare runs, "
                                  "prepare datasets.", 79),
        epilog=textwrap.fill("Exit codes: 0 ok · 1 a robustness gate failed · 2 usage, configuration or "
                             "data error · 3 model backend error · 130 interrupted.", 79)
        + "\nRun 'robustexplain COMMAND --help' for the options of a command.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_run(commands)
    _add_report(commands)
    _add_compare(commands)
    _add_dataset(commands)
    _add_fake_server(commands)
    return parser


def _add_run(commands: Any) -> None:
    run = commands.add_parser(
        "run", help="run the robustness sweep on one or more models and gate them",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill("Run the robustness sweep (the plugin's engine) on one or more models, "
                                  "print the robustness report and gate each model on all its pairs "
                                  "together.", 79),
        epilog=textwrap.fill("Options not given fall back to the ROBUSTEXPLAIN_* environment variables, "
                             f"then to ./{YAML_NAME}, then to the defaults (as in the plugin).", 79) + "\n"
               "Examples:\n"
               "  robustexplain run --model qwen2.5:7b --min-combined 0.5      # pre-deploy check\n"
               "  robustexplain run --model qwen2.5:7b,qwen2.5:14b --protocol paper --json paper.json\n"
               + textwrap.fill("Exit codes: 0 every gate passed · 1 a gate failed · 2 usage/configuration/"
                               "data error · 3 backend error · 130 interrupted (rerun the same command to "
                               "resume).", 79))
    run.add_argument("--protocol", choices=sorted(PROTOCOLS), default=None,
                     help="Apply a published evaluation setup over the environment and settings file "
                          "(options given on the command line still win): 'paper' = "
                          f"{PROTOCOLS['paper'].description}.")
    run.add_argument("--dry-run", action="store_true",
                     help="Print the plan (pairs and model calls per model) and exit without calling a "
                          "model.")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="Print one line per model instead of the report.")
    run.add_argument("--junitxml", metavar="PATH", default=None,
                     help="Write a JUnit XML file as pytest's --junitxml does: one testcase per gated item, "
                          "failures with their reason, the robustexplain_* properties.")
    for title, names in RUN_OPTION_GROUPS.items():
        group = run.add_argument_group(title)
        for name in names:
            _add_option(group, option(name))
    run.set_defaults(handler=cmd_run)


def _add_option(group: Any, spec: OptionSpec) -> None:
    help_text = _HELP_OVERRIDES.get(spec.name, spec.help).replace("%", "%%")
    if spec.flag:
        group.add_argument(f"--{spec.name}", dest=spec.dest, action="store_true", default=None,
                           help=help_text)
    else:
        metavar = "{" + ",".join(RUN_BACKENDS) + "}" if spec.name == "backend" else spec.metavar
        group.add_argument(f"--{spec.name}", dest=spec.dest, default=None, metavar=metavar, help=help_text)


def _add_report(commands: Any) -> None:
    report = commands.add_parser(
        "report", help="render a saved JSON report",
        description="Render a JSON report (written by --robustexplain-json or 'robustexplain run --json') "
                    "as the terminal report, Markdown or HTML, or as the six tables of the paper.")
    report.add_argument("report", metavar="REPORT.json", help="the JSON report to render")
    report.add_argument("--format", choices=("terminal", "markdown", "html", "pr-comment"), default=None,
                        help="output format; default terminal; 'pr-comment': the pull-request comment of the "
                             "GitHub Action (with --baseline: baseline | this change | Δ)")
    report.add_argument("--baseline", metavar="BASELINE.json", default=None,
                        help="pr-comment: the run to compare with (e.g. the default branch's); a missing "
                             "file means no baseline yet")
    report.add_argument("--tables", choices=("paper",), default=None,
                        help="'paper': the six tables of the RobustExplain paper filled with this run's "
                             "numbers (text) instead of the report")
    report.add_argument("-q", "--quiet", action="store_true", help="terminal format: one line per model")
    report.add_argument("-o", "--output", metavar="PATH", default=None,
                        help="write to this file instead of standard output")
    report.set_defaults(handler=cmd_report)


def _add_compare(commands: Any) -> None:
    compare = commands.add_parser(
        "compare", help="compare two runs or two models on matched pairs",
        description="Paired comparison of two runs (or two models of one run): pairs are matched by "
                    "(user, item, kind, severity, repeat); paired t test on per-user means with Holm "
                    "correction, effect size d_z. Refused (exit 2) unless both runs share the metric "
                    "signature, seed, dataset and max history, and each holds at least 80 %% of the "
                    "other's pairs; different generation settings (prompt, temperature, num_predict, "
                    "num_ctx) are compared with a warning, since comparing them is a use of compare. "
                    "Exit 1 with --fail-on-regression or --max-regression when B regressed.")
    compare.add_argument("reports", metavar="REPORT.json", nargs="+",
                         help="A.json B.json, or one report holding two models")
    compare.add_argument("--model-a", metavar="NAME", default=None,
                         help="model of the first report (needed when it holds several)")
    compare.add_argument("--model-b", metavar="NAME", default=None,
                         help="model of the second report (needed when it holds several)")
    compare.add_argument("--alpha", type=float, default=0.01,
                         help="significance level after Holm correction; default 0.01 (the paper's)")
    compare.add_argument("--unit", choices=("user", "pair"), default="user",
                         help="'user' (default): test per-user means, which respects that a user's pairs "
                              "are not independent; 'pair': the paper's pair-level test")
    compare.add_argument("--fail-on-regression", action="store_true",
                         help="exit 1 when B's overall ρ is significantly lower than A's (Holm p < --alpha)")
    compare.add_argument("--max-regression", type=float, default=None, metavar="DROP",
                         help="exit 1 when B's mean overall ρ on the matched pairs is more than DROP below "
                              "A's (in ρ, e.g. 0.02), significant or not")
    compare.add_argument("--format", choices=("terminal", "markdown"), default="terminal",
                         help="output format; default terminal")
    compare.add_argument("-o", "--output", metavar="PATH", default=None,
                         help="write to this file instead of standard output")
    compare.set_defaults(handler=cmd_compare)


def _add_dataset(commands: Any) -> None:
    dataset = commands.add_parser("dataset", help="generate the synthetic dataset or import your own",
                                  description="Write a dataset directory in the project's format "
                                              "(histories.json, catalog.json, cases.json).")
    sub = dataset.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)
    gen = sub.add_parser("generate", help="write the synthetic dataset (the paper's setup)",
                         description="Write the synthetic e-commerce dataset, fully determined by the seed.")
    gen.add_argument("--seed", type=int, default=None, help="dataset seed; default 2601 (the bundled set)")
    gen.add_argument("--users", type=int, default=100, help="users; default 100")
    gen.add_argument("--items", type=int, default=200, help="items; default 200")
    gen.add_argument("--n-cases", type=int, default=20, help="evaluation cases; default 20")
    gen.add_argument("--min-length", type=int, default=10, help="shortest history; default 10")
    gen.add_argument("--max-length", type=int, default=50, help="longest history; default 50")
    gen.add_argument("--out", metavar="DIR", default=DEFAULT_DATASET_DIR,
                     help=f"output directory; default ./{DEFAULT_DATASET_DIR}")
    gen.add_argument("--force", action="store_true", help="overwrite dataset files already in DIR")
    gen.set_defaults(handler=cmd_dataset_generate)

    imp = sub.add_parser(
        "import", help="convert histories/catalog files or MovieLens into the project's format",
        description="Read user histories and an item catalog (JSON, JSONL, YAML or CSV) or a MovieLens "
                    "directory (ratings.csv, movies.csv) and write them in the project's format.",
        epilog="Example: robustexplain dataset import --histories ratings.csv --catalog items.csv "
               "--columns user_id=userId,item_id=movieId --out data/")
    source = imp.add_mutually_exclusive_group(required=True)
    source.add_argument("--histories", metavar="FILE", help="user histories file")
    source.add_argument("--movielens", metavar="DIR", help="MovieLens directory (ml-latest format)")
    imp.add_argument("--catalog", metavar="FILE", help="item catalog file (with --histories)")
    imp.add_argument("--cases", metavar="FILE", help="evaluation cases file; default: drawn, one per user")
    imp.add_argument("--columns", metavar="FIELD=COLUMN,...", default=None,
                     help="CSV column names of the fields, e.g. user_id=userId,item_id=movieId (applied to "
                          "each CSV file that has the field)")
    imp.add_argument("--catalog-columns", metavar="FIELD=COLUMN,...", default=None,
                     help="CSV column names for the catalog only (override --columns there)")
    imp.add_argument("--n-cases", type=int, default=None,
                     help="evaluation cases to keep or draw; default all")
    imp.add_argument("--seed", type=int, default=None, help="seed of the drawn cases; default 2601")
    imp.add_argument("--max-users", type=int, default=None, help="MovieLens: seeded sample of users")
    imp.add_argument("--min-ratings", type=int, default=10, help="MovieLens: fewest ratings a user needs; "
                     "default 10")
    imp.add_argument("--max-history", type=int, default=50, help="MovieLens: most recent ratings kept per "
                     "user; default 50")
    imp.add_argument("--out", metavar="DIR", required=True, help="output directory")
    imp.add_argument("--force", action="store_true", help="overwrite dataset files already in DIR")
    imp.set_defaults(handler=cmd_dataset_import)


# ------------------------------------------------------------------------------------------------ main
def _add_fake_server(commands: Any) -> None:
    from .testing.serve import add_arguments

    server = commands.add_parser(
        "fake-server", help="serve the fake Ollama (tests, your own pipeline) on loopback until Ctrl-C",
        description=textwrap.fill("Serve the loopback fake Ollama server the plugin's tests use, for your "
                                  "own pipeline: deterministic replies, no model. The first line printed "
                                  "is its address. Ctrl-C stops it.", 79))
    add_arguments(server)
    server.set_defaults(handler=cmd_fake_server)


def cmd_fake_server(args: argparse.Namespace) -> int:
    from .testing.serve import serve

    return serve(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``); returns the exit code, never raises
    for bad input: problems are one line on stderr."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # --help, --version, or argparse's own usage error (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    args.argv = args_list
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except (BackendError, CacheMissError) as exc:
        _error(args, _cli_names(str(exc)))
        return EXIT_BACKEND
    except RobustExplainError as exc:  # ConfigError, DataError, CommandError
        _error(args, _cli_names(str(exc)))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``robustexplain report r.json | head``): not an error worth a traceback.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_GATE_FAILED


def _error(args: argparse.Namespace, message: str) -> None:
    command = " ".join(p for p in (PROG, getattr(args, "command", None),
                                   getattr(args, "dataset_command", None)) if p)
    print(f"{command}: error: {message}", file=sys.stderr)


_PLUGIN_FLAG = re.compile(r"--robustexplain-([a-z][a-z-]*)")


def _cli_names(text: str) -> str:
    """Messages from the shared settings code name the plugin's flags; say the command's instead."""
    return _PLUGIN_FLAG.sub(lambda m: f"--{m.group(1)}" if m.group(1) in RUN_OPTIONS else m.group(0), text)


def _write_output(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    from .report.json_report import atomic_write_text

    try:
        atomic_write_text(output, text if text.endswith("\n") else text + "\n")
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"{PROG}: wrote {output}", file=sys.stderr)


def _terminal_width() -> int:
    return max(80, min(shutil.get_terminal_size((100, 24)).columns, 140))


# ------------------------------------------------------------------------------------------------ run
def resolve_run_settings(args: argparse.Namespace, *, env: Mapping[str, str] | None = None,
                         cwd: Path | None = None) -> tuple[Settings, dict[str, Any]]:
    """The run's Settings (shared resolution and validation) and what to record beside them
    (``protocol`` and the options that depart from it)."""
    from .settings import resolve_settings

    here = Path(os.path.abspath(cwd or Path.cwd()))
    cli = {spec.dest: getattr(args, spec.dest, None) for spec in OPTIONS if spec.name in RUN_OPTIONS}
    settings = resolve_settings(cli=cli, env=os.environ if env is None else env, ini={}, yaml_path=None,
                                rootdir=here, invocation_dir=here)
    # Sources and messages should name the command's flags (--users), not the plugin's.
    settings = replace(settings, sources={k: _cli_names(v) for k, v in settings.sources.items()})
    if settings.backend not in RUN_BACKENDS:
        raise ConfigError(f"{_where(settings, 'backend')}: the {settings.backend!r} backend needs a pytest "
                          f"conftest; the command supports {', '.join(RUN_BACKENDS)}")
    extra: dict[str, Any] = {}
    if args.protocol:
        settings, extra = _apply_protocol(settings, PROTOCOLS[args.protocol])
    return settings, extra


def _where(settings: Settings, name: str) -> str:
    source = settings.sources.get(name, "default")
    return f"{source}={getattr(settings, name)}" if source.startswith("--") else f"{name} ({source})"


def _apply_protocol(settings: Settings, protocol: Protocol) -> tuple[Settings, dict[str, Any]]:
    """The protocol's values over everything but the options given on the command line."""
    values: dict[str, Any] = {}
    sources = dict(settings.sources)
    departures: dict[str, Any] = {}
    for name, value in protocol.values.items():
        if sources.get(name, "").startswith("--"):  # given on the command line: it wins, and is noted
            if getattr(settings, name) != value:
                departures[name] = _jsonable(getattr(settings, name))
            continue
        values[name] = value
        sources[name] = f"--protocol {protocol.name}"
    extra: dict[str, Any] = {"protocol": protocol.name}
    if departures:
        extra["protocol_departures"] = departures
    return replace(settings, **values, sources=sources), extra


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def run_models(settings: Settings) -> tuple[str, ...]:
    """The models to run: ``--model``, or the template explainer's name for ``--backend template``."""
    from .engine import configured_models, no_model_reason

    models = tuple(m for m in configured_models(settings) if m)
    if not models:
        raise CommandError(no_model_reason(flag_prefix="--"))
    return models


def cmd_run(args: argparse.Namespace) -> int:
    """``robustexplain run``: plan, run, report and gate — the engine's :class:`Run`, as under pytest."""
    from .engine import Run, SweepFailed, SweepInterrupted

    settings, extra = resolve_run_settings(args)
    models = run_models(settings)
    if extra.get("protocol_departures"):
        shown = ", ".join(f"{k}={_show(v)}" for k, v in extra["protocol_departures"].items())
        print(f"{PROG}: note: departing from the {extra['protocol']} protocol on the command line: {shown}",
              file=sys.stderr)
    run = Run(settings, say=lambda note: print(f"{PROG}: {note}", file=sys.stderr),
              extra_settings=extra)
    run.extra_settings["dataset_name"] = run.dataset.name
    slices = _plan(run, models)
    if args.dry_run or settings.dry_run:
        return _dry_run(run, slices)
    run.announce_size(" (--dry-run shows the plan)")
    progress = ProgressBar.for_stream(sys.stderr, mode=settings.progress)
    try:
        result = run.run_all(poll=progress)
    except SweepInterrupted as stop:
        progress.close()
        return _interrupted(args, settings, stop.partial, run.cache_dir)
    except SweepFailed as failed:
        progress.close()
        _error(args, _cli_names(str(failed.error)))
        _save_partial(args, settings, failed.partial, run.cache_dir, "stopped")
        return EXIT_BACKEND
    finally:
        progress.close()
    return _finish(args, run, result)


def _show(value: Any) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _plan(run: Run, models: Sequence[str]) -> list[GatedSlice]:
    """The gated items of a bare ``@pytest.mark.robustness`` test, named as pytest names them."""
    from .engine import gate_slices
    from .settings import apply_marker

    gate = apply_marker(run.settings, {}, nodeid=NODEID)
    out = []
    for model in models:
        for name in gate_slices(gate):  # each kind and the overall, as a bare marked test is expanded
            item = f"{model}-{name}" if len(models) > 1 else name
            out.append(run.plan(gate, nodeid=f"{NODEID}[{item}]", model=model, slice_name=name))
    return out


def _dry_run(run: Run, slices: Sequence[GatedSlice]) -> int:
    # Per model, the largest slice (the overall one: every kind) holds every pair its kind slices share.
    largest: dict[str, SlicePlan] = {}
    for plan in run.price():
        if plan.model not in largest or plan.planned > largest[plan.model].planned:
            largest[plan.model] = plan
    print(dry_run_text(run.settings, run.extra_settings, run.dataset, list(largest.values()),
                       n_cases=len(slices[0].spec.cases)))
    return EXIT_OK


def dry_run_text(settings: Settings, extra: Mapping[str, Any], dataset: Dataset, plans: Sequence[SlicePlan],
                 *, n_cases: int) -> str:
    """The plan of a run, model by model, as printed by ``run --dry-run``."""
    protocol = f" · protocol {extra['protocol']}" if extra.get("protocol") else ""
    per_model = n_cases * len(settings.perturbations) * len(settings.severities) * settings.repeats
    lines = [f"{PROG} run — plan (dry run: no model is called){protocol}",
             f"dataset {dataset.name}: {_plural(n_cases, 'user')} × "
             f"{_plural(len(settings.perturbations), 'kind')} × "
             f"{_plural(len(settings.severities), 'severity', 'severities')} × "
             f"{_plural(settings.repeats, 'repeat')} = {per_model} pairs per model"]
    width = max(len(p.model) for p in plans) + 2
    for plan in plans:
        skipped = f" ({plan.trivial} leave the history unchanged and are skipped)" if plan.trivial else ""
        controls = f" · {plan.controls} noise-floor pairs" if plan.controls else ""
        controls += f" · {plan.swaps} cross-user controls (guard)" if plan.swaps else ""
        lines.append(f"  {plan.model:<{width}}{plan.planned} pairs planned{skipped}{controls} · at most "
                     f"{plan.max_calls} model calls (cache hits are free)")
    return "\n".join(lines)


def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


def _finish(args: argparse.Namespace, run: Run, result: RunResult) -> int:
    from .engine import judge
    from .report.terminal import render_terminal

    errors = run.write_reports(result)
    print(render_terminal(result, width=_terminal_width(), quiet=args.quiet))
    failed: list[GateResult] = []
    for gate in result.gates:
        passed, warn = judge(gate.verdict, run.settings.inconclusive)
        if not passed:
            failed.append(gate)
        elif warn and (gate.verdict.outcome != PASS or _guard_warns(gate)):
            # INCONCLUSIVE under "warn", or the guard under guard=warn; a fragile PASS is in the report.
            print(f"{PROG}: warning: {gate.nodeid}: {gate.verdict.message}", file=sys.stderr)
    print(verdict_line(result, failed))
    if args.junitxml:
        errors += _write_junit(run.settings, result, failed, Path(args.junitxml))
    from .report.github import github_annotations, on_github_actions

    if on_github_actions():  # the same annotations as under pytest, without a file to point at
        for line in github_annotations(result):
            print(line)
    for error in errors:  # after the verdict, which stands: a report that cannot be written is its own error
        print(f"{PROG}: error: {error}", file=sys.stderr)
    if failed:
        return EXIT_GATE_FAILED
    return EXIT_USAGE if errors else EXIT_OK


def _guard_warns(gate: GateResult) -> bool:
    guard = gate.verdict.guard
    return guard is not None and guard.policy == "warn" and guard.outcome == INSENSITIVE


def verdict_line(result: RunResult, failed: Sequence[GateResult]) -> str:
    """The last line of ``run``: how many models passed every gate, and which items of which failed."""
    models = list(dict.fromkeys(g.model for g in result.gates))
    n = len(models)
    if not failed:
        return f"{PROG}: PASS — {n} of {_plural(n, 'model')} passed the gate"
    by_model: dict[str, list[GateResult]] = {}
    for gate in failed:
        by_model.setdefault(gate.model, []).append(gate)
    parts = []
    for model, gates in by_model.items():
        outcomes = {g.verdict.outcome for g in gates}
        total = sum(g.model == model for g in result.gates)
        if len(gates) == total > 1 and len(outcomes) == 1:
            parts.append(f"{model} (all {total} items {outcomes.pop()})")
        else:
            parts.append(f"{model} ({', '.join(f'{g.slice} {g.verdict.outcome}' for g in gates)})")
    names = ", ".join(parts)
    return f"{PROG}: FAIL — {len(by_model)} of {_plural(n, 'model')} failed the gate: {names}"


def _write_junit(settings: Settings, result: RunResult, failed: Sequence[GateResult],
                 path: Path) -> list[str]:
    from .report.json_report import write_report
    from .report.junit import write_junit

    nodeids = {g.nodeid for g in failed}
    error = write_report(lambda: write_junit(result, path, nodeids, confidence=1 - settings.alpha),
                         f"--junitxml={path}")
    return [error] if error else []


def _interrupted(args: argparse.Namespace, settings: Settings, partial: RunResult, cache_dir: Path) -> int:
    """Ctrl-C: write what finished as a partial JSON report and say how to resume."""
    print(file=sys.stderr)
    _save_partial(args, settings, partial, cache_dir, "interrupted")
    return EXIT_INTERRUPTED


def _save_partial(args: argparse.Namespace, settings: Settings, partial: RunResult, cache_dir: Path,
                  how: str) -> None:
    """What finished before the run was interrupted or stopped, as a partial report, and how to resume."""
    from .report.json_report import write_json

    done = len(partial.pairs)  # controls included, as in the planned count
    planned = partial.settings.get("pairs_planned")
    of = f" of {planned}" if planned else ""
    calls = partial.calls
    print(f"{PROG}: {how} — {done}{of} pairs finished ({calls.get('made', 0)} model calls made, "
          f"{calls.get('cached', 0)} from the cache)", file=sys.stderr)
    target = settings.json or cache_dir / PARTIAL_REPORT
    try:
        write_json(partial, target)
        print(f"{PROG}: partial report (\"partial\": true in its settings) written to {target}",
              file=sys.stderr)
    except OSError as exc:
        print(f"{PROG}: could not write the partial report to {target}: {exc.strerror or exc}",
              file=sys.stderr)
    print(f"{PROG}: {resume_hint(settings, cache_dir, args.argv)}", file=sys.stderr)


def resume_hint(settings: Settings, cache_dir: Path, argv: Sequence[str]) -> str:
    """How to pick up an interrupted run, given what the response cache kept."""
    command = shlex.join([PROG, *argv])
    if settings.backend == "template":
        return f"the template explainer is instant and not cached; rerun to start over: {command}"
    if settings.cache in ("off", "read"):
        return (f"the response cache was not written (--cache {settings.cache}): a rerun starts over. "
                f"Use --cache read-write to make runs resumable: {command}")
    if settings.cache == "write":
        return (f"the finished explanations are in {cache_dir}; rerun with --cache read-write to resume "
                "from them instead of regenerating them")
    return (f"the finished explanations are in the response cache ({cache_dir}); rerun the same command "
            f"to resume (cache hits are free): {command}")


class ProgressBar:
    """``robustexplain: [####------] 120/500 pairs · 130/520 calls · 25 cached · 14.2/s · ETA 27s``.

    Called with the sweep's counters while it runs. On a terminal the line is redrawn in place; in a
    log (not a TTY) a plain line is printed every ``interval`` seconds, so long runs show they are alive
    without flooding the log.
    """

    BAR_WIDTH = 20

    def __init__(self, stream: TextIO, *, in_place: bool, enabled: bool = True, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._in_place = in_place
        self._enabled = enabled
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._shown = 0  # width of the line on screen (in-place mode)
        self.lines = 0  # lines printed so far

    @classmethod
    def for_stream(cls, stream: TextIO, *, mode: str) -> ProgressBar:
        """In place on a terminal, periodic lines otherwise; nothing with ``mode == "off"``."""
        tty = bool(getattr(stream, "isatty", lambda: False)())
        return cls(stream, in_place=tty, enabled=mode != "off", interval=0.2 if tty else 10.0)

    def __call__(self, counters: Counters) -> None:
        now = self._clock()
        if not self._enabled or (self._last is not None and now - self._last < self._interval):
            return
        if self._last is None and not self._in_place:
            self._last = now  # in a log, the first line comes after one interval: short runs stay quiet
            return
        self._last = now
        line = self.line(counters, now)
        if self._in_place:
            width = max(40, shutil.get_terminal_size((100, 24)).columns - 1)
            text = line[:width]
            self._stream.write("\r" + text.ljust(self._shown))
            self._shown = len(text)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()
        self.lines += 1

    def line(self, counters: Counters, now: float | None = None) -> str:
        """The progress line for these counters."""
        return counters.progress_line(self._clock() if now is None else now, bar_width=self.BAR_WIDTH)

    def close(self) -> None:
        """Clear the in-place line (the report follows on stdout)."""
        if self._in_place and self._shown:
            self._stream.write("\r" + " " * self._shown + "\r")
            self._stream.flush()
            self._shown = 0


# ------------------------------------------------------------------------------------------------ report
def cmd_report(args: argparse.Namespace) -> int:
    """``robustexplain report``: render a saved JSON report."""
    from .report.json_report import read_json

    if args.tables and args.format not in (None, "terminal"):
        raise CommandError(f"--tables {args.tables} prints text tables; it cannot be combined with "
                           f"--format {args.format}")
    run = read_json(args.report)
    _partial_note(run, args.report)
    if args.tables == "paper":
        from .report.paper_tables import render_paper_tables

        text = render_paper_tables(run)
    elif args.format == "markdown":
        from .report.markdown import render_markdown

        text = render_markdown(run)
    elif args.format == "html":
        from .report.html import render_html

        text = render_html(run)
    elif args.format == "pr-comment":
        from .report.pr_comment import render_pr_comment

        baseline = read_json(args.baseline) if args.baseline and Path(args.baseline).is_file() else None
        text = render_pr_comment(run, baseline)
    else:
        from .report.terminal import render_terminal

        text = render_terminal(run, width=_terminal_width(), quiet=args.quiet)
    _write_output(text, args.output)
    return EXIT_OK


def _partial_note(run: RunResult, path: str) -> None:
    if run.settings.get("partial"):
        print(f"{PROG}: note: {path} is a partial run (interrupted); its numbers cover the finished pairs "
              "only", file=sys.stderr)


# ------------------------------------------------------------------------------------------------ compare
# Settings under which one pair key (user, item, kind, severity, repeat) names another input: refused.
_SAME_INPUT_SETTINGS = ("dataset_name", "max_history")
# Settings of how explanations are generated: a reason to compare two runs, so they may differ (warned).
_GENERATION_SETTINGS = ("prompt", "temperature", "num_predict", "num_ctx")


def cmd_compare(args: argparse.Namespace) -> int:
    """``robustexplain compare``: paired comparison of two runs, or two models of one run."""
    from .report.comparison import regression
    from .report.json_report import read_json
    from .report.summary import model_names
    from .stats import compare_models

    if len(args.reports) > 2:
        raise CommandError(f"compare takes one or two reports, got {len(args.reports)}")
    if args.max_regression is not None and not args.max_regression >= 0:
        raise CommandError(f"--max-regression {args.max_regression}: expected a drop in ρ ≥ 0, e.g. 0.02")
    path_a = args.reports[0]
    path_b = args.reports[1] if len(args.reports) == 2 else path_a
    run_a = read_json(path_a)
    run_b = run_a if path_b == path_a else read_json(path_b)
    for run, path in ((run_a, path_a), (run_b, path_b)):
        _partial_note(run, path)
    check_comparable(run_a, path_a, run_b, path_b)
    model_a, model_b = _compared_models(model_names(run_a), path_a, args.model_a, model_names(run_b),
                                        path_b, args.model_b, same_file=path_a == path_b)
    names = comparison_names(model_a, path_a, model_b, path_b)
    try:
        comparison = compare_models(run_a.model_pairs(model_a), run_b.model_pairs(model_b), names=names,
                                    alpha=args.alpha, unit=args.unit)
    except ValueError as exc:  # no matched pairs, duplicated keys
        raise CommandError(f"cannot compare: {exc}") from None
    _check_shared(comparison, path_a, path_b)
    warnings = _generation_differences(run_a, run_b)
    for warning in warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    regressed = regression(comparison, significant=args.fail_on_regression, max_drop=args.max_regression)
    text = _comparison_text(comparison, args, (path_a, path_b), warnings)
    text += "\n\n" + _guard_comparison(run_a, model_a, run_b, model_b, markdown=args.format == "markdown")
    if regressed is not None:
        text += f"\n\nRegression: {regressed}."
        print(f"{PROG}: FAIL — {regressed}", file=sys.stderr)
    _write_output(text, args.output)
    return EXIT_OK if regressed is None else EXIT_GATE_FAILED


def _comparison_text(comparison: Comparison, args: argparse.Namespace, paths: tuple[str, str],
                     warnings: Sequence[str]) -> str:
    if args.format == "markdown":
        from .report.markdown import comparison_markdown, text

        return "\n".join([*(f"**Warning:** {text(w)}  " for w in warnings), *comparison_markdown(comparison)])
    from .report.terminal import comparison_lines

    head = [f"A = {comparison.names[0]}: {paths[0]}", f"B = {comparison.names[1]}: {paths[1]}",
            *(f"WARNING: {w}" for w in warnings), ""]
    return "\n".join(head + comparison_lines(comparison, _terminal_width()))


def _check_shared(comparison: Comparison, path_a: str, path_b: str) -> None:
    """Refuse runs that mostly ran different pairs: their few common pairs are not the runs."""
    from .report.comparison import MIN_SHARED, shared_fraction

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
    """The cross-user control of both sides: a model can gain ρ by ignoring the user (docs/guard.md)."""
    from .report.markdown import text as md_text
    from .report.summary import guard_line, summarize

    lines = ["Guard (how much the explanations depend on the user):"]
    for label, run, model in (("A", run_a, model_a), ("B", run_b, model_b)):
        line = guard_line(summarize(run, model))
        lines.append(f"- {label} = {md_text(line)}" if markdown else f"  {label} = {line}")
    return "\n".join(lines)


def check_comparable(run_a: RunResult, path_a: str, run_b: RunResult, path_b: str) -> None:
    """Refuse runs whose scores or pairs do not mean the same thing (CommandError with the reason)."""
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


# ------------------------------------------------------------------------------------------------ dataset
def cmd_dataset_generate(args: argparse.Namespace) -> int:
    """``robustexplain dataset generate``: the synthetic dataset, written in the project's format."""
    from .data import DEFAULT_SEED, generate_synthetic

    seed = DEFAULT_SEED if args.seed is None else args.seed
    if seed < 0:
        raise CommandError(f"--seed {seed}: must be a non-negative integer")
    out = _output_dir(args.out, args.force)
    dataset = generate_synthetic(seed, n_items=args.items, n_users=args.users, n_cases=args.n_cases,
                                 min_len=args.min_length, max_len=args.max_length)
    return _save(dataset, out)


def cmd_dataset_import(args: argparse.Namespace) -> int:
    """``robustexplain dataset import``: histories/catalog files or MovieLens → the project's format."""
    from .data import DEFAULT_SEED, load_dataset, load_movielens

    seed = DEFAULT_SEED if args.seed is None else args.seed
    out = _output_dir(args.out, args.force)
    if args.movielens is not None:
        for flag in ("catalog", "cases", "columns", "catalog_columns"):
            if getattr(args, flag) is not None:
                raise CommandError(f"--{flag.replace('_', '-')} applies to --histories, not --movielens "
                                   "(MovieLens files have a fixed layout)")
        root = Path(args.movielens)
        if not root.is_dir():
            problem = "not a directory" if root.exists() else "directory not found"
            raise CommandError(f"--movielens {root}: {problem}")
        dataset = load_movielens(root, max_users=args.max_users, min_ratings=args.min_ratings,
                                 max_history=args.max_history, n_cases=args.n_cases, seed=seed)
        return _save(dataset, out)
    if args.catalog is None:
        raise CommandError("--histories needs --catalog FILE (the items the histories refer to)")
    for flag in ("histories", "catalog", "cases"):
        path = getattr(args, flag)
        if path is not None and not Path(path).is_file():
            problem = "not a file" if Path(path).exists() else "file not found"
            raise CommandError(f"--{flag} {path}: {problem}")
    hist_columns, cat_columns = import_columns(args.columns, args.catalog_columns, Path(args.histories),
                                               Path(args.catalog))
    from .data import load_catalog, load_histories

    histories = load_histories(args.histories, columns=hist_columns)
    catalog = load_catalog(args.catalog, columns=cat_columns)
    dataset = load_dataset(histories, catalog, args.cases, n_cases=args.n_cases, seed=seed,
                           name=Path(args.out).name)
    return _save(dataset, out)


def parse_columns(text: str | None, flag: str) -> dict[str, str]:
    """``user_id=userId,item_id=movieId`` → ``{"user_id": "userId", "item_id": "movieId"}``."""
    if text is None:
        return {}
    mapping: dict[str, str] = {}
    for part in text.split(","):
        field, sep, column = part.partition("=")
        if not sep or not field.strip() or not column.strip():
            raise CommandError(f"{flag} {text!r}: expected FIELD=COLUMN pairs separated by commas "
                               f"(e.g. user_id=userId,item_id=movieId); bad entry {part!r}")
        mapping[field.strip()] = column.strip()
    return mapping


def import_columns(columns: str | None, catalog_columns: str | None, histories: Path, catalog: Path
                   ) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """The column mappings for the histories file and the catalog file.

    ``--columns`` renames, in each CSV file, the columns that file has (``item_id=movieId`` may rename
    a column of both, or of one only); a column found in neither file is an error naming the headers.
    ``--catalog-columns`` applies to the catalog only and overrides ``--columns`` there.
    """
    from .data import HISTORY_CSV_COLUMNS, ITEM_FIELDS

    shared = parse_columns(columns, "--columns")
    only_catalog = parse_columns(catalog_columns, "--catalog-columns")
    valid = tuple(dict.fromkeys((*HISTORY_CSV_COLUMNS, *ITEM_FIELDS)))
    for field in shared:
        if field not in valid:
            raise CommandError(f"--columns: unknown field {field!r}; fields: {', '.join(valid)}")
    for field in only_catalog:
        if field not in ITEM_FIELDS:
            raise CommandError(f"--catalog-columns: unknown field {field!r}; catalog fields: "
                               f"{', '.join(ITEM_FIELDS)}")
    if only_catalog and catalog.suffix.lower() != ".csv":
        raise CommandError(f"--catalog-columns renames CSV columns; {catalog} is not a CSV file")
    hist_header, cat_header = _csv_header(histories), _csv_header(catalog)
    if shared and hist_header is None and cat_header is None:
        raise CommandError("--columns renames CSV columns; neither file is a CSV file")
    for field, column in shared.items():
        if column not in (hist_header or ()) and column not in (cat_header or ()):
            headers = "; ".join(f"{path.name}: {', '.join(header)}" for path, header in
                                ((histories, hist_header), (catalog, cat_header)) if header is not None)
            raise CommandError(f"--columns {field}={column}: no CSV column {column!r} ({headers})")
    hist = {f: c for f, c in shared.items() if f in HISTORY_CSV_COLUMNS and c in (hist_header or ())}
    cat = {f: c for f, c in shared.items() if f in ITEM_FIELDS and c in (cat_header or ())}
    cat.update(only_catalog)
    return hist or None, cat or None


def _csv_header(path: Path) -> list[str] | None:
    """The header cells of a CSV file (None for other formats; the loader reports unreadable files)."""
    import csv

    if path.suffix.lower() != ".csv":
        return None
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return [cell.strip() for cell in next(csv.reader(handle), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


def _output_dir(out: str, force: bool) -> Path:
    from .data import CASES_FILE, CATALOG_FILE, HISTORIES_FILE

    path = Path(out)
    if path.exists() and not path.is_dir():
        raise CommandError(f"--out {out}: is a file, not a directory")
    existing = [name for name in (HISTORIES_FILE, CATALOG_FILE, CASES_FILE) if (path / name).exists()]
    if existing and not force:
        raise CommandError(f"--out {out}: already holds {', '.join(existing)}; pass --force to overwrite")
    return path


def _save(dataset: Dataset, out: Path) -> int:
    from .data import CASES_FILE, CATALOG_FILE, HISTORIES_FILE, save_dataset

    try:
        save_dataset(dataset, out)
    except OSError as exc:
        raise CommandError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    n_interactions = sum(len(h) for h in dataset.histories.values())
    print(f"{PROG}: wrote {dataset.name} to {out}: {len(dataset.histories)} users ({n_interactions} "
          f"interactions), {len(dataset.catalog)} items, {len(dataset.cases)} cases "
          f"({HISTORIES_FILE}, {CATALOG_FILE}, {CASES_FILE})")
    print(f"{PROG}: use it with  pytest --robustexplain-dataset={out}  or  robustexplain run --dataset {out}")
    return EXIT_OK


__all__ = [
    "PROTOCOLS",
    "ProgressBar",
    "build_parser",
    "check_comparable",
    "comparison_names",
    "dry_run_text",
    "import_columns",
    "main",
    "parse_columns",
    "resolve_run_settings",
    "resume_hint",
    "run_models",
    "verdict_line",
]
