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

The package face only hands names on (``pytest_robustexplain.cli:main`` is the console script). From the
bottom up: ``common`` (names, exit codes, protocols, errors and output), one module per subcommand
(``run``, ``report``, ``compare``, ``dataset``), ``parser`` (the argument parser, which names each
subcommand's handler) and ``entry`` (:func:`main`). Heavy modules (numpy, the metrics, the model clients)
are imported inside the subcommands, so ``robustexplain --help`` answers at once.
"""

from __future__ import annotations

from ..engine import DEFAULT_CACHE_DIR as DEFAULT_CACHE_DIR
from ..engine.interrupt import PARTIAL_REPORT as PARTIAL_REPORT
from .common import DEFAULT_DATASET_DIR as DEFAULT_DATASET_DIR
from .common import EXIT_BACKEND as EXIT_BACKEND
from .common import EXIT_GATE_FAILED as EXIT_GATE_FAILED
from .common import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from .common import EXIT_OK as EXIT_OK
from .common import EXIT_TERMINATED as EXIT_TERMINATED
from .common import EXIT_USAGE as EXIT_USAGE
from .common import NODEID as NODEID
from .common import PROG as PROG
from .common import PROTOCOLS
from .common import RUN_BACKENDS as RUN_BACKENDS
from .common import RUN_OPTION_GROUPS as RUN_OPTION_GROUPS
from .common import RUN_OPTIONS as RUN_OPTIONS
from .common import CommandError as CommandError
from .common import Protocol as Protocol
from .compare import check_comparable, comparison_names
from .compare import cmd_compare as cmd_compare
from .dataset import cmd_dataset_generate as cmd_dataset_generate
from .dataset import cmd_dataset_import as cmd_dataset_import
from .dataset import import_columns, parse_columns
from .entry import main
from .parser import build_parser
from .parser import cmd_fake_server as cmd_fake_server
from .report import cmd_report as cmd_report
from .run import ProgressBar, resolve_run_settings, resume_hint, run_models, verdict_line
from .run import cmd_run as cmd_run

__all__ = [
    "PROTOCOLS",
    "ProgressBar",
    "build_parser",
    "check_comparable",
    "comparison_names",
    "import_columns",
    "main",
    "parse_columns",
    "resolve_run_settings",
    "resume_hint",
    "run_models",
    "verdict_line",
]
