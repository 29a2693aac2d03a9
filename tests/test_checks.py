"""Checks as units (``checks/``): the one combining rule, the registry, every check's row in the verdict, and
the user's own check registered by a conftest — computed, gated, shown by every writer, read back from the
JSON, identical serially and under ``-n 2``; and explainers written to slip past a price check."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import read_report, run_fake

from pytest_robustexplain.checks import BUILTIN, DEFAULT_CHECKS, CheckRegistry, PredicateCheck, combine
from pytest_robustexplain.errors import ConfigError
from pytest_robustexplain.results import FAIL, INCONCLUSIVE, INSENSITIVE, PASS, run_from_dict
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "custom_check"


# ------------------------------------------------------------------------------ the combining rule
@pytest.mark.parametrize(("start", "effect", "expected"), [
    (PASS, FAIL, FAIL), (INCONCLUSIVE, FAIL, FAIL), (INSENSITIVE, FAIL, INSENSITIVE), (FAIL, FAIL, FAIL),
    (PASS, INSENSITIVE, INSENSITIVE), (INCONCLUSIVE, INSENSITIVE, INSENSITIVE), (FAIL, INSENSITIVE, FAIL),
    (PASS, INCONCLUSIVE, INCONCLUSIVE), (FAIL, INCONCLUSIVE, FAIL), (INSENSITIVE, INCONCLUSIVE, INSENSITIVE),
    (PASS, None, PASS), (FAIL, None, FAIL), (INCONCLUSIVE, None, INCONCLUSIVE),
])
def test_one_rule_combines_every_checks_decision(start: str, effect: str | None, expected: str) -> None:
    assert combine(start, effect) == expected


def test_a_failure_before_insensitive_stays_and_insensitive_before_a_failure_stays() -> None:
    # The order is the registry's: stability and the attacks come before the cross-user control.
    outcome = PASS
    for effect in (FAIL, INSENSITIVE):  # a stability FAIL, then the control finds the user ignored
        outcome = combine(outcome, effect)
    assert outcome == FAIL
    outcome = PASS
    for effect in (INSENSITIVE, FAIL):  # ignored users, then relative robustness fails too
        outcome = combine(outcome, effect)
    assert outcome == INSENSITIVE


@pytest.mark.parametrize(("start", "effect", "leads"), [
    (FAIL, INCONCLUSIVE, False), (FAIL, None, False), (INSENSITIVE, INCONCLUSIVE, False),
    (INCONCLUSIVE, None, False), (FAIL, FAIL, True), (PASS, FAIL, True), (PASS, None, True),
    (INCONCLUSIVE, INCONCLUSIVE, True), (PASS, INCONCLUSIVE, True), (FAIL, INSENSITIVE, False),
])
def test_a_stage_that_did_not_decide_a_failure_follows_the_reason(start: str, effect: str | None,
                                                                 leads: bool) -> None:
    """A failed item's first words are the check that decided it: an INCONCLUSIVE guard (or a warning)
    beside an earlier stage's FAIL says its note after it, behind "Also:"; a stage that decided leads."""
    from pytest_robustexplain.checks import Decision, apply_stage
    from pytest_robustexplain.checks.copying import Copying
    from pytest_robustexplain.results import Verdict

    before = Verdict(start, message="Security FAIL: prompt injection succeeded in 3 of 3 pairs.")
    after = apply_stage(before, [(Copying(), Decision(effect, "Guard note."))])
    assert after.outcome == combine(start, effect)
    if leads:
        assert after.message == f"Guard note. Stability alone: {before.message}"
    else:
        assert after.message == f"{before.message} Also: Guard note."


# ------------------------------------------------------------------------------ the registry
def test_every_finding_of_the_method_is_a_registered_check_in_decision_order() -> None:
    """No list pinned (a new check is one module and one registration line): the verdict starts as the
    stability check's, names are unique, the control's checks are decided together (one stage, one
    sentence of context), and the registry starts with the built-ins in their order."""
    names = [c.name for c in BUILTIN]
    assert names[0] == "stability" and len(set(names)) == len(names)
    staged = [n for n, c in enumerate(BUILTIN) if c.stage == "controls"]
    assert staged and staged == list(range(staged[0], staged[-1] + 1))
    assert DEFAULT_CHECKS.names()[:len(BUILTIN)] == tuple(names)


def test_a_registration_is_refused_in_one_sentence() -> None:
    registry = CheckRegistry(base=DEFAULT_CHECKS)
    with pytest.raises(ConfigError, match="registered already"):
        registry.register("copying", lambda text, history, item: False)
    with pytest.raises(ConfigError, match="lower-case letters"):
        registry.register("No Price", lambda text, history, item: False)
    with pytest.raises(ConfigError, match="give a predicate"):
        registry.register("no_price")
    with pytest.raises(ConfigError, match="max_rate must be a number between 0 and 1"):
        registry.register("no_price", lambda text, history, item: False, max_rate=2)
    with pytest.raises(ConfigError, match="must be callable"):
        PredicateCheck("no_price", "not a function")  # type: ignore[arg-type]
    registry.register("no_price", lambda text, history, item: False)
    assert "no_price" in registry and "no_price" not in DEFAULT_CHECKS


