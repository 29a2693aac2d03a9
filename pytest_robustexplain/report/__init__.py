"""Reports of a run: summary numbers, JSON record, terminal text, Markdown, HTML and the paper's tables.

Every renderer reads a :class:`~pytest_robustexplain.results.RunResult` (or the JSON report read back with
:func:`read_json`). Names are exported lazily so that importing this package stays cheap: numpy, scipy
and matplotlib load only when a report is actually computed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .html import render_html, write_html
    from .json_report import SCHEMA_VERSION, read_json, run_to_dict, write_json
    from .markdown import render_markdown
    from .paper_tables import render_paper_tables
    from .summary import Summary, summarize, worst_pairs
    from .terminal import render_terminal

_EXPORTS: dict[str, str] = {
    "Summary": "summary", "summarize": "summary", "worst_pairs": "summary",
    "SCHEMA_VERSION": "json_report", "read_json": "json_report", "write_json": "json_report",
    "run_to_dict": "json_report",
    "render_terminal": "terminal", "render_markdown": "markdown",
    "render_html": "html", "write_html": "html",
    "render_paper_tables": "paper_tables",
}

__all__ = [
    "SCHEMA_VERSION",
    "Summary",
    "read_json",
    "render_html",
    "render_markdown",
    "render_paper_tables",
    "render_terminal",
    "run_to_dict",
    "summarize",
    "worst_pairs",
    "write_html",
    "write_json",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
