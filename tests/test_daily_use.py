"""What a daily user trips over (issue 27, points 11–19): each message says what is true for the way the run
was started — ``-q`` does not point at a summary it does not print, a dry run with only fixture explainers
says why nothing is priced, help texts say the real default, a marker error is said once."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_robustexplain import cli

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated")

FAILING = """
from pathlib import Path

import pytest

@pytest.mark.robustness(users=20, perturbations=["noise"], severities=[5], min_combined=0.99, guard="off")
def test_gate(robustness):
    pass
"""

OWN_EXPLAINER = """
from pathlib import Path

import pytest

@pytest.fixture
def explainer():
    return lambda history, item: f"{item.title} suits this user."

@pytest.mark.robustness(users=3, perturbations=["noise", "drift"])
def test_gate(robustness):
    pass
"""


def test_quiet_does_not_point_at_a_summary_it_does_not_print(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FAILING)
    quiet = pytester.runpytest("--robustexplain-backend=template", "-q")
    quiet.assert_outcomes(failed=1)
    assert "(worst pairs: -v shows them)" in quiet.stdout.str()
    assert "in the summary below" not in quiet.stdout.str()
    default = pytester.runpytest("--robustexplain-backend=template")
    assert "(worst pairs: in the summary below; -v shows them here)" in default.stdout.str()
    assert "worst pairs" in default.stdout.str().split("robustness report")[-1]  # and the summary has them


@pytest.mark.parametrize(("source", "skipped", "said"), [
    (OWN_EXPLAINER, 3, "robustexplain: dry run: 3 items with their own `explainer` fixture, whose calls are "
                       "planned when each runs: nothing to price before"),
    (FAILING, 1, "robustexplain: dry run: nothing to price for 1 marked item: no model configured for "
                 "robustness tests: pass --robustexplain-model=NAME*"),
])
def test_a_dry_run_with_nothing_to_price_says_why(pytester: pytest.Pytester, source: str, skipped: int,
                                                  said: str) -> None:
    """Only fixture explainers, or no model at all: the dry run says why it priced nothing (point 12)."""
    pytester.makepyfile(source)
    result = pytester.runpytest("--robustexplain-dry-run")
    result.assert_outcomes(skipped=skipped)
    result.stdout.fnmatch_lines([said])


def test_an_unknown_marker_keyword_is_said_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FAILING.replace("users=20", "users=20, bogus=1"))
    result = pytester.runpytest("--robustexplain-backend=template")
    out = result.stdout.str()
    assert "unknown keyword 'bogus'" in out and "During handling of the above exception" not in out


def test_help_texts_say_the_real_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--help"]) == 0
    run_help = " ".join(capsys.readouterr().out.split())
    assert "default 20 on every dataset" in run_help and "20 in the synthetic set" not in run_help
    assert "143 stopped by SIGTERM" in run_help
    assert cli.main(["compare", "--help"]) == 0
    compare_help = " ".join(capsys.readouterr().out.split())
    assert "at least 80 % of the" in compare_help and "%%" not in compare_help


def test_the_short_report_wraps_its_sentences_instead_of_cutting_them(tmp_path: Path) -> None:
    """A CI log has no terminal width: the recommendation is wrapped at 80 columns, whole, never cut with
    an ellipsis, and the guard's one line leads with its outcome, so a cut never hides it (point 13)."""
    from pytest_robustexplain.checks.controls import guard_line
    from pytest_robustexplain.report.json_report import read_json
    from pytest_robustexplain.report.summary import summarize
    from pytest_robustexplain.report.terminal import render_terminal

    assert cli.main(["run", "--backend", "template", "--users", "20", "--perturbations", "noise",
                     "--severities", "5", "--min-combined", "0.99", "--progress", "off", "-q",
                     "--json", str(tmp_path / "r.json")]) == cli.EXIT_GATE_FAILED  # the short report
    run = read_json(tmp_path / "r.json")
    summary = summarize(run, "template")
    text = render_terminal(run, width=80, verbose=False)  # what pytest prints without -v
    assert not any(line.startswith("Recommendation") and line.endswith("…") for line in text.splitlines())
    flowing = " ".join(text.split())
    assert " ".join(summary.recommendation.split()) in flowing
    guard = next(line for line in text.splitlines() if line.startswith("Guard"))
    # Each of the guard's checks by name with its outcome, the sensitivity first; wrapped, never cut.
    assert guard.split()[1:3] == ["sensitivity", guard_line(summary).rsplit(" · ", 1)[-1]]
    assert not any(line.endswith("…") for line in text.splitlines() if not line.startswith("      "))