def test_each_method_check_declares_the_settings_it_owns_and_the_table_has_them_once() -> None:
    from pytest_robustexplain.settings import MARKER_KEYWORDS, OPTIONS, GateSettings, Settings

    owned = {c.name: [spec.field for spec in c.options] for c in BUILTIN if c.options}
    assert owned == {
        "injection": ["max_injection_rate"], "hijack": ["max_hijack_rate"],
        "sensitivity": ["min_sensitivity", "max_insensitive_share", "max_identical_share"],
        "relative": ["min_relative"], "copying": ["max_copy_rate"],
        "grounding": ["min_history_reference", "max_unsupported_rate"], "flip": ["min_flip_sensitivity"],
        "faithfulness": ["min_faithful_rate", "min_judge_agreement"], "polarity": ["max_misattributed_rate"]}
    fields = [spec.field for spec in OPTIONS]
    declared = [name for names in owned.values() for name in names]
    assert all(fields.count(name) == 1 and name in MARKER_KEYWORDS for name in declared)
    # Not fields of the records: one mapping, answered by name like a field.
    assert not set(declared) & {f for f in Settings.__dataclass_fields__}
    assert tuple(declared) == Settings.DECLARED == GateSettings.DECLARED


def test_a_registered_check_that_declares_options_is_refused_naming_the_way_it_has() -> None:
    from pytest_robustexplain.checks import Check
    from pytest_robustexplain.options import float_parser, opt

    class Hedging(Check):
        name = "hedging"
        options = (opt("max-hedging", float_parser(0.0, 1.0), 0.1, "Hedging gate.", marker=True),)

    with pytest.raises(ConfigError, match=r"check 'hedging' declares options \(max-hedging\): only the "
                       r"built-in checks can; give yours a limit \(default_limit\)"):
        CheckRegistry(base=DEFAULT_CHECKS).add(Hedging())


# ------------------------------------------------------------------------------ end to end
PRICE_SELLER = '''
import pytest

def seller(history, item):
    top = history.interactions[-1].title or "your last pick"
    text = f"We recommend {item.title} because you watched {top} and enjoy {item.category}."
    # Half the users (by a stable property of their id) get a sales pitch appended.
    if sum(map(ord, history.user_id)) % 2:
        text += " {pitch}"
    return text

@pytest.fixture
def explainer():
    return seller
'''

GATED = """
import pytest

@pytest.mark.robustness(min_combined=0.3, min_metric=0.0, perturbations=["noise_injection"], severities=[1],
                        guard="off")
def test_gate(robustness):
    assert "stability" in robustness.verdict.findings
"""

ARGS = ("--robustexplain-backend=template", "--robustexplain-users=8", "--robustexplain-json=r.json",
        "--robustexplain-html=r.html", "--robustexplain-markdown=r.md", "--junitxml=j.xml", "-p",
        "no:cacheprovider")


def _project(pytester: pytest.Pytester, pitch: str) -> None:
    """The example's conftest (its check) with an explainer that sometimes adds ``pitch``."""
    example = (EXAMPLE / "conftest.py").read_text(encoding="utf-8")
    pytester.makeconftest(example + PRICE_SELLER.replace("{pitch}", pitch))
    pytester.makepyfile(test_gate=GATED)


def test_a_price_in_one_explanation_fails_the_item_in_every_writer(pytester: pytest.Pytester) -> None:
    _project(pytester, "Only $4.99 this week!")
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # The headline names the check that decided the item.
    assert "Check no_price FAIL: " in out and "explanations mention a price" in out
    assert "More checks (outcome · value [bounds] · limit · reason)" in out
    doc = read_report(pytester)
    (gate,) = doc["gates"]
    row = gate["verdict"]["findings"]["no_price"]
    assert row["outcome"] == FAIL and row["threshold"] == 0.0 and row["bound"] == "max"
    assert 0 < row["counts"]["hits"] < row["counts"]["explanations"] == 8
    assert gate["verdict"]["message"].startswith("Check no_price FAIL: ")
    assert next(iter(gate["verdict"]["findings"])) == "stability"  # every check's row, in decision order
    assert row["examples"] and "$4.99" in row["examples"][0]
    assert [f["check"] for f in doc["aggregates"]["seller"]["checks"]] == ["no_price"]
    for name, check in (("r.md", "no\\_price"), ("r.html", "no_price")):  # Markdown escapes the underscore
        text = (pytester.path / name).read_text(encoding="utf-8")
        assert check in text and "More checks" in text and "mention a price" in text, name
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "j.xml").iter("property")}
    assert props["robustexplain_check_no_price"] == FAIL
    assert float(props["robustexplain_check_no_price_value"]) == row["value"]["mean"]
    # The report reads back with the row, through the one reader driven by the record's fields.
    back = run_from_dict(doc)
    assert back.gates[0].verdict.findings["no_price"].counts == row["counts"]


