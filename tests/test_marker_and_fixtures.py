"""What a test author writes: the marker's keywords (and what a wrong one says, naming the test), the
``robustness`` result, the ``perturbed_histories`` fixture and an ``explainer`` fixture of their own —
each through an inner pytest run, as the author would meet it.
"""

from __future__ import annotations

import pytest
from helpers import marked, read_report

pytest_plugins = ["pytester"]


def _template(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--robustexplain-backend=template", "-p", "no:randomly", *args)


def _marker_error(pytester: pytest.Pytester, keywords: str) -> str:
    """The text of the collection error a marker with these keywords gives (its item never runs)."""
    pytester.makepyfile(marked(keywords))
    result = _template(pytester)
    assert result.ret != 0
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert "::test_gate" in out  # the message names the test
    return out


# --------------------------------------------------------------------------------- the marker's keywords
def test_a_misspelt_perturbation_is_named_with_the_kinds_there_are(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, 'perturbations=["noize"]')
    assert "noize" in out and "noise" in out


def test_users_must_be_a_positive_whole_number(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, 'users="five"')
    assert "users" in out and "five" in out


def test_severities_outside_one_to_five_are_refused(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, "severities=[0, 6]")
    assert "severities" in out


def test_weights_need_one_value_per_metric(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, "weights=[0.5, 0.5]")
    assert "weights" in out


def test_an_unknown_decision_is_refused_with_the_choices(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, 'decision="eventually"')
    assert "eventually" in out and "sequential" in out and "confident" in out


def test_an_unknown_inconclusive_policy_is_refused(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, 'inconclusive="shrug"')
    assert "shrug" in out and "warn" in out


def test_a_per_kind_entry_for_a_kind_the_test_does_not_run_is_refused(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, 'perturbations=["noise"], per_kind={"drift": {"min_combined": 0.4}}')
    assert "per_kind" in out and "drift" in out.lower()


def test_a_per_kind_entry_with_an_unknown_threshold_is_refused(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, 'per_kind={"noise": {"min_combind": 0.4}}')
    assert "min_combind" in out


def test_positional_marker_arguments_are_refused(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, "0.5")
    assert "keyword" in out


def test_a_guard_level_outside_its_choices_is_refused(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, 'guard="maybe"')
    assert "maybe" in out and "fail" in out


def test_a_rate_above_one_is_refused(pytester: pytest.Pytester) -> None:
    out = _marker_error(pytester, "max_copy_rate=1.5")
    assert "max_copy_rate" in out


def test_a_broken_marker_is_a_collection_error_of_its_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_good=marked('perturbations=["noise"], severities=[1], users=6'))
    pytester.makepyfile(test_bad=marked('users="many"'))
    stopped = _template(pytester)  # pytest's rule: a collection error interrupts the session
    stopped.assert_outcomes(errors=1)
    stopped.stdout.fnmatch_lines(["ERROR test_bad.py - *test_bad.py::test_gate*"])
    going_on = _template(pytester, "--continue-on-collection-errors")
    going_on.assert_outcomes(passed=1, errors=1)


# --------------------------------------------------------------------------------- the robustness result
def test_the_result_carries_the_marker_thresholds_and_every_interval(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(marked(
        'perturbations=["noise", "shuffle"], severities=[1, 5], users=6, min_combined=0.4, min_metric=0.2',
        body="""r = robustness
    assert r.model == "template" and r.kind in ("noise_injection", "temporal_shuffle", "overall")
    assert r.thresholds["combined"] == 0.4 and r.thresholds["semantic"] == 0.2
    assert set(r.intervals) == {"combined", "semantic", "keyword", "structural", "length"}
    assert all(0.0 <= i.low <= i.mean <= i.high <= 1.0 for i in r.intervals.values())
    assert r.verdict.outcome == "PASS" and len(r.worst) <= 3
    assert {p.key.kind for p in r.pairs} <= {"noise_injection", "temporal_shuffle"}
    print("PAIRS", r.kind, len(r.pairs))"""))
    result = _template(pytester, "-s")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*PAIRS noise_injection 12*", "*PAIRS overall 24*"])


def test_the_body_sees_the_verdict_before_the_gate_is_enforced(pytester: pytest.Pytester) -> None:
    # An author may assert more than the gate (here: a stricter ρ on one kind); the body runs first and
    # its failure is the item's, with the author's message.
    pytester.makepyfile(marked(
        'perturbations=["noise"], severities=[1, 5], users=6',
        body='assert robustness.intervals["combined"].mean > 0.999, "stricter than the gate"'))
    result = _template(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stricter than the gate*"])


def test_the_worst_pairs_are_the_lowest_scored(pytester: pytest.Pytester) -> None:
    body = """worst = robustness.worst
    rest = [p for p in robustness.pairs if p not in worst]
    assert worst and all(w.combined <= p.combined for w in worst for p in rest)
    assert all(w.original and w.perturbed for w in worst)"""
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1, 5], users=6', body=body))
    _template(pytester).assert_outcomes(passed=1)


def test_perturbed_histories_of_a_marked_test_match_its_pairs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["shuffle"], severities=[2, 4], users=6)
        def test_gate(robustness, perturbed_histories):
            assert {(p.kind, p.severity) for p in perturbed_histories} <= {("temporal_shuffle", 2),
                                                                           ("temporal_shuffle", 4)}
            keys = {(p.key.user_id, p.key.severity) for p in robustness.pairs}
            assert {(p.original.user_id, p.severity) for p in perturbed_histories} == keys
            assert all(p.original.interactions != p.perturbed.interactions for p in perturbed_histories)
    """)
    _template(pytester).assert_outcomes(passed=1)


def test_perturbed_histories_in_an_unmarked_test_make_no_model_call(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        def test_histories(perturbed_histories):
            assert perturbed_histories
            kinds = {p.kind for p in perturbed_histories}
            assert "noise_injection" in kinds and all(p.summary for p in perturbed_histories)
    """)
    result = pytester.runpytest("--robustexplain-model=fake-model", "--robustexplain-host=http://127.0.0.1:9")
    result.assert_outcomes(passed=1)
    assert "robustness report" not in result.stdout.str()


