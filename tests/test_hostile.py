"""Outside text is hostile: a table of hostile strings through every writer.

Model replies (and the ids in data files) may contain anything. Whatever they contain, the run finishes
with its verdicts, nothing reaches the CI log as a workflow command or a terminal escape, no Markdown
link, image or HTML from it renders in the step summary, and in the HTML report it is text: escaped in the
markup, data in the pairs' JSON block (which no string can close), outlines in the charts, and a page laid
out without sideways scrolling at 400 and 1,400 px however long its unbroken tokens.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli, sanitize
from pytest_robustexplain.explainers.base import Explanation
from pytest_robustexplain.explainers.retry import describe_error
from pytest_robustexplain.report import html as html_report
from pytest_robustexplain.report.json_report import read_json
from pytest_robustexplain.report.summary import summarize
from pytest_robustexplain.results import (
    FAIL,
    OVERALL,
    GateCheck,
    GateResult,
    PairKey,
    PairResult,
    RunResult,
    Verdict,
)
from pytest_robustexplain.stats import cluster_interval
from pytest_robustexplain.testing import FakeOllamaServer, compose_reply

pytest_plugins = ["pytester"]

HOSTILE: dict[str, str] = {
    "surrogate": "broken \ud800 text",
    "workflow command": "fine.\n::error file=x.py,line=1::INJECTED\n::add-mask::secret",
    "crlf command": "fine.\r\n::warning::INJECTED",
    "ansi clear": "\x1b[2J\x1b[31mred\x1b[0m",
    "osc title": "\x1b]0;TITLE\x07 and more",
    "c1 next line": "a\x85::error::INJECTED",
    "bidi override": "user \u202eevil\u202c text",
    "markdown image": "![pixel](https://evil.invalid/track.png)",
    "markdown link": "[Click to re-run CI](https://evil.invalid/login)",
    "bare url": "see https://evil.invalid/login or www.evil.invalid",
    "html": "<script>alert(1)</script><img src=x onerror=alert(2)>",
    "table break": "a | b | c\n| --- |",
    "nul": "a\x00b",
    "script close": "</script><script>alert(3)</script><!--<script>",
    "svg close": "</svg><svg onload=alert(4)>",
    "amp and quotes": "Tom & \"Jerry\" 'x' &amp; &lt;b&gt; `tick`",
    "line separators": "one\u2028two\u2029three",
    "long token": "https://evil.invalid/" + "a" * 400,
    "mathtext": "costs $5 and $x^2$ or \\frac{1}{0}",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_sanitiser_invariants(name: str) -> None:
    raw = HOSTILE[name]
    line = sanitize.visible(raw)
    line.encode("utf-8")  # never raises: surrogates are gone
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\x85" not in line
    assert not any(ch in line for ch in "\u202e\u202c\x00\x07")
    assert "::" not in line and "##[" not in line  # no line a report wraps can start a command
    md = sanitize.markdown_inert(raw)
    assert "<" not in md and "](" not in md and not re.search(r"(?<!\\)!\[", md)
    assert not re.search(r"https?://|www\.", md)  # no autolink
    assert "|" not in md.replace("\\|", "")
    assert sanitize.clean(raw).encode("utf-8")


def test_outside_text_is_clean_where_it_enters_and_in_error_descriptions() -> None:
    explanation = Explanation(text=HOSTILE["surrogate"], model="m", detail="x\udfffy")
    assert "\ufffd" in explanation.text and explanation.detail == "x\ufffdy"

    class ServerError(Exception):
        pass

    described = describe_error(ServerError(HOSTILE["workflow command"]))
    assert "\n" not in described and "⏎∶∶error" in described


def _hostile_reply(prompt: str, options: Mapping[str, Any]) -> str:
    """Fragile replies (so gates fail and worst pairs are printed) carrying every hostile string."""
    return " ".join(HOSTILE.values()) + " " + compose_reply(prompt, options, mode="fragile")


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(reply=_hostile_reply) as fake:
        yield fake


MARKED = """
import pytest

@pytest.mark.robustness(users=3, severities=[2], perturbations=["noise", "drift"], min_combined=0.95)
def test_gate(robustness):
    pass
