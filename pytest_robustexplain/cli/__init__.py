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
from .common import EXIT_BACKEND as EXIT_BACKEND
from .common import EXIT_GATE_FAILED as EXIT_GATE_FAILED
from .common import EXIT_OK as EXIT_OK
from .common import EXIT_USAGE as EXIT_USAGE
from .common import NODEID as NODEID
from .common import RUN_OPTIONS as RUN_OPTIONS
from .common import CommandError as CommandError
from .common import Protocol as Protocol
from .compare import check_comparable
from .entry import main
from .parser import build_parser
from .run import ProgressBar, resolve_run_settings, resume_hint

__all__ = [
    "ProgressBar",
    "build_parser",
    "check_comparable",
    "main",
    "resolve_run_settings",
    "resume_hint",
]