# --------------------------------------------------------------------------------- your own explainer
def test_an_agents_bound_method_is_gated_and_a_bare_object_is_told_the_protocol(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest
        from pytest_robustexplain.explainers.template import compose_explanation

        class Agent:
            calls = 0

            def explain(self, history, item):
                Agent.calls += 1
                return compose_explanation(history, item)

        @pytest.fixture
        def explainer(request):
            agent = Agent()
            return agent if request.config.getoption("--robustexplain-seed") == "1" else agent.explain
    """)
    body = "from conftest import Agent\n    assert Agent.calls >= 6 + 12"
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1, 5], users=6', body=body))
    pytester.runpytest("--robustexplain-backend=callable", "-p", "no:randomly").assert_outcomes(passed=1)
    bare = pytester.runpytest("--robustexplain-backend=callable", "--robustexplain-seed=1")
    bare.assert_outcomes(errors=1)
    bare.stdout.fnmatch_lines(["*cannot use Agent as an explainer*callable fn(history, item) -> str*"])


def test_an_async_explainer_is_awaited(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest
        from pytest_robustexplain.explainers.template import compose_explanation

        async def explain(history, item):
            return compose_explanation(history, item)

        @pytest.fixture
        def explainer():
            return explain
    """)
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1, 5], users=6'))
    pytester.runpytest("--robustexplain-backend=callable").assert_outcomes(passed=1)


def test_an_explainer_that_raises_on_every_call_is_an_error_not_a_verdict(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def explainer():
            def explain(history, item):
                raise ConnectionError("agent service down")
            return explain
    """)
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1], users=6'))
    result = pytester.runpytest("--robustexplain-backend=callable")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert "agent service down" in out and "INTERNALERROR" not in out


def test_an_explainer_returning_no_text_is_named(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def explainer():
            return lambda history, item: None
    """)
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1], users=6'))
    result = pytester.runpytest("--robustexplain-backend=callable")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*every model call failed*returned NoneType, expected str*"])


def test_an_explainer_fixture_in_one_directory_gates_only_that_directory(pytester: pytest.Pytester) -> None:
    agent = pytester.mkpydir("agent")
    (agent / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef explainer():\n"
        "    return lambda history, item: 'Because you liked ' + item.title + '.'\n", encoding="utf-8")
    (agent / "test_agent.py").write_text(marked('perturbations=["noise"], severities=[1], users=6',
                                                 body='assert robustness.model != "template"'),
                                         encoding="utf-8")
    pytester.makepyfile(test_builtin=marked('perturbations=["noise"], severities=[1], users=6',
                                             body='assert robustness.model == "template"'))
    result = _template(pytester, "--robustexplain-json=r.json")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2  # the agent's text may be gated out
    models = {g["model"] for g in read_report(pytester)["gates"]}
    assert "template" in models and len(models) == 2


# --------------------------------------------------------------------------------- reports under pytest
def test_report_paths_are_relative_to_the_rootdir_and_a_missing_directory_is_made(
        pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1], users=6'))
    sub = pytester.mkdir("sub")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(sub)
        result = pytester.runpytest(str(pytester.path), "--robustexplain-backend=template",
                                    "--robustexplain-json=out/r.json", "--robustexplain-markdown=out/r.md")
    result.assert_outcomes(passed=1)
    written = [p for p in pytester.path.rglob("r.json")]
    assert len(written) == 1 and (written[0].parent / "r.md").is_file()


