"""The whole page: :func:`render_html` puts the verdict banner, the parts of :mod:`.page`, the charts and
the table of all pairs in one self-contained document with its stylesheet and Content-Security-Policy;
:func:`write_html` writes it atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...results import PASS, RunResult
from ...sanitize import clean
from ..comparison import model_comparisons
from ..json_report import atomic_write_text
from ..summary import (
    OUTCOME_RANK,
    ReportModel,
    Summary,
    failed_reason,
    fmt_interval,
    headline,
    model_names,
    model_outcome,
    not_decided,
)
from .charts import Plotter
from .common import e
from .page import comparison_section, meta_table, model_section, status, status_list, tests_section
from .pairs import CSP, pairs_section

PLOTS_NOTE = "charts need the plots extra: pip install 'pytest-robustexplain[plots]'"

_CSS = """
:root{color-scheme:light dark}
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1200px;
color:#1f2328;background:#fff;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.3rem;border-bottom:1px solid #d0d7de;padding-bottom:.3rem;
margin-top:2.5rem}
h3{font-size:1.05rem;margin-top:1.6rem}
table{border-collapse:collapse;margin:.6rem 0}th,td{border:1px solid #d0d7de;padding:.3rem .55rem;
text-align:left;vertical-align:top;font-variant-numeric:tabular-nums}th{background:#f6f8fa}.PASS{color:#1a7f37;font-weight:600}.FAIL{color:#cf222e;font-weight:600}
.INCONCLUSIVE{color:#9a6700;font-weight:600}.INSENSITIVE{color:#cf222e;font-weight:600}.note{color:#57606a;font-style:italic}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,26rem),1fr));gap:.8rem;
margin:1rem 0}
.charts img{width:100%;max-width:36rem;height:auto;box-sizing:border-box;border:1px solid #eaeef2;
background:#fff}figure.trend{margin:0}figure.trend figcaption{font-size:.85rem;color:#57606a}
.explanation{white-space:pre-wrap;max-width:32rem;font-size:.92rem}del{background:#ffebe9;text-decoration:none}
ins{background:#dafbe1;text-decoration:none}details pre{white-space:pre-wrap;font-size:.8rem;max-width:28rem}
.meta td:first-child{font-weight:600}.meta td+td{overflow-wrap:anywhere}
.shade{padding:.1rem .3rem;color:#1f2328}
.banner{border:2px solid #1a7f37;border-radius:6px;padding:.7rem 1rem;margin:1rem 0;background:#dafbe1}
.banner-FAIL,.banner-INSENSITIVE{border-color:#cf222e;background:#ffebe9}
.banner-INCONCLUSIVE{border-color:#9a6700;background:#fff8c5}
.table-wrap{overflow-x:auto;max-width:100%}body{overflow-wrap:break-word}img{max-width:100%;height:auto}
.pairs-controls,.pairs-pages{display:flex;flex-wrap:wrap;gap:.4rem .9rem;align-items:center;margin:.6rem 0}
select,input,button{font:inherit}select{max-width:100%}.pairs-controls label{max-width:100%}
.pairs-controls input{width:16rem;max-width:100%;box-sizing:border-box}
table.pairs td.num{text-align:right;white-space:nowrap}
table.pairs th button{font:inherit;font-weight:600;color:inherit;background:none;border:0;padding:0;
cursor:pointer;text-align:left}
table.pairs th[aria-sort=ascending] button::after{content:" ▲"}
table.pairs th[aria-sort=descending] button::after{content:" ▼"}
table.pairs th{white-space:nowrap}
.pair-texts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,20rem),1fr));gap:.2rem 1.2rem;
width:0;min-width:min(100%,calc(100vw - 4rem));position:sticky;left:.6rem}
.pair-texts .pair-perturbation{grid-column:1/-1}
.pair-texts .explanation{max-width:none;overflow-wrap:anywhere}.pair-label{font-weight:600}
tr.pair-failed td{background:#fff8c5}
@media (max-width:600px){body{margin:1rem auto;padding:0 .5rem}.explanation{max-width:none}
th,td{padding:.25rem .35rem}}
@media (prefers-color-scheme:dark){body{background:#0d1117;color:#e6edf3}th{background:#161b22}
th,td,h2{border-color:#30363d}.note{color:#8b949e}.PASS{color:#3fb950}.FAIL,.INSENSITIVE{color:#f85149}
.INCONCLUSIVE{color:#d29922}.banner{background:#12261e;border-color:#3fb950}
.banner-FAIL,.banner-INSENSITIVE{background:#2d1214;border-color:#f85149}
.banner-INCONCLUSIVE{background:#2b2111;border-color:#d29922}del{background:#4c1d1d}ins{background:#12372a}
.charts img{border-color:#30363d}tr.pair-failed td{background:#2b2111}}
"""


def render_html(run: RunResult | ReportModel) -> str:
    """The HTML report of ``run`` as one self-contained page."""
    report = ReportModel.of(run)
    run = report.run
    names = model_names(run)
    summaries = [report.summary(name) for name in names]
    plotter = Plotter.load()
    body = ["<h1>robustexplain report</h1>", _banner(run, summaries), meta_table(run),
            status_list(run, summaries), tests_section(run)]
    if plotter is None:
        body.append(f'<p class="note">{PLOTS_NOTE}</p>')
    if not names:
        body.append("<p>No pairs were scored.</p>")
    body += [f'<p class="note">{e(line)}</p>' for line in not_decided(run)]
    body += [model_section(run, s, plotter) for s in summaries]
    comparisons = model_comparisons(run)
    if comparisons:  # only models that ran the same cases
        body.append(comparison_section(comparisons, summaries, plotter))
    body.append(pairs_section(run))
    page = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{e(CSP)}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>robustexplain report — {e(', '.join(names))}</title>\n<style>{_CSS}</style>\n"
            "</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n")
    # A run read from a JSON file may hold lone surrogates (a "\\ud800" escape); the page must encode.
    return clean(page)


def _banner(run: RunResult, summaries: list[Summary]) -> str:
    """The verdict first: one line per model with its outcome, ρ and the reason of its first failed item."""
    if not summaries:
        return ""
    lines = []
    outcomes = [model_outcome(run, s.model) or PASS for s in summaries]
    worst = min(outcomes, key=lambda o: OUTCOME_RANK.get(o, len(OUTCOME_RANK)))
    for s, outcome in zip(summaries, outcomes, strict=True):
        not_passed = [g for g in run.gates if g.model == s.model and g.verdict.outcome != PASS]
        failed = not_passed[0] if not_passed else None
        # The verdict's first sentence that decided it, as the other writers say it (a warning under
        # guard=warn decides nothing); never empty (a verdict without a message gives its failed checks).
        why = (headline(failed.verdict) or failed_reason(failed)) if failed else ""
        reason = f" — {e(failed.slice)}: {e(why)}" if failed else ""
        if len(not_passed) > 1:  # the first item's reason, and that it is not the only one
            others = ", ".join(dict.fromkeys(g.slice for g in not_passed[1:]))
            more = len(not_passed) - 1
            reason += f" — and {more} more item{'s' * (more != 1)} did not pass ({e(others)}; below)"
        lines.append(f"<div>{status(outcome)} · <b>{e(s.model)}</b> · ρ {e(fmt_interval(s.overall))}"
                     f"{reason}</div>")
    return f'<div class="banner banner-{e(worst)}" role="status">' + "".join(lines) + "</div>"


def write_html(run: RunResult | ReportModel, path: str | os.PathLike[str]) -> Path:
    """Write the HTML report of ``run`` to ``path`` atomically."""
    return atomic_write_text(path, render_html(run))