@pytest.mark.parametrize("disguise", [
    "Only 4.99 dollars this week!",  # a currency word instead of a sign
    "Now just € 9,99.",  # another sign, a space, a decimal comma
    "Grab it for USD 15 today.",  # a currency code
])
def test_a_price_written_another_way_is_still_a_price(pytester: pytest.Pytester, disguise: str) -> None:
    _project(pytester, disguise)
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(failed=1)
    assert read_report(pytester)["gates"][0]["verdict"]["findings"]["no_price"]["outcome"] == FAIL


def test_numbers_that_are_not_prices_pass_and_the_row_says_so(pytester: pytest.Pytester) -> None:
    _project(pytester, "You rated 4 of its 5 predecessors highly since 1994.")
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=1)
    row = read_report(pytester)["gates"][0]["verdict"]["findings"]["no_price"]
    assert row["outcome"] == PASS and row["counts"]["hits"] == 0
    assert "PASS · 0.00 [0.00," in result.stdout.str()


def test_a_conftests_check_belongs_to_its_session(pytester: pytest.Pytester) -> None:
    _project(pytester, "Only $4.99!")
    pytester.runpytest(*ARGS).assert_outcomes(failed=1)
    (pytester.path / "conftest.py").unlink()  # the same process, a session without the check
    pytester.makepyfile(test_gate=GATED.replace('"stability" in', '"no_price" not in'))
    pytester.runpytest(*ARGS).assert_outcomes(passed=1)
    assert "no_price" not in DEFAULT_CHECKS


def test_a_predicate_that_raises_or_answers_no_bool_is_one_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
def pytest_robustexplain_register_checks(register_check):
    register_check("broken", lambda text, history, item: text.nonexistent())
""")
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(errors=1)  # at the robustness fixture's set-up, like every error deciding a gate
    result.stdout.fnmatch_lines(["*check 'broken': its predicate raised AttributeError*"])
    assert "Traceback" not in result.stdout.str()
    pytester.makeconftest("""
def pytest_robustexplain_register_checks(register_check):
    register_check("broken", lambda text, history, item: len(text))
""")
    result = pytester.runpytest(*ARGS)
    result.stdout.fnmatch_lines(["*check 'broken': its predicate must return True or False, got int*"])


@pytest.mark.parametrize("workers", [(), ("-n", "2")])
def test_a_refused_registration_is_a_usage_error_naming_the_hook(pytester: pytest.Pytester,
                                                                 workers: tuple[str, ...]) -> None:
    """Serially and in xdist workers alike: the one line naming the hook, and the usage error's exit status —
    a worker once died at collection and xdist ended in 35 lines of INTERNALERROR without it (issue 61)."""
    pytester.makeconftest("""
def pytest_robustexplain_register_checks(register_check):
    register_check("copying", lambda text, history, item: False)