"""


def _assert_log_is_safe(text: str) -> None:
    for line in text.splitlines():
        # The only workflow commands are the plugin's own annotations.
        assert not line.lstrip().startswith("::") or line.startswith("::error file=test_"), line
        assert "INJECTED" not in line or not line.lstrip().startswith("::"), line
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text and "\x85" not in text


def _assert_markdown_is_inert(md: str) -> None:
    assert "<script" not in md and "<img" not in md
    assert "](" not in md and not re.search(r"(?<!\\)!\[", md)
    assert "https://evil" not in md and "www.evil" not in md


def test_every_writer_survives_and_neutralises_hostile_replies(
        pytester: pytest.Pytester, server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch,
        xdist_args: tuple[str, ...]) -> None:
    xdist = xdist_args
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
                                "--robustexplain-json=r.json", "--robustexplain-html=r.html",
                                "--robustexplain-markdown=r.md", "--junitxml=junit.xml", "-v", *xdist)
    result.assert_outcomes(failed=3)  # the fragile model fails; the hostile text crashes nothing
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert "worst pairs:" in out and "␛[2J" in out  # shown, not obeyed
    assert "fine. ∶∶error file=x.py" in out  # shown, and no wrapped line can start a command
    _assert_log_is_safe(out)
    for name in ("r.md",):
        _assert_markdown_is_inert((pytester.path / name).read_text(encoding="utf-8"))
    _assert_markdown_is_inert(summary.read_text(encoding="utf-8"))
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page and "<img src=x" not in page
    data = _assert_html_keeps_outside_text_as_text(page)
    texts = "\n".join(data["originals"]) + "\n".join(row[8] for row in data["rows"])
    assert HOSTILE["script close"] in texts and HOSTILE["html"] in texts  # shown whole, as data
    doc = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert any("\ufffd" in p["original"] for p in doc["pairs"])  # the surrogate, replaced
    (pytester.path / "junit.xml").read_text(encoding="utf-8")  # written, valid UTF-8

    monkeypatch.chdir(pytester.path)
    code = cli.main(["run", "--model", "fake-model", "--host", server.url, "--users", "3", "--severities",
                     "2", "--perturbations", "noise,drift", "--min-combined", "0.95", "--progress", "off",
                     "--markdown", "cli.md", "--junitxml", "cli.xml"])
    assert code == cli.EXIT_GATE_FAILED
    _assert_markdown_is_inert((pytester.path / "cli.md").read_text(encoding="utf-8"))
    _assert_junit_matches_pytest(pytester.path / "cli.xml", pytester.path / "junit.xml")


def _junit_cases(path: Any) -> dict[str, tuple[dict[str, str], ET.Element | None]]:
    """Testcases by slice: their properties and failure element (the file must parse as XML)."""
    root = ET.parse(path).getroot()
    out = {}
    for case in root.iter("testcase"):
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        out[props["robustexplain_slice"]] = (props, case.find("failure"))
    return out


def _assert_junit_matches_pytest(cli_xml: Any, pytest_xml: Any) -> None:
    """``run --junitxml``: one testcase per gated item, failures with their reason, the plugin's
    properties, and no hostile character in any attribute or text."""
    ours, theirs = _junit_cases(cli_xml), _junit_cases(pytest_xml)
    assert set(ours) == set(theirs) == {"noise_injection", "category_drift", "overall"}
    for name, (props, failure) in ours.items():
        assert set(props) == set(theirs[name][0]), name
        assert props["robustexplain_outcome"] == "FAIL" and failure is not None
        assert "ρ" in failure.get("message", "") or "combined" in failure.get("message", "")
    text = cli_xml.read_text(encoding="utf-8")
    _assert_log_is_safe(text)


def test_the_cli_report_keeps_terminal_escapes_out(server: FakeOllamaServer, tmp_path: Any,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = cli.main(["run", "--model", "fake-model", "--host", server.url, "--users", "2",
                     "--severities", "1", "--perturbations", "noise", "--min-combined", "0.95",
                     "--progress", "off", "--cache", "off"])
    assert code == cli.EXIT_GATE_FAILED
    _assert_log_is_safe(capsys.readouterr().out)


# ---------------------------------------------------------------------- the HTML report
LONG = "x" * 300  # one unbroken token, far wider than a phone


class _Page(HTMLParser):
    """The tags, attributes and script contents of a page as a browser's parser sees them."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self._in_script = False
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [(name, value or "") for name, value in attrs]
        if tag == "script":
            self.scripts.append(({name: value or "" for name, value in attrs}, ""))
            self._in_script = True

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def _assert_html_keeps_outside_text_as_text(page: str) -> dict[str, Any]:
    """Outside text in the page can be nothing but text: the page has exactly its own two scripts (the JSON
    block, which no string closed, and the code, the only one the page's policy lets run), no event handler
    and no external reference, and its charts are SVG without text or links. Returns the JSON block's data."""
    page.encode("utf-8")  # lone surrogates are gone
    parsed = _Page(page)
    assert parsed.tags.count("script") == 2, parsed.tags.count("script")
    (data_attrs, block), (code_attrs, code) = parsed.scripts
    assert data_attrs == {"type": "application/json", "id": "pairs-data"} and code_attrs == {}
    assert code == html_report.PAIRS_JS
    assert not re.search("[<>&\u2028\u2029]", block)  # nothing in it can end it or start markup
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    digest = base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii")
    assert policy and f"script-src 'sha256-{digest}';" in html.unescape(policy.group(1))
    assert not any(name.startswith("on") for name, _ in parsed.attributes)
    references = [v for name, v in parsed.attributes if name in ("src", "href", "srcset", "action", "poster")]
    assert all(r.startswith("data:image/svg+xml;base64,") for r in references), references
    for reference in references:
        svg = base64.b64decode(reference.split(",", 1)[1]).decode("utf-8")
        root = ET.fromstring(svg)
        assert not {e.tag.rsplit("}", 1)[-1] for e in root.iter()} & {"text", "script", "foreignObject", "a"}
        assert "alert" not in svg and "evil" not in svg and "INJECTED" not in svg  # no outside text at all
    data: dict[str, Any] = json.loads(block)
    return data


