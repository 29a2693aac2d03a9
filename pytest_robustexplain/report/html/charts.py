"""The charts: :class:`_Plotter` draws them with matplotlib (the optional ``plots`` extra, imported lazily
and driven through the Agg canvas, never the process-wide backend) as compact, deterministic SVG images.
"""

from __future__ import annotations

import base64
import contextlib
import io
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ...results import METRICS
from ...sanitize import visible
from ..history import chart_words, is_chart
from ..summary import Summary, fmt_mean, fmt_pct
from .common import GATE_STOPS, e, gate_position

# Charts are drawn 4.4 in wide (422 CSS px) and shown at the width of their column, which is ~384 px on a
# 400 px phone: no text is set below 9 pt, so none is smaller than 10.9 CSS px there.
_CHART_WIDTH = 4.4
_CHART_PX_PER_INCH = 96  # CSS pixels per inch: the <img> width and height attributes
# Widths in points of outside text in a chart, cut short with "…" beyond them (the tables hold it whole): a
# title, and a tick label or legend entry (two legend columns fit), stay inside the 317 pt figure.
_TITLE_WIDTH = 290.0
_LABEL_WIDTH = 105.0
_CHART_STYLE = {
    "font.size": 9, "figure.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 9, "ytick.labelsize": 9,
    "legend.fontsize": 9,
    # Text as glyph outlines, not <text>: no outside string is ever SVG markup, only shapes.
    "svg.fonttype": "path",
    # Ids (clip paths, glyphs) are hashes salted with this instead of a random uuid: one run, one file.
    "svg.hashsalt": "robustexplain",
}
# What the page does not need from matplotlib's SVG: the XML declaration and DOCTYPE (the DTD's URL), the
# RDF metadata, and the comments, which repeat every text drawn (escaped, but a model's name need not be
# in the file at all); the indentation between elements (text is outlines: no whitespace is content). A
# path's coordinates keep two decimals (0.01 pt is far below a pixel) on one line.
_SVG_DROP = re.compile(r"<\?xml[^>]*\?>\s*|<!DOCTYPE[^>]*>\s*|<metadata>.*?</metadata>\s*|<!--.*?-->\s*",
                       re.DOTALL)
_SVG_GAPS = re.compile(r">\s+<")
_SVG_PATH_DATA = re.compile(r' d="([^"]*)"')
_DECIMALS = re.compile(r"(\.\d\d)\d+")