""")
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest_subprocess(*ARGS, *workers)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = "*robustexplain: pytest_robustexplain_register_checks: check 'copying' is registered already*"
    (result.stdout if workers else result.stderr).fnmatch_lines([said])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_conftests_check_gates_its_directory_serially_and_under_xdist(pytester: pytest.Pytester,
                                                                         xdist_args: tuple[str, ...]) -> None:
    # The root's test is collected before shop/conftest.py is loaded: the check must still reach shop's
    # test, and only it, as the conftest's fixtures would.
    pytester.makeconftest(PRICE_SELLER.replace("{pitch}", "Only $4.99 this week!"))
    pytester.makepyfile(test_a_root=GATED)
    shop = pytester.mkpydir("shop")
    (shop / "conftest.py").write_text((EXAMPLE / "conftest.py").read_text(encoding="utf-8"))
    (shop / "test_shop.py").write_text(GATED)
    result = pytester.runpytest_subprocess(*ARGS, *xdist_args)
    result.assert_outcomes(passed=1, failed=1)
    gates = {g["nodeid"]: g["verdict"] for g in read_report(pytester)["gates"]}
    assert "no_price" not in gates["test_a_root.py::test_gate[noise_injection]"]["findings"]
    row = gates["shop/test_shop.py::test_gate[noise_injection]"]["findings"]["no_price"]
    # The same numbers whichever process decided it.
    assert (row["outcome"], row["counts"], row["value"]["low"]) == (FAIL, {"hits": 3, "explanations": 8},
                                                                    pytest.approx(0.1111, abs=1e-4))


def test_a_report_written_before_checks_had_rows_still_reads() -> None:
    fixture = Path(__file__).resolve().parent / "data_samples" / "report_v2_before_checks.json"
    run = run_from_dict(json.loads(fixture.read_text(encoding="utf-8")), source=str(fixture))
    assert run.gates and all(g.verdict.findings == {} for g in run.gates)


def test_a_schema_2_guard_reads_into_its_checks_records_and_writes_back_nested() -> None:
    """Schema 3 nests the copying, grounding and relative-robustness numbers the guard record held flat: a
    report of schema 2 reads into the same values, the old names still answer, and it writes back nested."""
    from pytest_robustexplain.results import CopyingResult, GroundingResult, RelativeResult, plain

    fixture = Path(__file__).resolve().parent / "data_samples" / "report_v2_before_checks.json"
    doc = json.loads(fixture.read_text(encoding="utf-8"))
    assert doc["schema_version"] == 2
    flats = [g["verdict"]["guard"] for g in doc["gates"] if g["verdict"].get("guard")]
    guards = [g.verdict.guard for g in run_from_dict(doc, source=str(fixture)).gates if g.verdict.guard]
    assert len(guards) == len(flats) >= 3
    for flat, guard in zip(flats, guards, strict=True):
        assert guard.copying == CopyingResult(flat["copies"], flat["explained"], flat["copy_low"],
                                              flat["copy_high"], flat["max_copy_rate"], flat["copy_outcome"])
        gr, r = guard.grounding, guard.relative_robustness
        assert (gr.outcome, gr.min_history_reference, gr.max_unsupported_rate) == (
            flat["grounding_outcome"], flat["min_history_reference"], flat["max_unsupported_rate"])
        assert gr.history_reference is not None and r.interval is not None
        assert plain(gr.history_reference.to_dict()) == flat["history_reference"]
        assert (r.limit, r.outcome, plain(r.interval.to_dict())) == (
            flat["min_relative"], flat["relative_outcome"], flat["relative_gate"])
        # The names of schema 2 still answer (``robustness.guard.copy_outcome`` in a user's test).
        assert (guard.copy_outcome, guard.copies, guard.relative_gate, guard.history_reference) == (
            guard.copying.outcome, guard.copying.copies, guard.relative_robustness.interval,
            guard.grounding.history_reference)
        written = guard.to_dict()
        assert not {"copy_outcome", "relative_gate", "grounding_outcome"} & set(written)
        assert written["copying"]["outcome"] == flat["copy_outcome"]
    assert isinstance(guards[0].grounding, GroundingResult) and isinstance(guards[0].relative_robustness,
                                                                          RelativeResult)


def test_the_pr_comment_and_compare_set_the_check_beside_the_baseline(pytester: pytest.Pytester,
                                                                       capsys: pytest.CaptureFixture[str]
                                                                       ) -> None:
    from pytest_robustexplain import cli
    from pytest_robustexplain.report.pr_comment import render_pr_comment

    _project(pytester, "You rated it 5 stars.")
    pytester.runpytest(*ARGS).assert_outcomes(passed=1)
    (pytester.path / "r.json").rename(pytester.path / "before.json")
    _project(pytester, "Only $4.99 this week!")
    pytester.runpytest(*ARGS).assert_outcomes(failed=1)
    before, now = (run_from_dict(read_report(pytester, n)) for n in ("before.json", "r.json"))
    comment = render_pr_comment(now, before)
    row = next(line for line in comment.splitlines() if line.startswith("| no\\_price"))
    assert "(FAIL)" in row and row.endswith("(worse) |"), row  # a rate under a max limit: up is worse
    capsys.readouterr()
    cli.main(["compare", str(pytester.path / "before.json"), str(pytester.path / "r.json")])
    out = capsys.readouterr().out
    assert "More checks:" in out  # the section every writer shows the check in, its row beside its row
    assert "no_price: A = PASS · 0.00" in out and "no_price: B = FAIL · 0.38" in out


MIXED = """
import pytest

@pytest.mark.robustness(guard="warn", decision="confident", severities=[1, 5],
                        perturbations=["noise_injection", "category_drift", "temporal_shuffle"],
                        per_kind={"category_drift": {"min_combined": 0.3, "min_metric": 0.0}})
def test_mixed(robustness):
    pass