def _hostile_run() -> RunResult:
    """A failing run whose every outside string is hostile and long: the model, a kind, users, items, both
    explanations, failure details, change records, settings and gate ids."""
    values = list(HOSTILE.values())
    model = "m</script><script>alert(1)</script>&\"'" + HOSTILE["surrogate"] + LONG
    kinds = ["noise_injection", HOSTILE["svg close"] + LONG]
    pairs = []
    for u, user in enumerate(values[:6]):
        for kind in kinds:
            for severity in (1, 2):
                text = values[(u + severity) % len(values)]
                failed = (u, severity) == (1, 2)
                score = 0.0 if failed else 0.2 + 0.02 * u + 0.01 * severity
                pairs.append(PairResult(
                    PairKey(model, user + LONG if u == 0 else user, values[-1 - u], kind, severity, 0),
                    semantic=score, keyword=score, structural=score, length=score, combined=score,
                    original=" ".join(values) + " " + LONG, perturbed="" if failed else f"{text} {LONG}",
                    changes={"inserted": [{"position": 1, "item_id": text, "category": user}], text: LONG},
                    failure="error" if failed else None, failure_detail=text if failed else ""))
    judged = [p.combined for p in pairs]
    interval = cluster_interval(judged, [p.key.user_id for p in pairs])
    gate = GateResult(f"t.py::t[{HOSTILE['html']}{LONG}]", OVERALL, model,
                      Verdict.of(FAIL, (GateCheck("combined", 0.5, interval, FAIL),)), {"combined": 0.5})
    return RunResult(signature=HOSTILE["workflow command"] + LONG, seed=1,
                     models=[{"name": model, "backend": HOSTILE["html"], "host": HOSTILE["long token"]}],
                     settings={"note": HOSTILE["script close"], LONG: values}, pairs=pairs, gates=[gate],
                     started_at=HOSTILE["ansi clear"], finished_at=HOSTILE["bidi override"])


@pytest.fixture(scope="module")
def hostile_page() -> str:
    return html_report.render_html(_hostile_run())


