"""The argument parser of ``robustexplain`` and its subcommands: ``run`` takes the plugin's options from the
one option table (with help that fits the command), and each subcommand names its handler.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Mapping
from typing import Any

from .. import __version__
from ..engine import DEFAULT_CACHE_DIR
from ..settings import YAML_NAME, OptionSpec, option
from ..testing.serve import add_arguments, serve
from .common import DEFAULT_DATASET_DIR, PROG, PROTOCOLS, RUN_BACKENDS, RUN_OPTION_GROUPS
from .compare import cmd_compare
from .dataset import cmd_dataset_generate, cmd_dataset_import
from .history import cmd_history
from .merge import add_merge
from .report import cmd_report
from .run import cmd_run

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
}


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
    add_merge(commands)
    _add_compare(commands)
    _add_history(commands)
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
                               "data error · 3 backend error · 130 interrupted, 143 stopped by SIGTERM "
                               "(rerun the same command to resume).", 79))
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
    report.add_argument("--details-url", metavar="URL", default=None,
                        help="pr-comment: where the full report is (the workflow run), linked when the "
                             "comment is cut to fit GitHub's size limit")
    report.add_argument("--tables", choices=("paper",), default=None,
                        help="'paper': the six tables of the RobustExplain paper filled with this run's "
                             "numbers instead of the report (text; with --format markdown or html, pipe "
                             "tables or an HTML page)")
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
                    "signature, seed, dataset and max history, and each holds at least 80 % of the "
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


def _add_history(commands: Any) -> None:
    history = commands.add_parser(
        "history", help="the run history: each test item's recent runs, last values and any change",
        description=textwrap.fill("Print the run history (one line per gated run, appended at its end), "
                                  "grouped by test, model and dataset: one line an item with its outcomes "
                                  "over the last runs, its last ρ, R, S and copy rate, and the most likely "
                                  "change in each with its permutation p-value (8 runs or more). Runs of "
                                  "different signatures are never mixed.", 79))
    history.add_argument("--file", metavar="PATH", default=None,
                         help="history file; default <cache-dir>/history.jsonl")
    history.add_argument("--cache-dir", metavar="DIR", default=None,
                         help=f"cache directory holding history.jsonl; default ./{DEFAULT_CACHE_DIR}")
    history.add_argument("--last", type=int, default=10, metavar="N", help="runs read per item; default 10")
    history.add_argument("--test", metavar="TEXT", default=None,
                         help="only test items whose id contains TEXT")
    history.add_argument("--format", choices=("text", "json"), default="text",
                         help="output format; default text; json: every item's outcomes, values and changes")
    history.add_argument("-o", "--output", metavar="PATH", default=None,
                         help="write to this file instead of standard output")
    history.set_defaults(handler=cmd_history)


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


def _add_fake_server(commands: Any) -> None:
    server = commands.add_parser(
        "fake-server", help="serve the fake Ollama (tests, your own pipeline) on loopback until Ctrl-C",
        description=textwrap.fill("Serve the loopback fake Ollama server the plugin's tests use, for your "
                                  "own pipeline: deterministic replies, no model. The first line printed "
                                  "is its address. Ctrl-C stops it.", 79))
    add_arguments(server)
    server.set_defaults(handler=cmd_fake_server)


def cmd_fake_server(args: argparse.Namespace) -> int:
    return serve(args)