"""


def test_one_mixed_run_reads_the_same_in_every_writer(pytester: pytest.Pytester,
                                                       server: FakeOllamaServer) -> None:
    """ρ failures, warn-mode findings, an INCONCLUSIVE kind and a user's check in one run: every writer
    gives each item the outcome the JSON records and the headline of the check that decided it — never a
    guard warning for an item stability failed (the HTML banner once did)."""
    from pytest_robustexplain.report.pr_comment import render_pr_comment
    from pytest_robustexplain.report.summary import failed_reason, headline

    server.mode = "fragile"
    pytester.makeconftest((EXAMPLE / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_mixed=MIXED)
    result = run_fake(pytester, server, "--robustexplain-users=6", *ARGS[2:])
    doc = read_report(pytester)
    run = run_from_dict(doc)
    outcomes = {g.slice: g.verdict.outcome for g in run.gates}
    assert outcomes == {"noise_injection": FAIL, "temporal_shuffle": FAIL, "category_drift": INCONCLUSIVE,
                        "overall": FAIL}
    warned = {name for g in run.gates for name, f in g.verdict.findings.items()
              if f.outcome and not f.enforced}
    assert warned >= {"relative", "grounding"}  # guard=warn: findings said, never deciding
    # The message leads with the check that decided the item (stability's), the warnings after "Also:".
    assert all(g.verdict.message.startswith(f"{g.verdict.outcome} (confident rule): ") for g in run.gates)
    assert all(" Also: Guard warning" in g.verdict.message for g in run.gates)
    headlines = {g.slice: headline(g.verdict) for g in run.gates}
    assert all(h.startswith("FAIL (confident rule): ") for s, h in headlines.items() if s != "category_drift")
    assert headlines["category_drift"].startswith("INCONCLUSIVE (confident rule): ")
    out = result.stdout.str()
    html = (pytester.path / "r.html").read_text(encoding="utf-8")
    banner = html[html.index('class="banner'):html.index("</div></div>") if "</div></div>" in html else None]
    markdown = (pytester.path / "r.md").read_text(encoding="utf-8")
    comment = render_pr_comment(run)
    junit = {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
             for case in ET.parse(pytester.path / "j.xml").iter("testcase")}
    for gate in run.gates:
        case = f"test_mixed[{gate.slice}]"
        assert junit[case]["robustexplain_outcome"] == gate.verdict.outcome, case
        assert junit[case]["robustexplain_check_no_price"] == PASS, case
        assert headlines[gate.slice].replace("<", "&lt;") in comment, gate.slice  # every item not passed
        if gate.verdict.outcome == FAIL:  # the failed items, with their thresholds
            assert failed_reason(gate).replace("<", "&lt;") in markdown, gate.slice
            assert failed_reason(gate).startswith("ρ "), gate.slice
    first = run.gates[0]
    assert f"{first.slice}: {headlines[first.slice]}".replace("<", "&lt;") in banner
    assert "Guard warning" not in banner
    for text in (" ".join(out.split()), markdown, html):  # the user's check: the same row everywhere
        assert "PASS · 0.00 [0.00, " in text and "0 of 6 explanations mention a price." in text


def test_a_tests_own_limit_for_a_check_comes_from_the_marker_or_the_command_line(pytester: pytest.Pytester
                                                                                ) -> None:
    _project(pytester, "Only $4.99 this week!")  # 3 of 8: confidently above 0, not above 0.5
    marked = GATED.replace('guard="off")', 'guard="off", check_limits={"no_price": 0.5})')
    pytester.makepyfile(test_gate=marked)
    pytester.runpytest(*ARGS).assert_outcomes(passed=1)
    row = read_report(pytester)["gates"][0]["verdict"]["findings"]["no_price"]
    assert (row["outcome"], row["threshold"]) == (PASS, 0.5)
    pytester.makepyfile(test_gate=GATED)
    pytester.runpytest(*ARGS, "--robustexplain-check-limits=no_price=0.5").assert_outcomes(passed=1)
    pytester.runpytest(*ARGS, "--robustexplain-check-limits=no_price=0.1").assert_outcomes(failed=1)


@pytest.mark.parametrize(("limits", "said"), [
    ("no_prise=0.5", "check-limits names 'no_prise', which is not a registered check; did you mean "
                     "'no_price'?"),
    ("copying=0.5", "check-limits names 'copying', whose limits are settings of their own"),
    ("no_price=2", "no_price: "),
])
def test_a_limit_for_no_such_check_is_one_usage_error(pytester: pytest.Pytester, limits: str, said: str
                                                      ) -> None:
    _project(pytester, "Only $4.99!")
    result = pytester.runpytest(*ARGS, f"--robustexplain-check-limits={limits}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert said in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


@pytest.mark.parametrize("name", ["keyword", "combined"])
def test_a_check_cannot_take_a_built_in_metrics_name(pytester: pytest.Pytester, name: str) -> None:
    """Issue 61: its row would stand beside the metric's in every report under one name."""
    pytester.makeconftest(f"""
def pytest_robustexplain_register_checks(register_check):
    register_check("{name}", lambda text, history, item: False)
""")
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest(*ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*check '{name}': the name of a built-in metric or quantity*"])


SAYS_FAILED = """
from pytest_robustexplain import Check
from pytest_robustexplain.checks import Decision
from pytest_robustexplain.results import Finding

class Loose(Check):
    name = "loose"

    def measure(self, evidence):
        return 1

    def decide(self, found, evidence):
        return Decision(OUTCOME, "Loose: the explanations are loose.")

    def finding(self, found, evidence):
        return Finding(self.name, ROW, "loose")

def pytest_robustexplain_register_checks(register_check):
    register_check(Loose())
"""


@pytest.mark.parametrize(("outcome", "row", "said"), [
    ('"FAILED"', '"FAIL"', "check 'loose' (Loose) decided 'FAILED': a check decides FAIL, INSENSITIVE"),
    ('"FAIL"', '"failed"', "check 'loose' (Loose) wrote a row with 'failed': a row's outcome is one of"),
])
def test_a_check_that_says_an_outcome_the_verdict_does_not_know_is_refused(
        pytester: pytest.Pytester, outcome: str, row: str, said: str) -> None:
    """Issue 61: "FAILED" was ignored and its note dropped — the item passed."""
    pytester.makeconftest(SAYS_FAILED.replace("OUTCOME", outcome).replace("ROW", row))
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*{said}*"])


def test_a_check_that_hangs_stops_the_run_at_max_minutes_naming_it(pytester: pytest.Pytester) -> None:
    """Issue 61: a check of the user's that never returns held the run past its budget; it is waited for
    until max-minutes runs out (5 s at least), then the run stops with one line naming it."""
    hangs = "        import threading\n        threading.Event().wait(600)\n        return 1\n"
    pytester.makeconftest(SAYS_FAILED.replace("OUTCOME", '"FAIL"').replace("ROW", '"FAIL"').replace(
        "        return 1\n", hangs))
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest_subprocess(*ARGS, "--robustexplain-max-minutes=0.1", timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*check 'loose' (Loose) did not decide within the run's max-minutes "
                                 "(and 5 s after it)*"])


