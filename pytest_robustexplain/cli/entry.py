"""The entry point: :func:`main` parses the arguments, runs the chosen subcommand and turns every problem into
one line on stderr and an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import BackendError, CacheMissError, RobustExplainError, RobustExplainWarning
from .common import (
    CLI_SPELLING,
    EXIT_BACKEND,
    EXIT_GATE_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    PROG,
    print_error,
)
from .parser import build_parser


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
    # The package's warnings read as one line each, as the command's errors do (Python's form names our source
    # file and line); anyone else's as Python writes them. Only how a warning is written changes: whoever
    # records warnings (``pytest.warns`` around an in-process ``main``) still gets every one.
    written = warnings.formatwarning
    warnings.formatwarning = lambda *said, **named: _one_line(written, *said, **named)
    try:
        return _handled(handler, args)
    finally:
        warnings.formatwarning = written


def _one_line(written: Callable[..., str], message: Warning | str, category: type[Warning], *rest: Any,
              **named: Any) -> str:
    if issubclass(category, RobustExplainWarning):
        return f"{PROG}: warning: {CLI_SPELLING.text(str(message))}\n"
    return written(message, category, *rest, **named)


def _handled(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except (BackendError, CacheMissError) as exc:
        print_error(args, CLI_SPELLING.text(str(exc)))
        return EXIT_BACKEND
    except RobustExplainError as exc:  # ConfigError, DataError, CommandError
        print_error(args, CLI_SPELLING.text(str(exc)))
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
