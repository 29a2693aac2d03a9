"""The plugin beside pytest's own features: selection and reruns, marks, classes and parametrisation,
output flags, config files and the environment — what a user of pytest expects a marked test to do.

Each test runs pytest inside pytest (the template backend, or the fake server where calls are counted).
"""

from __future__ import annotations

import contextlib
import re

import pytest
from helpers import read_report, run_fake

from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

KINDS = ("noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values")

GATE = """
import pytest

@pytest.mark.robustness(perturbations=["noise", "shuffle"], severities=[1, 5], users=6{extra})
def test_gate(robustness):
    assert robustness.pairs
"""


def _gate(extra: str = "") -> str:
    return GATE.format(extra=extra)


def _under(mark: str) -> str:
    """The gated test with another pytest mark above the robustness marker."""
    return _gate().replace("@pytest.mark.robustness", f"@pytest.mark.{mark}\n@pytest.mark.robustness")


def _template(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--robustexplain-backend=template", "-p", "no:randomly", *args)


def _ids(result: pytest.RunResult) -> list[str]:
    """The test ids of a ``-q --collect-only`` listing."""
    return [line for line in result.stdout.lines if "::" in line]


# --------------------------------------------------------------------------------- collection and selection
def test_collect_only_lists_one_item_per_kind_and_makes_no_call(pytester: pytest.Pytester,
                                                               server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    result = run_fake(pytester, server, "--collect-only", "-q")
    assert result.ret == 0
    assert _ids(result) == [f"test_collect_only_lists_one_item_per_kind_and_makes_no_call.py::test_gate[{k}]"
                            for k in ("noise_injection", "temporal_shuffle", "overall")]
    assert server.chat_calls == 0 and "robustness report" not in result.stdout.str()


def test_two_models_multiply_the_items_and_name_the_model_first(pytester: pytest.Pytester,
                                                                server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    with FakeOllamaServer(models=("a-model:latest", "b-model:latest")) as two:
        result = run_fake(pytester, two, "--collect-only", "-q", model="a-model,b-model")
    ids = [i.split("::")[1] for i in _ids(result)]
    assert ids == [f"test_gate[{m}-{k}]" for m in ("a-model", "b-model")
                   for k in ("noise_injection", "temporal_shuffle", "overall")]


def test_keyword_selection_runs_only_the_chosen_kind_and_calls_only_for_it(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    result = run_fake(pytester, server, "-k", "noise_injection", "--robustexplain-cache=off",
                      "--robustexplain-guard=off", "--robustexplain-json=r.json")
    result.assert_outcomes(passed=1, deselected=2)
    doc = read_report(pytester)
    assert {p["key"]["kind"] for p in doc["pairs"]} == {"noise_injection"}
    # 6 originals and 6 users × 2 severities of noise (and a warm-up), nothing for the deselected item
    assert server.chat_calls <= 1 + 6 + 12


def test_deselecting_the_overall_item_keeps_the_per_kind_verdicts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=_gate())
    result = _template(pytester, "--deselect", "test_gate.py::test_gate[overall]", "-v")
    result.assert_outcomes(passed=2, deselected=1)
    result.stdout.fnmatch_lines(["*test_gate?noise_injection? PASSED*",
                                 "*test_gate?temporal_shuffle? PASSED*"])


def test_marker_expression_selects_robustness_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate() + "\n\ndef test_plain():\n    pass\n")
    gated = _template(pytester, "-m", "robustness")
    gated.assert_outcomes(passed=3, deselected=1)
    plain = _template(pytester, "-m", "not robustness")
    plain.assert_outcomes(passed=1, deselected=3)
    assert "robustness report" not in plain.stdout.str()


def test_last_failed_reruns_only_the_failed_items(pytester: pytest.Pytester,
                                                  server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate(extra=', per_kind={"shuffle": {"min_combined": 0.999}}'))
    first = run_fake(pytester, server)
    first.assert_outcomes(passed=2, failed=1)
    again = run_fake(pytester, server, "--lf", "-v")
    again.assert_outcomes(failed=1)  # the passed items are not run again
    again.stdout.fnmatch_lines(["*test_gate?temporal_shuffle? FAILED*"])


def test_failed_first_orders_the_failed_item_first(pytester: pytest.Pytester,
                                                   server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate(extra=', per_kind={"shuffle": {"min_combined": 0.999}}'))
    run_fake(pytester, server).assert_outcomes(passed=2, failed=1)
    again = run_fake(pytester, server, "--ff", "-v")
    again.assert_outcomes(passed=2, failed=1)
    ran = [line for line in again.stdout.lines if re.search(r"::test_gate\[\w+\] (PASSED|FAILED)", line)]
    assert len(ran) == 3 and "temporal_shuffle" in ran[0]


def test_exitfirst_stops_after_the_first_failed_item_and_still_reports(pytester: pytest.Pytester,
                                                                      server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile(_gate())
    result = run_fake(pytester, server, "-x", "--robustexplain-json=r.json")
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "Traceback" not in result.stdout.str() and "INTERNALERROR" not in result.stdout.str()
    assert [g["verdict"]["outcome"] for g in read_report(pytester)["gates"]] == ["FAIL"]


def test_maxfail_two_stops_after_two_items(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile(_gate())
    run_fake(pytester, server, "--maxfail=2").assert_outcomes(failed=2)


def test_stepwise_resumes_from_the_failed_item(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate(extra=', per_kind={"shuffle": {"min_combined": 0.999}}'))
    first = run_fake(pytester, server, "--sw")
    first.assert_outcomes(passed=1, failed=1)
    again = run_fake(pytester, server, "--sw", "-v")
    again.stdout.fnmatch_lines(["*test_gate?temporal_shuffle? FAILED*"])
    assert "noise_injection] PASSED" not in again.stdout.str()


# --------------------------------------------------------------------------------- where the marker sits
def test_a_marked_class_gates_each_method(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        class TestExplanations:
            def test_one(self, robustness):
                assert robustness.pairs

            def test_two(self, robustness):
                assert robustness.verdict.outcome == "PASS"
    """)
    result = _template(pytester, "-v")
    result.assert_outcomes(passed=2)  # one kind: its item is the whole gate (no separate overall item)
    result.stdout.fnmatch_lines(["*TestExplanations::test_one?noise_injection? PASSED*",
                                 "*TestExplanations::test_two?noise_injection? PASSED*"])


def test_a_module_pytestmark_gates_every_test_of_the_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        pytestmark = pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)

        def test_a(robustness):
            pass

        def test_b(robustness):
            pass
    """)
    _template(pytester).assert_outcomes(passed=2)


def test_the_nearest_marker_wins_over_the_class_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        class TestGate:
            @pytest.mark.robustness(perturbations=["shuffle"], severities=[1], users=6)
            def test_own(self, robustness):
                pass

            def test_inherited(self, robustness):
                pass
    """)
    result = _template(pytester, "--collect-only", "-q")
    ids = [i.split("::", 1)[1] for i in _ids(result)]
    assert "TestGate::test_own[temporal_shuffle]" in ids
    assert "TestGate::test_inherited[noise_injection]" in ids
    assert "TestGate::test_own[noise_injection]" not in ids


def test_parametrize_and_the_marker_multiply(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.parametrize("tone", ["short", "long"])
        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        def test_gate(robustness, tone):
            assert tone in ("short", "long") and robustness.pairs
    """)
    result = _template(pytester, "--collect-only", "-q")
    assert [i.split("::")[1] for i in _ids(result)] == ["test_gate[noise_injection-short]",
                                                        "test_gate[noise_injection-long]"]
    _template(pytester).assert_outcomes(passed=2)


def test_a_skip_mark_makes_no_model_call(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.skip(reason="not this release")
        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        def test_gate(robustness):
            pass

        @pytest.mark.skipif(True, reason="never here")
        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        def test_other(robustness):
            pass
    """)
    result = run_fake(pytester, server, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*not this release*"])
    assert server.chat_calls == 0


def test_skip_inside_the_body_skips_the_item_after_the_gate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise", "shuffle"], severities=[1], users=6)
        def test_gate(robustness):
            if robustness.kind == "overall":
                pytest.skip("overall shown in the report only")
    """)
    result = _template(pytester, "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*overall shown in the report only*"])


def test_xfail_on_a_failing_gate_is_xfailed(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile(_under("xfail(reason='known')"))
    result = run_fake(pytester, server)
    result.assert_outcomes(xfailed=3)
    assert result.ret == pytest.ExitCode.OK


def test_a_strict_xfail_whose_gate_passes_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_under("xfail(strict=True)"))
    result = _template(pytester)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*XPASS(strict)*"])


def test_runxfail_reports_the_gate_failure_itself(pytester: pytest.Pytester,
                                                  server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile(_under("xfail(reason='known')"))
    result = run_fake(pytester, server, "--runxfail")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*robustness gate FAIL*"])


def test_a_failing_body_fails_its_item_even_when_the_gate_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise", "shuffle"], severities=[1], users=6)
        def test_gate(robustness):
            assert robustness.kind != "overall", "the body's own check"
    """)
    result = _template(pytester)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*the body's own check*"])


def test_a_marked_test_uses_other_fixtures_beside_robustness(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def threshold():
            return 0.1
    """)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        def test_gate(robustness, tmp_path, threshold, request):
            (tmp_path / "v.txt").write_text(robustness.verdict.outcome)
            assert request.node.name.startswith("test_gate[")
            assert all(p.combined >= threshold for p in robustness.pairs)
    """)
    _template(pytester).assert_outcomes(passed=1)


def test_a_fixture_error_beside_robustness_is_an_error_of_that_item(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("database down")

        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        def test_gate(broken, robustness):
            pass
    """)
    result = _template(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*database down*"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_an_unmarked_test_asking_for_robustness_is_told_to_mark_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain(robustness):\n    pass\n")
    result = _template(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*::test_plain: the `robustness` fixture needs @pytest.mark.robustness*"])


def test_a_marked_test_that_does_not_ask_for_robustness_is_still_gated(pytester: pytest.Pytester,
                                                                      server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise"], severities=[1, 5], users=6)
        def test_gate():
            pass
    """)
    run_fake(pytester, server).assert_outcomes(failed=1)


def test_a_setup_method_and_an_autouse_fixture_run_around_a_gated_item(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        CALLS = []

        @pytest.fixture(autouse=True)
        def around():
            CALLS.append("fixture")
            yield

        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        class TestGate:
            def setup_method(self):
                CALLS.append("setup")

            def test_gate(self, robustness):
                assert CALLS[-2:] == ["fixture", "setup"]
    """)
    _template(pytester).assert_outcomes(passed=1)


# --------------------------------------------------------------------------------- output and other plugins
def test_short_summary_names_the_failed_gate_with_its_reason(pytester: pytest.Pytester,
                                                             server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile(test_g=_gate())  # a short id leaves the 80-column line room for the reason
    result = run_fake(pytester, server, "-rf")
    result.stdout.fnmatch_lines(
        ["FAILED test_g.py::test_gate[[]noise_injection[]] - Failed: robustness gate FAIL*"])


def test_tb_no_still_prints_the_robustness_report(pytester: pytest.Pytester,
                                                  server: FakeOllamaServer) -> None:
    server.mode = "fragile"
    pytester.makepyfile(_gate())
    result = run_fake(pytester, server, "--tb=no")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*robustness report*"])


def test_very_quiet_prints_the_one_line_per_model(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    result = _template(pytester, "-qq")
    result.stdout.fnmatch_lines(["robustexplain: template ρ * PASS*"])
    assert "robustness report" not in result.stdout.str()


def test_capture_off_keeps_the_body_output_and_the_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate().replace("    assert robustness.pairs", "    print('BODY', robustness.kind)"))
    result = _template(pytester, "-s")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*BODY noise_injection*", "*BODY overall*", "*robustness report*"])


def test_durations_lists_gated_items(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    result = _template(pytester, "--durations=0", "-vv")
    result.stdout.fnmatch_lines(["*slowest durations*", "*call*test_gate?*"])


def test_junit_xml_has_one_testcase_per_item_with_its_verdict(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    _template(pytester, "--junitxml=junit.xml").assert_outcomes(passed=3)
    xml = (pytester.path / "junit.xml").read_text(encoding="utf-8")
    assert len(re.findall(r"<testcase ", xml)) == 3
    assert xml.count('name="robustexplain_outcome" value="PASS"') == 3


def test_no_cacheprovider_and_importlib_mode_work(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    _template(pytester, "-p", "no:cacheprovider", "--import-mode=importlib").assert_outcomes(passed=3)


def test_doctest_modules_beside_gated_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate() + '\n\ndef helper():\n    """\n    >>> 1 + 1\n    2\n    """\n')
    _template(pytester, "--doctest-modules").assert_outcomes(passed=4)


def test_fixtures_listing_documents_the_plugin_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    out = pytester.runpytest("--fixtures").stdout.str()
    for name in ("robustness", "explainer", "perturbed_histories"):
        assert re.search(rf"^{name}\b.*\n\s+\S", out, re.M), name


def test_setup_plan_makes_no_model_call(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    result = run_fake(pytester, server, "--setup-plan")
    assert result.ret == 0
    assert server.chat_calls == 0


def test_a_conftest_reordering_items_still_gets_every_verdict(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        def pytest_collection_modifyitems(items):
            items.reverse()
    """)
    pytester.makepyfile(_gate())
    result = _template(pytester, "-v")
    result.assert_outcomes(passed=3)
    ran = [line for line in result.stdout.lines if line.endswith("%]") and "PASSED" in line]
    assert "[overall]" in ran[0] and "[noise_injection]" in ran[-1]  # in the order the conftest chose


# --------------------------------------------------------------------------------- configuration layers
def test_an_ini_override_on_the_command_line_is_honoured(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate(extra=", inconclusive='pass'").replace(", users=6", ""))
    result = _template(pytester, "-o", "robustexplain_users=2", "--robustexplain-json=r.json")
    result.assert_outcomes(passed=3)
    assert len({p["key"]["user_id"] for p in read_report(pytester)["pairs"]}) == 2


@pytest.mark.parametrize("name, text", [
    ("pytest.ini", "[pytest]\nrobustexplain_users = 2\n"),
    ("tox.ini", "[pytest]\nrobustexplain_users = 2\n"),
    ("setup.cfg", "[tool:pytest]\nrobustexplain_users = 2\n"),
    ("pyproject.toml", '[tool.pytest.ini_options]\nrobustexplain_users = "2"\n'),
])
def test_every_pytest_config_file_sets_an_option(pytester: pytest.Pytester, name: str, text: str) -> None:
    (pytester.path / name).write_text(text, encoding="utf-8")
    pytester.makepyfile(_gate(extra=", inconclusive='pass'").replace(", users=6", ""))
    _template(pytester, "--robustexplain-json=r.json").assert_outcomes(passed=3)
    assert len({p["key"]["user_id"] for p in read_report(pytester)["pairs"]}) == 2


def test_addopts_and_pytest_addopts_carry_the_flags(pytester: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\naddopts = --robustexplain-backend=template\n")
    pytester.makepyfile(_gate(extra=", inconclusive='pass'").replace(", users=6", ""))
    monkeypatch.setenv("PYTEST_ADDOPTS", "--robustexplain-users=2 --robustexplain-json=r.json")
    pytester.runpytest().assert_outcomes(passed=3)
    assert len({p["key"]["user_id"] for p in read_report(pytester)["pairs"]}) == 2


def test_strict_config_accepts_the_plugin_ini_keys_and_rejects_a_misspelt_one(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    pytester.makeini("[pytest]\nrobustexplain_users = 2\n")
    _template(pytester, "--strict-config").assert_outcomes(passed=3)
    pytester.makeini("[pytest]\nrobustexplain_user = 2\n")
    result = _template(pytester, "--strict-config")
    assert result.ret != 0
    assert "robustexplain_user" in result.stderr.str() + result.stdout.str()


def test_the_marker_beats_the_command_line_which_beats_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nrobustexplain_users = 4\nrobustexplain_severities = 1\n")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise"], users=2, inconclusive="pass")
        def test_gate(robustness):
            pass
    """)
    result = _template(pytester, "--robustexplain-severities=2,3", "--robustexplain-json=r.json")
    result.assert_outcomes(passed=1)
    pairs = read_report(pytester)["pairs"]
    assert len({p["key"]["user_id"] for p in pairs}) == 2
    assert {p["key"]["severity"] for p in pairs if p["key"]["kind"] == "noise_injection"} == {2, 3}


def test_running_from_a_subdirectory_keeps_the_cache_in_the_rootdir(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    sub = pytester.mkpydir("tests")
    (sub / "test_gate.py").write_text(_gate(), encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(sub)
        pytester.runpytest("--robustexplain-backend=template").assert_outcomes(passed=3)
    assert (pytester.path / ".robustexplain-cache").is_dir()
    assert not (sub / ".robustexplain-cache").exists()


def test_two_sessions_in_one_process_share_no_state(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    first = _template(pytester, "--robustexplain-json=first.json")
    first.assert_outcomes(passed=3)
    pytester.makepyfile(_gate().replace('["noise", "shuffle"]', '["drift"]'))
    second = _template(pytester, "--robustexplain-json=second.json")
    second.assert_outcomes(passed=1)
    kinds = {p["key"]["kind"] for p in read_report(pytester, "second.json")["pairs"]}
    assert "noise_injection" not in kinds and "category_drift" in kinds


def test_gated_tests_skipped_by_a_mark_need_no_server(pytester: pytest.Pytester) -> None:
    # The usual CI pattern: robustness tests skipped where no model is served. Nothing may reach for the
    # (dead) host; a string condition is pytest's to evaluate, at set-up, so that item is still planned.
    pytester.makepyfile("""
        import pytest

        HAVE_GPU = False

        @pytest.mark.skipif(not HAVE_GPU, reason="no GPU here")
        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        def test_gate(robustness):
            pass

        @pytest.mark.xfail(run=False, reason="tracked")
        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        def test_later(robustness):
            pass

        def test_plain():
            pass
    """)
    result = pytester.runpytest("--robustexplain-model=fake-model", "--robustexplain-host=http://127.0.0.1:9",
                                "-rs")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["*no GPU here*"])
    assert "cannot reach" not in result.stdout.str() + result.stderr.str()


def test_runxfail_runs_and_gates_an_xfail_run_false_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_under("xfail(run=False, reason='tracked')"))
    _template(pytester).assert_outcomes(xfailed=3)
    _template(pytester, "--runxfail").assert_outcomes(passed=3)


# ----------------------------------------------------------------------------- markers pytest cannot expand
def test_a_marker_on_a_unittest_method_fails_the_test_instead_of_passing_ungated(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import unittest
        import pytest

        class TestExplanations(unittest.TestCase):
            @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
            def test_gate(self):
                pass
    """)
    result = _template(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*nothing was gated: pytest does not parametrize unittest.TestCase*"])


def test_a_marker_given_through_pytest_param_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        GATE = pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)

        @pytest.mark.parametrize("tone", ["short", pytest.param("long", marks=GATE)])
        def test_tone(tone):
            pass
    """)
    result = _template(pytester, "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_tone?long? FAILED*"])
    result.stdout.fnmatch_lines(["*nothing was gated: the marker reached it after its test function was "
                                 "collected (pytest.param*"])


def test_a_marker_added_by_a_collection_hook_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        def pytest_collection_modifyitems(items):
            for item in items:
                item.add_marker(pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6))
    """)
    pytester.makepyfile("def test_late():\n    pass\n")
    result = _template(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_late: @pytest.mark.robustness is on this test but nothing was gat*"])


# ----------------------------------------------------------------------------- one item by its node id
def test_one_kind_item_by_node_id_calls_only_for_that_kind(pytester: pytest.Pytester,
                                                         server: FakeOllamaServer) -> None:
    pytester.makepyfile(test_gate=_gate())
    result = run_fake(pytester, server, "test_gate.py::test_gate[temporal_shuffle]",
                      "--robustexplain-cache=off", "--robustexplain-json=r.json")
    result.assert_outcomes(passed=1)
    assert {p["key"]["kind"] for p in read_report(pytester)["pairs"]} <= {"temporal_shuffle", "swap"}


def test_the_overall_item_by_node_id_runs_every_kind_it_averages(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=_gate())
    result = _template(pytester, "test_gate.py::test_gate[overall]", "--robustexplain-json=r.json")
    result.assert_outcomes(passed=1)
    kinds = {p["key"]["kind"] for p in read_report(pytester)["pairs"]}
    assert {"noise_injection", "temporal_shuffle"} <= kinds


def test_item_ids_are_the_same_from_one_collection_to_the_next(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    first = _ids(_template(pytester, "--collect-only", "-q"))
    again = _ids(_template(pytester, "--collect-only", "-q", "--robustexplain-seed=9"))
    assert first == again and len(first) == 3


def test_model_and_host_in_pyproject_run_the_gate(pytester: pytest.Pytester,
                                                  server: FakeOllamaServer) -> None:
    (pytester.path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nrobustexplain_model = "fake-model"\n'
        f'robustexplain_host = "{server.url}"\n', encoding="utf-8")
    pytester.makepyfile(_gate())
    pytester.runpytest().assert_outcomes(passed=3)
    assert server.chat_calls > 0


def test_a_pyproject_list_value_is_read_as_the_list(pytester: pytest.Pytester) -> None:
    (pytester.path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nrobustexplain_perturbations = ["noise", "drift"]\n'
        'robustexplain_severities = ["2"]\nrobustexplain_users = "6"\n', encoding="utf-8")
    pytester.makepyfile(test_gate="import pytest\n\n@pytest.mark.robustness\ndef test_gate(robustness):\n"
                                  "    pass\n")
    # pytest 9 warns that a TOML list for a "string"-typed ini key will be refused by pytest 10: the keys
    # are registered as strings, so a list works today but is on notice (the README says so).
    removed_in_10 = getattr(pytest, "PytestRemovedIn10Warning", None)
    with pytest.warns(removed_in_10, match="not a string") if removed_in_10 else contextlib.nullcontext():
        result = _template(pytester, "--collect-only", "-q")
    assert [i.split("::")[1] for i in _ids(result)] == [
        "test_gate[noise_injection]", "test_gate[category_drift]", "test_gate[overall]"]