def test_the_html_report_keeps_hostile_text_as_text(hostile_page: str) -> None:
    run = _hostile_run()
    data = _assert_html_keeps_outside_text_as_text(hostile_page)
    # The JSON block reads back as exactly the pairs (lone surrogates replaced): nothing lost, nothing added.
    expected = json.loads(sanitize.clean(json.dumps(html_report.pairs_data(run), ensure_ascii=False)))
    assert data == expected
    strings = json.dumps(data, ensure_ascii=False)
    for name, value in HOSTILE.items():
        assert json.dumps(sanitize.clean(value), ensure_ascii=False)[1:-1] in strings, name
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "", hostile_page, flags=re.DOTALL)
    for value in (HOSTILE["html"], HOSTILE["script close"], HOSTILE["svg close"], HOSTILE["amp and quotes"]):
        assert value not in markup and html.escape(value, quote=True) in markup
    assert markup.lower().count("<svg") == 0 and "<img src=x" not in markup
    assert '<div class="banner banner-FAIL" role="status">' in markup


def test_the_pairs_script_builds_the_table_without_parsing_markup() -> None:
    """Outside text reaches the DOM only as textContent of elements the script creates."""
    code = html_report.PAIRS_JS
    for api in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(",
                "DOMParser", "createContextualFragment", "srcdoc", "setAttribute(\"on", "setTimeout(\"",
                "fetch(", "XMLHttpRequest", "import("):
        assert api not in code, api
    assert "textContent" in code and "createElement" in code
    assert "</script" not in code.lower() and "<!--" not in code


@pytest.mark.parametrize("wide", [False, True], ids=["hostile", "wide glyphs"])
def test_long_names_stay_inside_the_charts(wide: bool) -> None:
    """Long model and kind names are cut short in a chart (the tables hold them whole), measured in the
    chart's font, so no title, tick label or legend entry is clipped at the image's edge, whether its
    letters are narrow or wide; and none makes matplotlib fail (a lone surrogate did) or draw a line break."""
    plotter = html_report.Plotter.load()
    if plotter is None:
        pytest.skip("matplotlib is not installed")
    run = _hostile_run()
    if wide:
        names = {run.pairs[0].key.model: "W" * 40, run.pairs[0].key.kind: "M" * 40}
        run = replace(run, pairs=[replace(p, key=replace(p.key, model=names[p.key.model],
                                                         kind=names.get(p.key.kind, "中" * 30)))
                                  for p in run.pairs], models=[{"name": "W" * 40}], gates=[])
    summary = summarize(run, run.pairs[0].key.model)
    with plotter.style():
        charts = [plotter.heatmap(summary, 0.5), plotter.metric_bars(summary, {"combined": 0.5}),
                  plotter.severity_curve(summary, 0.5), plotter.comparison_chart([summary, summary])]
        for chart in charts:
            assert chart is not None
            fig, alt = chart
            fig.canvas.draw()
            drawn = fig.get_tightbbox(fig.canvas.get_renderer())  # everything drawn, in inches
            width, height = fig.get_size_inches()
            assert drawn.x0 >= 0 and drawn.y0 >= 0 and drawn.x1 <= width and drawn.y1 <= height, (alt, drawn)