def test_a_report_that_cannot_be_written_is_said_and_the_verdict_stands(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1], users=6'))
    (pytester.path / "blocked").write_text("a file, not a directory", encoding="utf-8")
    result = _template(pytester, "--robustexplain-json=blocked/r.json")
    result.assert_outcomes(passed=1)
    assert "blocked/r.json" in result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str()


def test_no_report_file_when_no_test_ismarked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = _template(pytester, "--robustexplain-json=r.json", "--robustexplain-html=r.html")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "r.json").exists() and not (pytester.path / "r.html").exists()


def test_junit_properties_survive_xunit1_and_a_prefix(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\njunit_family = xunit1\n")
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1], users=6'))
    _template(pytester, "--junitxml=j.xml", "--junit-prefix=robust").assert_outcomes(passed=1)
    xml = (pytester.path / "j.xml").read_text(encoding="utf-8")
    assert 'classname="robust.' in xml and 'name="robustexplain_outcome" value="PASS"' in xml


# --------------------------------------------------------------------------------- the explainer fixture
def test_an_unmarked_test_calls_the_configured_explainer_directly(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from pytest_robustexplain.data import default_dataset

        def test_explain_one(explainer):
            case = default_dataset().cases[0]
            text = explainer(case.history, case.item)
            assert isinstance(text, str) and case.item.title in text
    """)
    pytester.runpytest("--robustexplain-backend=template").assert_outcomes(passed=1)


def test_the_explainer_fixture_without_a_model_skips_with_how_to_configure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_explain(explainer):\n    pass\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no model configured*"])


def test_the_explainer_fixture_under_require_model_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_explain(explainer):\n    pass\n")
    result = pytester.runpytest("--robustexplain-require-model")
    assert result.ret != pytest.ExitCode.OK
    assert "no model configured" in result.stdout.str() + result.stderr.str()


def test_a_users_fixture_may_build_on_robustness(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def rho(robustness):
            return robustness.intervals["combined"].mean
    """)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise"], severities=[1, 5], users=6)
        def test_gate(rho):
            assert 0.0 < rho <= 1.0
    """)
    pytester.runpytest("--robustexplain-backend=template").assert_outcomes(passed=1)


# --------------------------------------------------------------------------------- models and warnings
def test_keyword_selection_by_model_calls_only_that_model(pytester: pytest.Pytester) -> None:
    from pytest_robustexplain.testing import FakeOllamaServer

    pytester.makepyfile(marked('perturbations=["noise"], severities=[1, 5], users=6'))
    with FakeOllamaServer(models=("a-model:latest", "b-model:latest")) as server:
        result = pytester.runpytest("--robustexplain-model=a-model,b-model",
                                    f"--robustexplain-host={server.url}", "-k", "b-model",
                                    "--robustexplain-cache=off")
        result.assert_outcomes(passed=1, deselected=1)
        assert {r["model"] for r in server.requests if r["prompt"]} == {"b-model:latest"}


def test_an_inconclusive_gate_under_warn_passes_with_a_warning_that_w_error_turns_into_a_failure(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1], users=2, inconclusive="warn"'))
    warned = pytester.runpytest("--robustexplain-backend=template", "-rw")
    warned.assert_outcomes(passed=1, warnings=1)
    warned.stdout.fnmatch_lines(["*RobustExplainWarning*INCONCLUSIVE*"])
    strict = pytester.runpytest("--robustexplain-backend=template",
                                "-W", "error::pytest_robustexplain.errors.RobustExplainWarning")
    strict.assert_outcomes(failed=1)


def test_one_user_is_inconclusive_and_says_how_many_would_decide(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1, 5], users=1'))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=r.json")
    result.assert_outcomes(failed=1)  # the default policy: an undecided gate fails
    verdict = read_report(pytester)["gates"][0]["verdict"]
    assert verdict["outcome"] == "INCONCLUSIVE" and verdict["users_needed"] > 1


# --------------------------------------------------------------------------------- the forms a keyword takes
def _kinds_and_severities(pytester: pytest.Pytester) -> tuple[set[str], set[int]]:
    pairs = [p for p in read_report(pytester)["pairs"] if p["key"]["kind"] != "swap"]  # not the guard's
    return {p["key"]["kind"] for p in pairs}, {p["key"]["severity"] for p in pairs}


def test_aliases_and_a_single_kind_as_a_string_are_accepted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(marked('perturbations="drift", severities=[2], users=6, inconclusive="pass"'))
    _template(pytester, "--robustexplain-json=r.json").assert_outcomes(passed=1)
    assert _kinds_and_severities(pytester) == ({"category_drift"}, {2})


def test_per_kind_accepts_an_alias_and_min_metric_a_dict_per_metric(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(marked('perturbations=["noise", "shuffle"], severities=[1, 5], users=6, '
                               'min_metric={"keyword": 0.999}, per_kind={"noise": {"min_metric": 0.0}}'))
    result = _template(pytester, "-v")
    result.stdout.fnmatch_lines(["*test_gate?noise_injection? PASSED*",
                                 "*test_gate?temporal_shuffle? FAILED*"])


def test_users_all_runs_every_case(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1], users="all"'))
    _template(pytester, "--robustexplain-json=r.json").assert_outcomes(passed=1)
    assert len({p["key"]["user_id"] for p in read_report(pytester)["pairs"]}) == 20  # the bundled cases


def test_the_items_follow_the_markers_kind_order(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(marked('perturbations=["missing", "noise", "drift"], severities=[1], users=6'))
    result = _template(pytester, "--collect-only", "-q")
    ids = [line.split("[", 1)[1].rstrip("]") for line in result.stdout.lines if "::test_gate[" in line]
    assert ids == ["missing_values", "noise_injection", "category_drift", "overall"]


def test_the_dry_run_under_pytest_prices_each_item_and_skips_it_saying_so(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=marked('perturbations=["noise", "shuffle"], severities=[1, 5], users=6'))
    result = _template(pytester, "--robustexplain-dry-run", "-rs")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["robustexplain: dry run — no model is called: 3 gated items, at most * "
                                 "model calls in all*",
                                 "robustexplain:   test_gate.py::test_gate[[]overall[]] (template):*24 "
                                 "pairs "
                                 "planned*"])


def test_the_dry_run_says_a_custom_explainer_is_planned_when_it_runs(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def explainer():
            return lambda history, item: "Because."
    """)
    pytester.makepyfile(marked('perturbations=["noise"], severities=[1], users=6'))
    result = pytester.runpytest("--robustexplain-backend=callable", "--robustexplain-dry-run")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*own `explainer` fixture*planned when each runs*"])