def test_a_check_object_that_breaks_is_one_sentence_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
from pytest_robustexplain import Check

class Fragile(Check):
    name = "fragile_check"

    def measure(self, evidence):
        return {}["missing"]

def pytest_robustexplain_register_checks(register_check):
    register_check(Fragile())
""")
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*check 'fragile_check' (Fragile) raised KeyError: 'missing'*"])
    assert "in measure" not in result.stdout.str()  # no traceback through the engine


def test_a_check_written_on_the_interface_measures_decides_and_reports(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
from pytest_robustexplain import Check
from pytest_robustexplain.checks import SILENT, Decision, originals
from pytest_robustexplain.results import FAIL, PASS, Finding

class Wordy(Check):
    """The original explanations average at least 100 words."""
    name = "wordy"

    def measure(self, evidence):
        texts = [text for _, _, text in originals(evidence.cases, evidence.pairs)]
        return sum(len(t.split()) for t in texts) / len(texts) if texts else None

    def decide(self, found, evidence):
        return Decision(FAIL, f"Wordy FAIL: {found:.1f} words on average.") if found < 100 else SILENT

    def finding(self, found, evidence):
        return Finding(self.name, FAIL if found < 100 else PASS, f"{found:.1f} words on average.",
                       threshold=100.0, counts={"words": round(found)})

def pytest_robustexplain_register_checks(register_check):
    register_check(Wordy())
''')
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(failed=1)  # the template explainer writes about 70 words
    gate = read_report(pytester)["gates"][0]
    assert gate["verdict"]["message"].startswith("Wordy FAIL: ")
    assert gate["verdict"]["findings"]["wordy"]["outcome"] == FAIL
    assert "wordy" in result.stdout.str() and "More checks" in result.stdout.str()



HEDGING = """
from pytest_robustexplain import Check
from pytest_robustexplain.checks import SILENT, Decision, originals, share_row
from pytest_robustexplain.results import FAIL, PASS

class Hedging(Check):
    name = "hedging"
    default_limit = {default}

    def measure(self, evidence):
        texts = [text for _, _, text in originals(evidence.cases, evidence.pairs)]
        return sum("maybe" in t.lower() for t in texts), len(texts)

    def _outcome(self, found, evidence):
        return FAIL if found[0] > self.limit_of(evidence.gate) * found[1] else PASS

    def decide(self, found, evidence):
        if self._outcome(found, evidence) == PASS:
            return SILENT
        return Decision(FAIL, f"Check hedging FAIL: {{found[0]}} of {{found[1]}} explanations hedge.")

    def finding(self, found, evidence):
        hits, n = found
        return share_row(self.name, self._outcome(found, evidence), "hedges", hits, n, hits / n, hits / n,
                         self.limit_of(evidence.gate))

def pytest_robustexplain_register_checks(register_check):
    register_check(Hedging())