_LAYOUT_PROBE = """<!DOCTYPE html><html><body><pre id="result">waiting</pre><script>
// Each report in an iframe of its own width; when it has loaded, every <details> is opened and the page
// measured: a document wider than its frame scrolls sideways.
const frames = %s;
const out = {};
let left = frames.length;
for (const [id, src, width] of frames) {
  const frame = document.createElement("iframe");
  frame.style.width = width + "px";
  frame.style.height = "900px";
  frame.addEventListener("load", () => {
    const w = frame.contentWindow;
    const d = frame.contentDocument;
    for (const details of d.querySelectorAll("details")) details.open = true;
    for (const button of d.querySelectorAll("#pairs-app tbody button[aria-expanded=false]")) button.click();
    const root = d.documentElement;
    const limit = root.clientWidth;
    out[id] = {
      scroll: root.scrollWidth, client: limit, dark: w.matchMedia("(prefers-color-scheme: dark)").matches,
      background: w.getComputedStyle(d.body).backgroundColor,
      shade: w.getComputedStyle(d.querySelector(".shade")).color,
      rows: d.querySelectorAll("#pairs-app tbody tr:not(.pair-detail)").length,
      opened: d.querySelectorAll("#pairs-app tbody tr.pair-detail").length,
      // The tables that scroll inside their own box, by the heading above them ("meta": the run's facts).
      scrolling: Array.from(d.querySelectorAll(".table-wrap"))
        .filter((wrap) => wrap.scrollWidth > wrap.clientWidth + 0.5)
        .map((wrap) => wrap.querySelector("table.meta") ? "meta"
             : (wrap.previousElementSibling || {}).textContent || "?"),
      wide: Array.from(d.body.querySelectorAll("*"))  // what sticks out, outside the boxes that scroll
        .filter((el) => el.getBoundingClientRect().right > limit + 0.5
                && !el.parentElement.closest(".table-wrap"))
        .slice(0, 5).map((el) => el.tagName + "." + el.className),
    };
    if (--left === 0) document.getElementById("result").textContent = JSON.stringify(out);
  });
  frame.src = src;
  document.body.appendChild(frame);
}
</script></body></html>"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_html_report_never_scrolls_sideways_at_400_or_1400_px(scheme: str, hostile_page: str,
                                                                  tmp_path: Path,
                                                                  chromium: Callable[..., Any]) -> None:
    """Measured in headless Chromium, light and dark: the failing hostile run (long unbroken model, kind,
    user and gate names, explanations and settings) and the recorded sample, every <details> and every
    pair's texts open, are no wider than a 400 px and a 1,400 px frame: long tokens wrap or scroll inside
    their own box. (A window cannot be narrower than 500 px here; a frame can.)"""
    (tmp_path / "hostile.html").write_text(hostile_page, encoding="utf-8")
    sample = read_json(Path(__file__).parent / "data_samples" / "report_sample.json")
    (tmp_path / "sample.html").write_text(html_report.render_html(sample), encoding="utf-8")
    frames = [[f"{name}-{width}", f"{name}.html", width]
              for name in ("hostile", "sample") for width in (400, 1400)]
    probe = tmp_path / "probe.html"
    probe.write_text(_LAYOUT_PROBE % json.dumps(frames), encoding="utf-8")
    results = chromium(probe, f"--blink-settings=preferredColorScheme={0 if scheme == 'dark' else 1}")
    assert set(results) == {f for f, _, _ in frames}
    for frame, m in results.items():
        width = int(frame.rsplit("-", 1)[1])
        assert width - 20 <= m["client"] <= width, (frame, m)  # measured at the frame's width
        assert m["scroll"] <= m["client"] and not m["wide"], (frame, m)
        assert m["dark"] == (scheme == "dark") and (m["background"] == "rgb(13, 17, 23)") == m["dark"], m
        assert m["shade"] == "rgb(31, 35, 40)", m  # dark text on the light gate colours, in dark mode too
        # The pairs table drew its first page (the page's policy let its script run), and every pair's
        # texts opened under it.
        assert m["rows"] > 0 and m["opened"] == m["rows"], (frame, m)
    # On a phone the run's facts and the verdict tables fit whole (long values such as the signature wrap);
    # only wide data grids (kind × severity, pairs) scroll inside their boxes.
    assert not {"meta", "By perturbation", "By metric"} & set(results["sample-400"]["scrolling"]), results
    assert results["sample-1400"]["scrolling"] == [], results


# ---------------------------------------------------------------------- reports that cannot be written
def test_a_report_that_cannot_be_written_is_its_own_error_not_a_traceback(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (pytester.path / "afile").write_text("in the way", encoding="utf-8")
    (pytester.path / "adir").mkdir()
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "adir"))
    pytester.makepyfile(MARKED.replace(", min_combined=0.95", ", inconclusive=\"warn\""))  # 3 users
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=afile/r.json",
                                "--robustexplain-html=r.html")
    result.assert_outcomes(passed=3)  # the gate's verdicts stand...
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # ...and the run says a report is missing
    result.stdout.fnmatch_lines([
        "robustexplain: ERROR: --robustexplain-json=*afile/r.json: cannot write the report: *afile*",
        "robustexplain: ERROR: $GITHUB_STEP_SUMMARY=*adir: cannot write the report: Is a directory*",
        "robustexplain: the run exits 4: a report could not be written; every verdict above stands"])
    # Said on lines of their own after the progress dots, never glued to them (issue 27 point 19).
    assert not any(re.search(r"\S\s*robustexplain: ERROR", line) for line in result.outlines)
    assert "Traceback" not in result.stdout.str() and (pytester.path / "r.html").is_file()

    monkeypatch.chdir(pytester.path)
    code = cli.main(["run", "--backend", "template", "--users", "5", "--severities", "1", "--progress", "off",
                     "-q", "--json", "afile/r.json"])
    captured = capsys.readouterr()
    assert code == cli.EXIT_USAGE and "PASS — 1 of 1 model passed the gate" in captured.out
    assert re.search(r"error: --json=\S*afile/r\.json: cannot write the report", captured.err)


# ---------------------------------------------------------------------- malformed files: one clear error
def test_non_utf8_settings_and_too_deep_files_are_clear_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MARKED)
    (pytester.path / "robustexplain.yaml").write_bytes(b"users: 3\nmodel: caf\xe9\n")
    result = pytester.runpytest("--robustexplain-backend=template")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in result.stdout.str()
    result.stderr.fnmatch_lines(["*robustexplain.yaml: not UTF-8 text (bad byte at offset *)*"])
    deep_yaml = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    (pytester.path / "robustexplain.yaml").write_text(deep_yaml, encoding="utf-8")
    deep = pytester.runpytest("--robustexplain-backend=template")
    assert deep.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in deep.stdout.str()
    (pytester.path / "robustexplain.yaml").unlink()
    (pytester.path / "h.json").write_text("[]", encoding="utf-8")
    (pytester.path / "c.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    data = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-histories=h.json",
                              "--robustexplain-catalog=c.json")
    assert "INTERNALERROR" not in data.stdout.str() and "Traceback" not in data.stdout.str()
    assert "nested too deeply" in data.stdout.str() + data.stderr.str()


# ---------------------------------------------------------------------- a cache that cannot be written
def test_an_unwritable_cache_directory_is_one_usage_error_before_any_call(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    (pytester.path / "afile").write_text("in the way", encoding="utf-8")
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("--robustexplain-model=fake-model", f"--robustexplain-host={server.url}",
                                "--robustexplain-cache-dir=afile/cache")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in result.stdout.str()
    result.stderr.fnmatch_lines(["*response cache directory *afile/cache: not writable*cache=off*"])
    assert server.chat_calls == 0


def test_a_full_disk_or_a_directory_in_the_way_only_skips_caching(
        pytester: pytest.Pytester, server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_robustexplain.store import Store

    configure = Store._configure

    def full(self: Store, connection: Any) -> None:  # SQLite's own "disk full": no page may be added
        configure(self, connection)
        if self.writes:
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count = {pages}")

    monkeypatch.setattr(Store, "_configure", full)
    pytester.makepyfile(MARKED.replace(", min_combined=0.95", ", inconclusive=\"warn\""))  # 3 users
    result = pytester.runpytest("-p", "no:randomly", "--robustexplain-model=fake-model",
                                f"--robustexplain-host={server.url}", "--robustexplain-cache-dir=c", "-W",
                                "always::pytest_robustexplain.errors.RobustExplainWarning")
    assert "INTERNALERROR" not in result.stdout.str() and "Traceback" not in result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 3  # every item decided, none errored
    result.stdout.fnmatch_lines(
        ["*cannot write (database or disk is full); the run goes on without keeping what it cannot write*"])


def test_a_callable_explainer_that_hangs_is_bounded_by_the_timeout(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
import time
import pytest

@pytest.fixture
def explainer():
    def explain(history, item):
        time.sleep(0.5)  # far longer than the timeout below
        return "late"
    return explain
""")
    pytester.makepyfile(MARKED.replace('perturbations=["noise", "drift"]', 'perturbations=["noise"]'))
    result = pytester.runpytest("--robustexplain-backend=callable", "--robustexplain-timeout=0.05")
    result.assert_outcomes(errors=1)  # every call failed: a broken backend, never a verdict
    result.stdout.fnmatch_lines(["*every model call failed*(3 pairs); first error: *no answer within "
                                 "0.05 s (timeout)*"])


