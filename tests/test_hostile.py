"""Outside text is hostile: a table of hostile strings through every writer.

Model replies (and the ids in data files) may contain anything. Whatever they contain, the run finishes
with its verdicts, nothing reaches the CI log as a workflow command or a terminal escape, and no Markdown
link, image or HTML from it renders in the step summary.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pytest_robustexplain import cli, sanitize
from pytest_robustexplain.explainers.base import Explanation
from pytest_robustexplain.explainers.retry import describe_error
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


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_every_writer_survives_and_neutralises_hostile_replies(
        pytester: pytest.Pytester, server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch,
        xdist: tuple[str, ...]) -> None:
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


# ---------------------------------------------------------------------- reports that cannot be written
def test_a_report_that_cannot_be_written_is_its_own_error_not_a_traceback(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (pytester.path / "afile").write_text("in the way", encoding="utf-8")
    (pytester.path / "adir").mkdir()
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "adir"))
    pytester.makepyfile(MARKED.replace(", min_combined=0.95", ""))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=afile/r.json",
                                "--robustexplain-html=r.html")
    result.assert_outcomes(passed=3)  # the gate's verdicts stand...
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # ...and the run says a report is missing
    result.stdout.fnmatch_lines([
        "robustexplain: ERROR: --robustexplain-json=*afile/r.json: cannot write the report: *afile*",
        "robustexplain: ERROR: $GITHUB_STEP_SUMMARY=*adir: cannot write the report: Is a directory*"])
    assert "Traceback" not in result.stdout.str() and (pytester.path / "r.html").is_file()

    monkeypatch.chdir(pytester.path)
    code = cli.main(["run", "--backend", "template", "--users", "2", "--severities", "1", "--progress", "off",
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
    import errno

    from pytest_robustexplain.explainers import cache as cache_module

    def full(path: Any, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_module, "_write_atomic", full)
    pytester.makepyfile(MARKED.replace(", min_combined=0.95", ""))
    result = pytester.runpytest("-p", "no:randomly", "--robustexplain-model=fake-model",
                                f"--robustexplain-host={server.url}", "--robustexplain-cache-dir=c", "-W",
                                "always::pytest_robustexplain.errors.RobustExplainWarning")
    assert "INTERNALERROR" not in result.stdout.str() and "Traceback" not in result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 3  # every item decided, none errored
    result.stdout.fnmatch_lines(
        ["*cannot write * (No space left on device); the run goes on without caching*"])


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
