"""A check's report section is its own (issue 59): the writers show ``report.summary.blocks`` — each section's
heading and its checks' rows — and hold no check's wording. A check with a section of its own is shown in
every writer under that heading, and its row leaves the table of further checks; the short report shows a
section only when its checks found something."""

from __future__ import annotations

import pytest

from pytest_robustexplain.checks import DEFAULT_CHECKS, FURTHER, SECTIONS, sections
from pytest_robustexplain.report.summary import ReportModel, blocks
from pytest_robustexplain.results import read_json

# A check the process registers (the Python API), with a section of its own that reads its pooled row.
CONFTEST = '''
import pytest
import pytest_robustexplain
from pytest_robustexplain.checks import Check, SILENT, share_row

class Wordy(Check):
    name = "wordy"
    section = "length_review"

    def measure(self, evidence):
        texts = [p.original for p in evidence.pairs if p.failure is None]
        return sum(len(t.split()) > 5 for t in texts), len(texts)

    def decide(self, found, evidence):
        return SILENT

    def finding(self, found, evidence):
        hits, n = found
        return share_row(self.name, None, f"{hits} of {n} explanations run past five words", hits, n,
                         0.0, 1.0, None)

    def section_rows(self, pooled):
        row = next(f for f in pooled.findings if f.check == self.name)
        return [("Longer than five words", row.reason)]

    def shown_briefly(self, pooled):
        return True

pytest_robustexplain.register_check(Wordy())

@pytest.fixture
def explainer():
    return lambda history, item: f"We recommend {item.title} because you enjoy {item.category} a lot."
'''

# The runs below: the callable explainer of CONFTEST on four users, nothing cached.
RUN = ("--robustexplain-backend=callable", "--robustexplain-users=4", "--robustexplain-cache=off", "-p",
       "no:cacheprovider")
SAID = "4 of 4 explanations run past five words"  # the Wordy check's row


def _flowing(text: str) -> str:
    return " ".join(text.split())  # the terminal wraps a row's words


GATED = """
import pytest

@pytest.mark.robustness(min_combined=0.0, min_metric=0.0, perturbations=["noise_injection"], severities=[1],
                        guard="off")
def test_gate(robustness):
    pass
"""


def test_a_check_with_a_section_of_its_own_is_shown_by_every_writer(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_gate=GATED)
    # A child process: the check is registered for the process, which must not outlive this test.
    result = pytester.runpytest_subprocess(*RUN, "--robustexplain-json=r.json", "--robustexplain-html=r.html",
                                           "--robustexplain-markdown=r.md")
    result.assert_outcomes(passed=1)
    terminal = result.stdout.str()
    said = "4 of 4 explanations run past five words"
    assert "Length review" in terminal and said in terminal
    assert "More checks" not in terminal  # its row is in its own section, not in the table of further checks
    markdown = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert "**Length review**" in markdown and said in markdown
    html = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert "<h3>Length review" in html and said in html
    # A process without the check (the command rendering the JSON later) shows its row in its section, in
    # the words of the table of further checks (the row names its section; its own wording is its code's).
    run = read_json(pytester.path / "r.json")
    rendered = blocks(ReportModel.of(run).summary(run.gates[0].model))
    own = next(b for b in rendered if b.title == "Length review")
    assert any(label == "wordy" and said in value for label, value in own.rows)
    assert "More checks" not in [b.title for b in rendered]


HOOKED = CONFTEST.replace("pytest_robustexplain.register_check(Wordy())", """
def pytest_robustexplain_register_checks(register_check, register_metric):
    register_check(Wordy())
""")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_conftests_check_is_shown_in_its_own_section(pytester: pytest.Pytester, workers: list[str]) -> None:
    """A conftest's check (the hook: its session's only) is not the writers' to know, under xdist not even
    the controller's: its row names its section, and every writer places it there."""
    pytester.makeconftest(HOOKED)
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest(*RUN, "--robustexplain-markdown=r.md", *workers)
    result.assert_outcomes(passed=1)
    for text in (result.stdout.str(), (pytester.path / "r.md").read_text(encoding="utf-8")):
        text = _flowing(text)
        assert "Length review" in text and "Length review ()" not in text and SAID in text
        assert "More checks" not in text


def test_a_check_with_a_section_and_no_rows_of_its_own_shows_its_row_there(pytester: pytest.Pytester) -> None:
    """A check naming a section but not wording it (``section_rows`` not written) is not lost between the
    section it left the table of further checks for and a section with no rows: its row stands there."""
    pytester.makeconftest(HOOKED.replace("def section_rows(self, pooled):", "def _unused(self, pooled):"))
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest(*RUN)
    result.assert_outcomes(passed=1)
    said = _flowing(result.stdout.str())
    assert "Length review" in said and SAID in said


def test_each_built_in_section_is_named_and_in_the_writers_order() -> None:
    named = [section.name for section, _, _ in sections(DEFAULT_CHECKS)]
    assert named[:len(SECTIONS)] == [s.name for s in SECTIONS] and FURTHER in named
    for section, checks, _ in sections(DEFAULT_CHECKS):
        order = [c.name for c in checks if c.name in section.order]
        assert order == [n for n in section.order if n in order]  # its rows in the section's order


@pytest.mark.parametrize("section", ["stability", "checks"])
def test_a_check_naming_a_writers_own_section_is_a_further_check(pytester: pytest.Pytester,
                                                                 section: str) -> None:
    """Stability's section is the writers' own tables and "checks" the further checks': a user's check
    naming either is a row of the table of further checks, not lost between them."""
    # Registered for the process (the writers know it), so in a child process.
    pytester.makeconftest(CONFTEST.replace('section = "length_review"', f'section = "{section}"'))
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest_subprocess(*RUN)
    result.assert_outcomes(passed=1)
    said = _flowing(result.stdout.str())
    assert "More checks" in said and SAID in said