"""


def test_a_check_object_declares_its_own_limit_and_a_test_sets_it(pytester: pytest.Pytester) -> None:
    """A check on the interface declares its limit's default in its own module; a test's ``check_limits``
    (marker or command line, with did-you-mean) sets it, as it does a registered predicate's."""
    pytester.makeconftest(HEDGING.format(default=0.1) + PRICE_SELLER.replace("{pitch}", "Maybe."))
    pytester.makepyfile(test_gate=GATED)
    pytester.runpytest(*ARGS).assert_outcomes(failed=1)  # half the users' explanations say "maybe"
    row = read_report(pytester)["gates"][0]["verdict"]["findings"]["hedging"]
    assert (row["outcome"], row["threshold"], row["bound"]) == (FAIL, 0.1, "max")
    marked = GATED.replace('guard="off")', 'guard="off", check_limits={"hedging": 0.8})')
    pytester.makepyfile(test_gate=marked)
    pytester.runpytest(*ARGS).assert_outcomes(passed=1)
    row = read_report(pytester)["gates"][0]["verdict"]["findings"]["hedging"]
    assert (row["outcome"], row["threshold"]) == (PASS, 0.8)
    pytester.makepyfile(test_gate=GATED)
    pytester.runpytest(*ARGS, "--robustexplain-check-limits=hedging=0.8").assert_outcomes(passed=1)
    typo = pytester.runpytest(*ARGS, "--robustexplain-check-limits=hedgin=0.8")
    assert typo.ret == pytest.ExitCode.USAGE_ERROR
    assert "check-limits names 'hedgin', which is not a registered check; did you mean 'hedging'?" in (
        typo.stderr.str())


@pytest.mark.parametrize(("default", "said"), [(1.5, "default_limit must be a number between 0 and 1"),
                                               ("'0.1'", "default_limit must be a number between 0 and 1"),
                                               (True, "default_limit must be a number between 0 and 1")])
def test_a_check_that_declares_a_limit_out_of_range_is_refused_at_registration(
        pytester: pytest.Pytester, default: object, said: str) -> None:
    pytester.makeconftest(HEDGING.format(default=default) + PRICE_SELLER.replace("{pitch}", "Maybe."))
    pytester.makepyfile(test_gate=GATED)
    result = pytester.runpytest(*ARGS)
    assert f"check 'hedging': {said}" in result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_check_declares_no_limit_unless_it_says_so() -> None:
    """The method's checks keep their own settings: none declares a limit check_limits could set, and asking
    one for it is a programming error, not a silent default."""
    assert [c.name for c in BUILTIN if c.default_limit is not None] == []
    with pytest.raises(TypeError, match="declares no limit"):
        BUILTIN[0].limit_of(None)  # type: ignore[arg-type]

THREE_TESTS = """
import pytest

@pytest.mark.robustness(min_combined=0.2, perturbations=["noise_injection"], severities=[1], guard="off")
def test_lenient(robustness):
    pass

@pytest.mark.robustness(min_combined=0.99, perturbations=["noise_injection"], severities=[1], guard="off")
def test_strict(robustness):
    pass

@pytest.mark.robustness(min_combined=0.5, min_metric=0.1, perturbations=["noise_injection", "category_drift"],
                        per_kind={"category_drift": {"min_combined": 0.4}}, severities=[1], guard="off")
def test_per_kind(robustness):
    pass
"""


def test_the_html_and_markdown_group_items_by_test_with_its_own_thresholds(pytester: pytest.Pytester
                                                                           ) -> None:
    pytester.makepyfile(test_three=THREE_TESTS)
    pytester.runpytest(*ARGS).assert_outcomes(passed=4, failed=1)
    html = (pytester.path / "r.html").read_text(encoding="utf-8")
    markdown = (pytester.path / "r.md").read_text(encoding="utf-8")
    by_test = html[html.index('<section id="tests">'):]
    by_test = by_test[:by_test.index("</section>")]
    for test, gated in (("test_three.py::test_lenient", "ρ ≥ 0.2 · each metric ≥ 0.35"),
                        ("test_three.py::test_strict", "ρ ≥ 0.99 · each metric ≥ 0.35"),
                        ("test_three.py::test_per_kind",
                         "ρ ≥ 0.5 · each metric ≥ 0.1; category_drift: ρ ≥ 0.4 · each metric ≥ 0.1")):
        assert f"<h3>{test}</h3>" in by_test and f"gated at {gated}" in by_test, test
        escaped = test.replace("_", "\\_"), gated.replace("_", "\\_")  # Markdown escapes underscores
        assert f"**{escaped[0]}** — gated at {escaped[1]}" in markdown, test
    strict = by_test[by_test.index("test_strict"):by_test.index("test_per_kind")]
    assert "FAIL" in strict and "&lt; 0.99" in strict  # the item's own threshold beside its outcome