DICT_EXPLAINER = """
import pytest
from pytest_robustexplain import plain_data_explainer

def my_explainer(history, item):
    liked = [i.get("title") or i["item_id"] for i in history if (i.get("rating") or 0) >= 4]
    return f"{{item['title']}} because you liked {{', '.join(liked[:2]) or 'similar items'}}."

@pytest.fixture
def explainer():
    return {wrapped}

@pytest.mark.robustness(users=3, perturbations=["noise"], severities=[1], guard="off", inconclusive="warn")
def test_gate(robustness):
    pass
"""


def test_an_explainer_written_for_dicts_is_told_what_it_gets_and_how_to_adapt(
        pytester: pytest.Pytester) -> None:
    """The API's examples speak lists of dicts, the fixture passes records: a dict-style explainer's
    AttributeError says so and names the adapter, which makes the same function work (point 18)."""
    pytester.makepyfile(DICT_EXPLAINER.format(wrapped="my_explainer"))
    broken = pytester.runpytest("--robustexplain-backend=callable")
    assert "the explainer gets records, not dicts" in broken.stdout.str()
    assert "plain_data_explainer(fn)" in broken.stdout.str()
    pytester.makepyfile(DICT_EXPLAINER.format(wrapped="plain_data_explainer(my_explainer)"))
    pytester.runpytest("--robustexplain-backend=callable").assert_outcomes(passed=1)


TYPO_EXPLAINER = """
import pytest

@pytest.fixture
def explainer():
    def explain(history, item):
        return f"Because you liked {item.titel}"
    return explain

@pytest.mark.robustness(users=3, perturbations=["noise", "drift"], severities=[1], guard="off")
def test_gate(robustness):
    pass
"""


def test_a_broken_explainer_is_said_once_with_its_file_and_line_and_only_the_hint_that_applies(
        pytester: pytest.Pytester) -> None:
    """A typo in the user's explainer (``item.titel``): the first item says the exception with the file and
    line of the user's code and the field it likely meant — not the hint for dict-style explainers — and the
    other items that failed the same way name that item instead of repeating it (issue 62)."""
    pytester.makepyfile(test_typo=TYPO_EXPLAINER)
    result = pytester.runpytest("--robustexplain-backend=callable", "-p", "no:randomly")
    result.assert_outcomes(errors=3)
    out = result.stdout.str()
    cause = "AttributeError: 'Item' object has no attribute 'titel' (at test_typo.py:6, in explain) — did "
    assert cause + "you mean 'title'?" in out and "records, not dicts" not in out
    failed = [line for line in result.stdout.lines if line.startswith("robustexplain: explain")]
    assert len(failed) == 3 and sum(cause in line for line in failed) == 1
    assert all(line.endswith("the same first error as test_typo.py::test_gate[noise_injection]")
               for line in failed if cause not in line)


def test_the_dicts_are_the_api_shape() -> None:
    from pytest_robustexplain import history_from

    plain = [{"item_id": "B1", "category": "Books", "rating": 5, "timestamp": 1700000000, "title": "Dune"}]
    assert history_from(plain).to_dicts() == plain


def test_the_html_says_every_failing_item_counts_controls_apart_and_paints_failures_red(
        tmp_path: Path) -> None:
    """Point 20: the banner of an all-failing run says more items failed than the one it quotes; the pairs
    table's heading counts the controls apart and says what swap / control at L0 are; a cell under the
    gate is red, never orange."""
    import re

    from pytest_robustexplain.report.html import gate_shade, render_html
    from pytest_robustexplain.report.json_report import read_json

    assert cli.main(["run", "--backend", "template", "--users", "20", "--perturbations", "noise,drift",
                     "--severities", "5", "--min-combined", "0.99", "--progress", "off", "-q",
                     "--json", str(tmp_path / "r.json")]) == cli.EXIT_GATE_FAILED
    run = read_json(tmp_path / "r.json")
    page = render_html(run)
    banner = page.split('role="status">', 1)[1].split("</div></div>", 1)[0]
    assert "and 2 more items did not pass" in banner  # three items: two kinds and overall
    swaps = sum(p.key.kind == "swap" for p in run.pairs)
    heading = f"All {len(run.pairs):,} pairs ({len(run.pairs) - swaps:,} perturbed, {swaps:,} controls"
    assert swaps and heading in page and "both at L0" in page
    red, green, blue = (int(x) for x in re.findall(r"\d+", gate_shade(0.31, 0.5)))
    assert red > 2 * green and green < 100 and blue < 100  # a red, not the orange (green ≈ 170) a 0.31 was
