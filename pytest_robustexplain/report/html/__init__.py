"""A self-contained HTML report: one file, no external resources, works offline.

Styles are inline; charts are SVG images drawn with matplotlib (the optional ``plots`` extra), imported
lazily and driven through the Agg canvas directly, so the process-wide matplotlib backend is never
switched. Without matplotlib the page still holds every table and says how to get the charts. One inline
script draws the table of all pairs (sort, filter, search, pages) from a JSON block; without JavaScript
the page still shows every other table, worst pairs included.

Every value that comes from the run (model output, user and item ids, model names, settings, gate node
ids) goes through :func:`e` (``html.escape``) in the markup, through :func:`~.pairs._script_json` in the
JSON block, and reaches the DOM from the script only as ``textContent``: explanations are untrusted text.
A Content-Security-Policy lets only the page's own script (by its hash) run and nothing be fetched, so
even a string that escaped all that could neither run nor call out.

The package face only hands names on, so ``from pytest_robustexplain.report.html import X`` works as it
did when this was one module. From the bottom up: ``common`` (:func:`e`, the explanation cut-off, the gate
colour scale), ``charts`` (the matplotlib ``_Plotter``), ``pairs`` (the table of all pairs: JSON block,
script, Content-Security-Policy), ``page`` (the run's facts, each model's section, the comparison) and
``document`` (:func:`render_html` and :func:`write_html`: the whole page and its stylesheet).
"""

from __future__ import annotations

from .charts import Plotter as Plotter
from .common import e
from .common import gate_position as gate_position
from .common import gate_shade as gate_shade
from .document import PLOTS_NOTE, render_html, write_html
from .pairs import PAIRS_JS as PAIRS_JS
from .pairs import pairs_data

# The underscored names are handed on too (``X as X``): the tests reach the plotter, the colour scale and
# the script through this face.
__all__ = [
    "PLOTS_NOTE",
    "e",
    "pairs_data",
    "render_html",
    "write_html",
]
