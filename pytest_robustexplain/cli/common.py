"""What the ``robustexplain`` subcommands share: the command's name and exit codes, the plugin options ``run``
mirrors, the published protocols, :class:`CommandError`, and how an error or an output is written (messages
from the shared settings code name the command's flags, not the plugin's).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..backends import BACKENDS
from ..errors import RobustExplainError
from ..report.json_report import atomic_write_text
from ..settings import CHECK_OPTIONS, DEFAULT_PERTURBATIONS, Spelling

PROG = "robustexplain"
NODEID = "robustexplain run"  # the GateResult.nodeid of the command's verdicts
DEFAULT_DATASET_DIR = "robustexplain-dataset"

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_BACKEND, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, what a shell reports for a process SIGTERM stopped

# The plugin options ``run`` mirrors, by group. Pytest-only ones (require-model, baselines) are left out.
_RUN_OPTION_GROUPS: Mapping[str, tuple[str, ...]] = {
    "model and backend": ("model", "backend", "host", "api-key-env", "temperature", "num-predict",
                          "num-ctx", "concurrency", "connect-timeout", "timeout", "retries", "prompt",
                          "embed-model"),
    "data and sweep": ("dataset", "histories", "catalog", "cases", "columns", "catalog-columns",
                       "perturbations", "severities", "users",
                       "max-history", "repeats", "design", "perturbation-counts", "seed", "noise-floor",
                       "max-calls", "max-minutes", "price", "max-cost", "batch", "shard"),
    "response cache": ("cache", "cache-dir"),
    "gate": ("min-combined", "min-metric", "per-kind", "weights", "decision", "alpha", "inconclusive",
             "max-users", "check-limits"),
    "guard (cross-user control)": ("guard", "min-sensitivity", "max-insensitive-share",
                                   "max-identical-share", "min-relative", "max-copy-rate",
                                   "min-history-reference", "max-unsupported-rate"),
    "security (opt-in kinds prompt_injection, shilling)": ("max-injection-rate", "max-hijack-rate"),
    "faithfulness (opt-in judge; preference polarity)": ("judge-model", "judge-backend", "judge-host",
                                                         "judge-criteria", "judge-labels", "judge",
                                                         "min-faithful-rate", "min-judge-agreement",
                                                         "max-misattributed-rate",
                                                         "min-flip-sensitivity"),
    "reports": ("json", "html", "markdown", "history", "progress"),
    "settings file": ("config",),
}
_LISTED = {name for names in _RUN_OPTION_GROUPS.values() for name in names}
# A check's own setting (``Check.options``) that no group above places is the command's too, in a group of
# its own: a new check's setting needs no line here.
_UNLISTED = tuple(spec.name for spec in CHECK_OPTIONS if "run" in spec.doors and spec.name not in _LISTED)
RUN_OPTION_GROUPS: Mapping[str, tuple[str, ...]] = {**_RUN_OPTION_GROUPS,
                                                    **({"other checks": _UNLISTED} if _UNLISTED else {})}
RUN_OPTIONS: frozenset[str] = frozenset(name for names in RUN_OPTION_GROUPS.values() for name in names)
# Every backend but those only a pytest conftest can supply (callable).
RUN_BACKENDS: tuple[str, ...] = tuple(b.name for b in BACKENDS.values() if not b.needs_conftest)


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


def print_error(args: argparse.Namespace, message: str) -> None:
    command = " ".join(p for p in (PROG, getattr(args, "command", None),
                                   getattr(args, "dataset_command", None)) if p)
    print(f"{command}: error: {message}", file=sys.stderr)


# How ``robustexplain run`` names options: its own flags (--users) for the options it has, pytest's for the
# rest; messages from below name pytest's flags and are said through ``CLI_SPELLING.text``.
CLI_SPELLING = Spelling("--", RUN_OPTIONS)


def write_output(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return

    try:
        atomic_write_text(output, text if text.endswith("\n") else text + "\n")
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from None
    print(f"{PROG}: wrote {output}", file=sys.stderr)


def terminal_width() -> int:
    return max(80, min(shutil.get_terminal_size((100, 24)).columns, 140))