def test_a_bad_data_row_with_an_overridden_explainer_is_one_usage_error(pytester: pytest.Pytester) -> None:
    """Before (issue 43): no model and the README's `explainer` override, a row with rating=great printed a
    traceback through the plugin per item (250 lines for six); the model path said one line. Now both do.
    An xdist worker reads the data when an item runs, where a usage error would end xdist's session as an
    INTERNALERROR: there the item fails with the one line, its worker stops and the session with it."""
    pytester.makeconftest("""
import pytest

@pytest.fixture
def explainer():
    return lambda history, item: f"{item.title} fits your taste."
""")
    pytester.makepyfile(test_gate="""
import pytest

@pytest.mark.robustness(perturbations=["noise_injection", "temporal_shuffle"], severities=[1, 2])
def test_gate(robustness):
    pass
""")
    (pytester.path / "bad.csv").write_text("user_id,item_id,rating,category,timestamp\n"
                                           "u1,i1,great,Books,1700000000\nu1,i2,4,Books,1700000100\n",
                                           encoding="utf-8")
    (pytester.path / "catalog.csv").write_text("item_id,title,category\ni1,Dune,Books\ni2,Hyperion,Books\n",
                                               encoding="utf-8")
    result = pytester.runpytest("--robustexplain-histories=bad.csv", "--robustexplain-catalog=catalog.csv",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = [line for line in result.stderr.lines + result.stdout.lines if "field 'rating'" in line]
    assert len(said) == 1 and said[0].startswith("ERROR: robustexplain: ")
    assert "not a number: 'great'" in said[0]
    assert "Traceback" not in result.stdout.str() and "runner.py" not in result.stdout.str()
    xdist = pytester.runpytest("--robustexplain-histories=bad.csv", "--robustexplain-catalog=catalog.csv",
                               "-p", "no:cacheprovider", "-n", "2")
    out = xdist.stdout.str()
    assert xdist.ret == pytest.ExitCode.USAGE_ERROR, out  # as serially (xdist itself says "interrupted")
    messages = [line for line in xdist.stdout.lines
                if line.startswith("robustexplain: ") and "'great'" in line]
    assert 1 <= len(messages) <= 2, out  # each worker's first item at most: then it stops
    assert "Interrupted: robustexplain: " in out and "not a number: 'great'" in out
    assert "Traceback" not in out and "runner.py" not in out and "plugin.py" not in out
    assert "partial report" not in out and "to resume" not in out  # nothing ran: nothing to save or resume