@pytest.mark.parametrize(("fixture_name", "version"), [("report_v3_before_details.json", 3),
                                                        ("report_v4_before_stability.json", 4)])
def test_an_older_verdict_reads_its_records_into_details_and_writes_back_the_current_schema(
        fixture_name: str, version: int) -> None:
    """Each check's record is in ``verdict.details`` — schema 4 for the checks' records, which schema 3
    wrote as the verdict's fields; schema 5 for stability's rows, which schema 4 (and 3) wrote as the
    verdict's ``checks``. An older report reads into the same records (every kind of them), the old names
    still answer, and it writes back with ``details`` and without the old fields."""
    from pytest_robustexplain.results import DETAILS, AttackResult, GateCheck, GuardResult, plain
    from pytest_robustexplain.results.faithful import FaithfulnessResult, FlipResult, PolarityResult

    fixture = Path(__file__).resolve().parent / "data_samples" / fixture_name
    doc = json.loads(fixture.read_text(encoding="utf-8"))
    assert doc["schema_version"] == version
    run = run_from_dict(doc, source=str(fixture))
    kinds = {"guard": GuardResult, "faithfulness": FaithfulnessResult, "polarity": PolarityResult,
             "flip": FlipResult}
    was = {"stability": "checks"}  # the verdict's field each record was, by its name in details now
    seen: set[str] = set()
    for written, gate in zip(doc["gates"], run.gates, strict=True):
        verdict = gate.verdict
        old = {name: (written["verdict"] if version == 3 or name in was else written["verdict"]["details"]
                      ).get(was.get(name, name)) for name in DETAILS}
        for name in DETAILS:
            record = verdict.details.get(name)
            attribute = getattr(verdict, was.get(name, name))
            if old[name] in (None, []):
                assert record is None and attribute in (None, ())
                continue
            seen.add(name)
            if name in ("attacks", "stability"):
                kind = AttackResult if name == "attacks" else GateCheck
                assert all(isinstance(a, kind) for a in record) and attribute == record
            else:
                assert isinstance(record, kinds[name]) and attribute is record
            back = [a.to_dict() for a in record] if name in ("attacks", "stability") else record.to_dict()
            assert plain(back) == old[name]
        again = plain(verdict.to_dict())
        assert not {*DETAILS, "checks"} & set(again) and set(again["details"]) == {
            n for n in DETAILS if old[n] not in (None, [])}
    assert seen == set(DETAILS)  # the fixture holds every kind of record


@pytest.mark.parametrize(("edit", "said"), [
    (lambda f: f.update({"<b>x</b>": f.pop("stability")}), "expected check names as keys"),
    (lambda f: f["stability"].update(outcome="**PWNED**"), "expected one of PASS, FAIL"),
    (lambda f: f["stability"].update(counts={"pairs": "many"}), "expected an integer"),
    (lambda f: f["stability"].pop("check"), "missing"),
])
def test_a_hand_edited_row_is_refused_naming_the_field(edit: object, said: str) -> None:
    from pytest_robustexplain.errors import DataError

    fixture = Path(__file__).resolve().parent / "data_samples" / "report_v2_before_checks.json"
    doc = json.loads(fixture.read_text(encoding="utf-8"))
    doc["gates"][0]["verdict"]["findings"] = {"stability": {"check": "stability", "outcome": "PASS",
                                                            "counts": {"pairs": 3}}}
    assert run_from_dict(json.loads(json.dumps(doc))).gates[0].verdict.findings["stability"].counts == {
        "pairs": 3}
    edit(doc["gates"][0]["verdict"]["findings"])  # type: ignore[operator]
    with pytest.raises(DataError, match=said):
        run_from_dict(doc, source="hand-edited.json")


def test_an_item_not_measured_says_why_in_its_rows(pytester: pytest.Pytester,
                                                   server: FakeOllamaServer) -> None:
    """Replies cut at the token limit make an item INCONCLUSIVE whatever its scores said: the rows say so
    beside stability's own (which measured unfinished text), and the headline is that reason."""
    from pytest_robustexplain.report.summary import headline

    server.mode = "copycat"  # long replies, cut at the token limit
    pytester.makepyfile(test_gate=GATED)
    result = run_fake(pytester, server, *ARGS[1:])
    result.assert_outcomes(failed=1)
    (gate,) = run_from_dict(read_report(pytester)).gates
    row = gate.verdict.findings["measurement"]
    assert gate.verdict.outcome == row.outcome == INCONCLUSIVE
    assert "compare a reply the server cut at the token limit" in row.reason
    assert headline(gate.verdict).startswith("Not measured: ") and row.note.startswith("Not measured: ")
    # Not a check of the user's: no row of the checks table, no JUnit property of its own.
    assert "More checks" not in result.stdout.str()
    assert "robustexplain_check_measurement" not in (pytester.path / "j.xml").read_text(encoding="utf-8")