def test_the_callable_backend_without_an_override_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MARKED)
    result = pytester.runpytest("--robustexplain-backend=callable")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "Traceback" not in result.stdout.str()
    result.stderr.fnmatch_lines(["*--robustexplain-backend=callable needs the `explainer` fixture overridden "
                                 "in a conftest.py; 3 marked item(s) have none*"])


# ------------------------------------------------------------------------------ credentials in a host URL
@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_credentials_in_the_host_url_are_sent_and_never_written(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``http://user:password@host`` reaches the server as Basic credentials and nowhere else: not the
    JSON or Markdown report, the cache's files, the terminal nor an error message."""
    from pytest_robustexplain.testing import FakeOllamaServer

    monkeypatch.chdir(tmp_path)
    for name in ("OLLAMA_HOST", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    secret = "s3cr3t-Pa55"
    suffix = "/v1" if backend == "openai" else ""

    def argv(url: str) -> list[str]:
        return ["run", "--backend", backend, "--model", "fake-model:latest", "--host", url, "--users", "2",
                "--perturbations", "noise", "--severities", "1", "--progress", "off", "--inconclusive",
                "warn", "--guard", "warn", "--cache-dir", "cache", "--json", "r.json", "--markdown", "r.md"]

    with FakeOllamaServer() as fake:
        assert cli.main(argv(fake.url.replace("http://", f"http://alice:{secret}@") + suffix)) == 0
        sent = {r["authorization"] for r in fake.requests}
        bare = fake.url.removeprefix("http://")
    assert sent == {"Basic " + base64.b64encode(f"alice:{secret}".encode()).decode()}
    out, err = capsys.readouterr()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [p for p in written if secret in p.read_text(encoding="utf-8", errors="replace")]
    assert secret not in out + err
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert doc["settings"]["host"] == f"http://alice:***@{bare}{suffix}"
    assert "alice" not in doc["models"][0]["host"]  # the host the model answered from, bare
    # A refused connection names the host, never the password.
    assert cli.main(argv(f"http://alice:{secret}@{bare}{suffix}")) == 3  # the backend could not be used
    err = capsys.readouterr().err
    assert secret not in err and bare in err


def test_credentials_in_the_judge_host_are_never_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_robustexplain.testing import FakeOllamaServer

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    secret = "s3cr3t-Judge"
    with FakeOllamaServer() as fake:
        judge_host = fake.url.replace("http://", f"http://alice:{secret}@")
        assert cli.main(["run", "--model", "fake-model:latest", "--host", fake.url, "--users", "2",
                         "--perturbations", "noise", "--severities", "1", "--progress", "off",
                         "--inconclusive", "warn", "--guard", "warn", "--judge-model", "fake-model:latest",
                         "--judge-host", judge_host, "--min-faithful-rate", "0", "--cache-dir", "cache",
                         "--json", "r.json", "--markdown", "r.md", "--html", "r.html"]) == 0
        judged = [r for r in fake.requests if r["authorization"]]
        bare = fake.url.removeprefix("http://")
    assert judged  # the judge's calls carried the credentials
    out, err = capsys.readouterr()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [p for p in written if secret in p.read_text(encoding="utf-8", errors="replace")]
    assert secret not in out + err
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert doc["settings"]["judge_host"] == f"http://alice:***@{bare}"


@pytest.mark.parametrize("given", [["--host", "http://alice:s3cr3t@127.0.0.1:99999"],  # malformed
                                   ["--judge-host", "http://alice:s3cr3t@127.0.0.1:8080"]])  # no judge model
def test_an_error_about_a_host_never_repeats_its_password(given: list[str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--model", "m", *given, "--dry-run", "--progress", "off"]) == 2
    err = capsys.readouterr().err
    assert "s3cr3t" not in err and f"{given[0]}=http://alice:***@127.0.0.1:" in err


@pytest.mark.parametrize("host", ["http://[::1", "http://127.0.0.1:abc/v1", "http://127.0.0.1:99999",
                                  "http://127.0.0.1:0"])
def test_a_malformed_host_is_one_usage_error_from_both_doors(host: str, pytester: pytest.Pytester,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--model", "m", "--host", host, "--dry-run", "--progress", "off"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"--host={host}:" in err and "Traceback" not in err
    pytester.makepyfile("import pytest\n\n@pytest.mark.robustness()\ndef test_gate(robustness):\n    pass\n")
    result = pytester.runpytest_subprocess("--robustexplain-model=m",
                                           f"--robustexplain-host={host}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--robustexplain-host={host}*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


KEY = "sk-proj-SECRETa1b2c3d4e5f6g7h8"


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_key_in_the_hosts_path_reaches_the_server_and_no_record(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A gateway that takes its key in the path (``https://gw/sk-…/v1``): the requests carry it (the fake
    answers 401 without it), and no report, message or record shows it — the host is ``…/***/v1``."""
    monkeypatch.chdir(tmp_path)
    with FakeOllamaServer() as fake:
        fake.path_key = KEY
        host = f"{fake.url}/{KEY}" + ("/v1" if backend == "openai" else "")
        code = cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host,
                         "--users", "3", "--perturbations", "noise", "--severities", "1", "--progress", "off",
                         "--guard", "off", "--inconclusive", "warn", "--json", "r.json", "--html", "r.html",
                         "--markdown", "r.md"])
        chats = fake.calls["/api/chat" if backend == "ollama" else "/v1/chat/completions"]
        url = fake.url
    out, err = capsys.readouterr()
    assert code == 0 and chats > 0, err  # every request went under the key
    written = [Path(name).read_text(encoding="utf-8") for name in ("r.json", "r.html", "r.md")]
    written += [out, err, *(p.read_text(encoding="utf-8", errors="replace")
                            for p in (tmp_path / ".robustexplain-cache").rglob("*") if p.is_file())]
    assert not any("SECRET" in text for text in written)
    doc = json.loads(written[0])
    assert doc["models"][0]["host"] == f"{url}/***" + ("/v1" if backend == "openai" else "")
    assert sanitize.redact_url(host) == doc["models"][0]["host"]


def test_a_path_segment_is_taken_for_a_key_only_when_it_looks_like_one() -> None:
    redact = sanitize.redact_url
    assert redact("https://gw.example/hf_AbCdEfGhIjKlMnOpQrSt/v1") == "https://gw.example/***/v1"
    assert redact("https://gw.example/v1/Zx9Qw3Er7Ty1Ui5Op2As8Df4/x") == "https://gw.example/v1/***/x"
    for kept in ("https://gw.example/v1", "http://127.0.0.1:11434",
                 "https://r.openai.azure.com/openai/deployments/gpt-4o-2024-08-06",
                 "https://h/api/550e8400-e29b-41d4-a716-446655440000/v1",  # a UUID is an id, not a key
                 "https://h/models/Qwen2.5-Coder-0.5B-Instruct/v1"):
        assert redact(kept) == kept


@pytest.mark.parametrize(("host", "shown"), [
    ("http://127.0.0.1:11434/v1?api_key=GW-SECRET", "http://127.0.0.1:11434/v1?api_key=***"),
    ("http://127.0.0.1:11434/#token=GW-SECRET", "http://127.0.0.1:11434/#***"),
    ("http://alice:pw-SECRET@127.0.0.1:11434/?k=GW-SECRET&v=1", "http://alice:***@127.0.0.1:11434/?k=***&v=***"),
])
@pytest.mark.parametrize("option", ["--host", "--judge-host"])
def test_a_host_with_a_query_or_fragment_is_refused_without_repeating_it(
        host: str, shown: str, option: str, pytester: pytest.Pytester, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A gateway's ``?api_key=…`` in a host was dropped by the clients (never reaching the server) and written
    into the JSON and HTML reports; now it is one usage error, its values and fragment shown as ***."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--model", "m", option, host, "--dry-run", "--progress", "off"]) == 2
    err = capsys.readouterr().err
    assert "SECRET" not in err and f"{option}={shown}: a host cannot carry a query string" in err, err
    flag = f"--robustexplain-{option.removeprefix('--')}"
    result = pytester.runpytest_subprocess("--robustexplain-model=m", f"{flag}={host}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stdout.str() + result.stderr.str()
    assert "SECRET" not in said and f"{flag}={shown}:" in said, said