class Plotter:
    """Draws the charts as SVG images; exists only when matplotlib imports.

    Each chart is an ``<img src="data:image/svg+xml;base64,…">``, not inline ``<svg>``: an image is its
    own document, so nothing in it runs or loads anything, its ids and its ``<style>`` (matplotlib writes
    a global ``*{…}`` rule) cannot collide with the page's or another chart's, and base64 cannot close the
    attribute whatever the SVG holds. It costs a third more bytes than inline SVG — a small share of the
    page next to the pairs' explanations.
    """

    def __init__(self, matplotlib: Any, figure_cls: Any, canvas_cls: Any) -> None:
        from matplotlib.font_manager import FontProperties  # lazy: loads numpy, matplotlib
        from matplotlib.textpath import TextToPath  # lazy: loads numpy, matplotlib

        self._matplotlib = matplotlib
        self._figure_cls = figure_cls
        self._canvas_cls = canvas_cls
        self._font = FontProperties
        self._text_path = TextToPath()

    @classmethod
    def load(cls) -> Plotter | None:
        try:
            import matplotlib  # optional dependency
            from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional dependency
            from matplotlib.figure import Figure  # optional dependency
        except ImportError:
            return None
        return cls(matplotlib, Figure, FigureCanvasAgg)

    def _text(self, text: str, width: float = _LABEL_WIDTH, size: float = 9) -> str:
        """Outside text for a chart: one line of visible characters (matplotlib cannot lay out a lone
        surrogate, and would draw a line break), cut short with "…" to ``width`` points at ``size``, and
        no mathtext ("$...$" would be read as a formula). Measured, not counted: "W" is four times "i"."""
        line = visible(text, commands=True)
        font = self._font(size=size)

        def fits(candidate: str) -> bool:
            measured = self._text_path.get_text_width_height_descent(candidate, font, ismath=False)
            return bool(measured[0] <= width)

        if not fits(line):
            low, high = 0, len(line)  # the longest prefix that fits with its ellipsis
            while low < high:
                middle = (low + high + 1) // 2
                low, high = (middle, high) if fits(line[:middle] + "…") else (low, middle - 1)
            line = line[:low] + "…"
        return line.replace("$", r"\$")

    @contextlib.contextmanager
    def style(self) -> Iterator[None]:
        """The charts' fonts and SVG settings, for drawing and saving (not the process-wide defaults)."""
        with self._matplotlib.rc_context(_CHART_STYLE), warnings.catch_warnings():
            # A character the font lacks (a CJK model name, a control picture) is drawn as a box; it is not
            # worth a warning in the user's test run.
            warnings.filterwarnings("ignore", "Glyph .* missing from font", UserWarning)
            yield

    def _figure(self, height: float) -> Any:
        # Constrained layout keeps titles, tick labels and legends inside the figure and apart.
        fig = self._figure_cls(figsize=(_CHART_WIDTH, height), layout="constrained")
        self._canvas_cls(fig)  # attaches the Agg canvas (text metrics): no global backend involved
        return fig

    def svg(self, fig: Any) -> str:
        """The figure as compact, deterministic SVG text."""
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        svg = _SVG_GAPS.sub("><", _SVG_DROP.sub("", buffer.getvalue()))
        return _SVG_PATH_DATA.sub(_compact_path, svg)

    def _img(self, chart: tuple[Any, str] | None) -> str:
        if chart is None:
            return ""
        fig, alt = chart
        data = base64.b64encode(self.svg(fig).encode("utf-8")).decode("ascii")
        width, height = (round(v * _CHART_PX_PER_INCH) for v in fig.get_size_inches())
        return (f'<img alt="{e(alt)}" width="{width}" height="{height}" '
                f'src="data:image/svg+xml;base64,{data}">')

    def model_charts(self, summary: Summary, thresholds: dict[str, float]) -> str:
        with self.style():
            charts = [self.heatmap(summary, thresholds["combined"]), self.metric_bars(summary, thresholds),
                      self.severity_curve(summary, thresholds["combined"])]
            return '<div class="charts">' + "".join(self._img(c) for c in charts) + "</div>"

    def trends(self, entries: Sequence[Mapping[str, Any]]) -> str:
        """One chart for each item's recent runs (the run history's ``chart``): ρ and each enforced check
        over the runs with its interval, its limit dashed, a detected change dotted; the values in words
        under it, the chart's text alternative."""
        with self.style():
            return "".join(self._trend(entry) for entry in entries if is_chart(entry.get("chart")))

    def _trend(self, entry: Mapping[str, Any]) -> str:
        chart, nan = entry["chart"], float("nan")
        checks = list(chart["checks"].values())
        if not checks:
            return ""
        xs = list(range(int(chart["first"]), int(chart["first"]) + len(chart["runs"])))
        fig = self._figure(1.15 * len(checks) + 1.0)
        for ax, check in zip(fig.subplots(len(checks), 1, sharex=True, squeeze=False)[:, 0], checks,
                             strict=True):
            values = [nan if v is None else float(v) for v in check["values"]]
            below = [0.0 if lo is None or v != v else max(0.0, v - lo)
                     for v, lo in zip(values, check["low"], strict=True)]
            above = [0.0 if hi is None or v != v else max(0.0, hi - v)
                     for v, hi in zip(values, check["high"], strict=True)]
            ax.errorbar(xs, values, yerr=[below, above], marker="o", markersize=3, capsize=2, linewidth=1,
                        color="#4c78a8")
            ax.step(xs, [nan if v is None else v for v in check["limits"]], where="mid", color="#cf222e",
                    linestyle="--", linewidth=1)
            if check["change"]:
                ax.axvline(xs[0] + int(check["change"]["at"]) - 0.5, color="#9a6700", linestyle=":",
                           linewidth=1.5)
            ax.set_ylabel(self._text(check["label"], 60))
        fig.axes[-1].set_xticks(xs, [str(x) for x in xs])
        fig.axes[-1].set_xlabel("run (limit dashed, a change dotted)")
        test = str(entry.get("test", ""))
        fig.suptitle(self._text(f"{test} — runs {xs[0]}–{xs[-1]}", _TITLE_WIDTH, 10))
        alt = (f"trend of {', '.join(str(c['label']) for c in checks)} over runs {xs[0]}–{xs[-1]} of "
               f"{test}")
        words = "<br>".join(e(line) for line in chart_words(chart))
        return f'<figure class="trend">{self._img((fig, alt))}<figcaption>{words}</figcaption></figure>'

    def comparison(self, summaries: list[Summary]) -> str:
        with self.style():
            return '<div class="charts">' + self._img(self.comparison_chart(summaries)) + "</div>"

    def heatmap(self, summary: Summary, gate: float) -> tuple[Any, str] | None:
        severities = summary.severities
        kinds = list(summary.kind_severity)
        if not severities or not kinds:
            return None
        grid = [[row[s].mean if s in row else float("nan") for s in severities]
                for row in summary.kind_severity.values()]
        # The colour of a cell is its place against the gate (see _gate_position), the same in every run.
        shown = [[gate_position(v, gate) if v == v else v for v in values] for values in grid]
        fig = self._figure(0.42 * len(kinds) + 1.5)
        ax = fig.add_subplot()
        # Vector cells (imshow would embed a bitmap, blurred when the page scales the chart).
        from matplotlib.colors import LinearSegmentedColormap  # optional dependency

        scale = LinearSegmentedColormap.from_list(
            "gate", [(at, tuple(c / 255 for c in rgb)) for at, rgb in GATE_STOPS])
        mesh = ax.pcolormesh(shown, cmap=scale, vmin=0.0, vmax=1.0, edgecolors="white", linewidth=0.5)
        ax.invert_yaxis()
        ax.set_xticks([j + 0.5 for j in range(len(severities))], [f"L{s}" for s in severities])
        ax.set_yticks([i + 0.5 for i in range(len(kinds))], [self._text(k) for k in kinds])
        ax.tick_params(length=0)
        for i, values in enumerate(grid):
            for j, value in enumerate(values):
                if value != value:
                    continue
                # White on the dark red far below the gate, black on the light reds, yellow and greens.
                t = shown[i][j]
                ax.text(j + 0.5, i + 0.5, fmt_mean(value), ha="center", va="center",
                        color="white" if t < 0.25 else "black")
        bar = fig.colorbar(mesh, ax=ax, label=f"ρ (gate {gate:g} in the middle)")
        ticks = sorted({0.0, gate, 1.0})
        bar.set_ticks([gate_position(t, gate) for t in ticks], labels=[f"{t:g}" for t in ticks])
        fig.suptitle(self._text(f"ρ by kind × severity — {summary.model}", _TITLE_WIDTH, 10))
        return fig, f"heatmap of ρ by kind and severity for {summary.model}"

    def metric_bars(self, summary: Summary, thresholds: dict[str, float]) -> tuple[Any, str]:
        fig = self._figure(3.3)
        ax = fig.add_subplot()
        names = list(summary.by_metric)  # the four, and the opt-in embedding when the run measured it
        means = [summary.by_metric[m].mean for m in names]
        errors = [[summary.by_metric[m].mean - summary.by_metric[m].low for m in names],
                  [summary.by_metric[m].high - summary.by_metric[m].mean for m in names]]
        ax.bar(names, means, yerr=errors, capsize=4, color="#4c78a8", label="mean, 95 % CI")
        # One gate mark per gated bar, over that bar: metrics may have thresholds of their own.
        gated = [(index, m) for index, m in enumerate(names) if m in thresholds]
        for index, metric in gated:
            ax.hlines(thresholds[metric], index - 0.45, index + 0.45, color="#cf222e", linestyle="--",
                      linewidth=1.2, label="gate" if (index, metric) == gated[0] else None)
        ax.set_ylim(0, 1)
        ax.set_ylabel("score")
        # Under the axes, never over a bar (at the top right it hid the length bar).
        fig.legend(loc="outside lower center", ncols=2, frameon=False)
        fig.suptitle(self._text(f"Metrics — {summary.model}", _TITLE_WIDTH, 10))
        return fig, f"bar chart of the metrics for {summary.model}"

    def severity_curve(self, summary: Summary, threshold: float) -> tuple[Any, str] | None:
        severities = summary.severities
        if len(severities) < 2:
            return None
        fig = self._figure(4.0)
        ax = fig.add_subplot()
        for kind, row in summary.kind_severity.items():
            points = [s for s in severities if s in row]
            ax.plot(points, [row[s].mean for s in points], marker=".", linewidth=1, alpha=0.8,
                    label=self._text(kind))
        overall = [summary.by_severity[s] for s in severities]
        ax.plot(severities, [iv.mean for iv in overall], color="black", linewidth=2.2, label="all kinds")
        ax.fill_between(severities, [iv.low for iv in overall], [iv.high for iv in overall], color="grey",
                        alpha=0.2)
        ax.axhline(threshold, color="#cf222e", linestyle="--", linewidth=1, label="gate")
        ax.set_xticks(severities, [f"L{s}" for s in severities])
        ax.set_ylabel("ρ")
        fig.legend(loc="outside lower center", ncols=2, frameon=False)
        title = f"Severity degradation {fmt_pct(summary.degradation_pct)} — {summary.model}"
        fig.suptitle(self._text(title, _TITLE_WIDTH, 10))
        return fig, f"ρ by severity for {summary.model}"

    def comparison_chart(self, summaries: list[Summary]) -> tuple[Any, str]:
        quantities = ["combined", *METRICS]
        fig = self._figure(3.5)
        ax = fig.add_subplot()
        width = 0.8 / len(summaries)
        for index, summary in enumerate(summaries):
            intervals = [summary.overall if q == "combined" else summary.by_metric[q] for q in quantities]
            xs = [q + (index - (len(summaries) - 1) / 2) * width for q in range(len(quantities))]
            ax.bar(xs, [iv.mean for iv in intervals], width,
                   yerr=[[iv.mean - iv.low for iv in intervals], [iv.high - iv.mean for iv in intervals]],
                   capsize=3, label=self._text(summary.model))
        ax.set_xticks(range(len(quantities)), ["ρ", *METRICS])
        ax.set_ylim(0, 1)
        ax.set_ylabel("score (95 % CI)")
        fig.legend(loc="outside lower center", ncols=2, frameon=False)
        fig.suptitle("Models compared")
        return fig, "bar chart comparing the models"


def _compact_path(match: re.Match[str]) -> str:
    return ' d="' + " ".join(_DECIMALS.sub(r"\1", match.group(1)).split()) + '"'
