"""Each command-line option does under pytest what its help says: what reaches the server, which pairs are
planned, which data are read, which files are written — observed through the fake server's request log
and the JSON report of an inner run.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import marked, read_report, run_fake

from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

SAMPLES = Path(__file__).resolve().parent / "data_samples"

def _gate(extra: str = ", users=6") -> str:
    return marked(f'perturbations=["noise"], severities=[1, 5]{extra}')


def _pairs(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    pairs: list[dict[str, Any]] = read_report(pytester)["pairs"]
    return pairs


def _fake(pytester: pytest.Pytester, server: FakeOllamaServer, *args: str) -> pytest.RunResult:
    return run_fake(pytester, server, "--robustexplain-json=r.json", "--robustexplain-cache=off", *args)


def _template(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=r.json", *args)


# --------------------------------------------------------------------------------- what reaches the server
def test_generation_options_reach_every_request(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    # Eight users: at temperature 0.3 the fake's S (0.17 above a noise floor of 0.94) needs seven for the
    # guard's distribution-free bound to show that the explanations depend on the user.
    pytester.makepyfile(_gate(", users=8"))
    _fake(pytester, server, "--robustexplain-temperature=0.3", "--robustexplain-num-predict=200",
          "--robustexplain-seed=7").assert_outcomes(passed=1)
    options = [r["options"] for r in server.requests]
    assert all(o["temperature"] == 0.3 for o in options)
    explanations = [o for o in options if o["num_predict"] == 200]
    assert len(explanations) == len(options) - 1  # and one short warm-up that loads the model
    assert sum(o["seed"] == 7 for o in explanations) >= 6 + 12  # the originals and perturbed histories


def test_the_model_named_is_the_model_asked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    with FakeOllamaServer(models=("small:1b", "big:70b")) as server:
        run_fake(pytester, server, model="small:1b").assert_outcomes(passed=1)
        assert {r["model"] for r in server.requests} == {"small:1b"}


def test_a_prompt_template_file_shapes_every_prompt(pytester: pytest.Pytester,
                                                    server: FakeOllamaServer) -> None:
    (pytester.path / "prompt.txt").write_text(
        "HOUSE STYLE. The user did: {history}\nWhy would they like {item}? ({features})\n", encoding="utf-8")
    pytester.makepyfile(_gate())
    _fake(pytester, server, "--robustexplain-prompt=prompt.txt").assert_outcomes(passed=1)
    prompts = [r["prompt"] for r in server.requests if r["prompt"]]
    assert prompts and all(p.startswith("HOUSE STYLE. The user did: ") for p in prompts)


def test_concurrency_bounds_the_calls_in_flight(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    server.latency = 0.02  # calls overlap, so the bound is what holds them back
    pytester.makepyfile(_gate())
    _fake(pytester, server, "--robustexplain-concurrency=2").assert_outcomes(passed=1)
    assert 1 <= server.peak_in_flight <= 2


def test_retries_carry_a_run_through_transient_errors(pytester: pytest.Pytester,
                                                      server: FakeOllamaServer) -> None:
    server.fail_next(3, status=503)
    pytester.makepyfile(_gate())
    result = _fake(pytester, server, "--robustexplain-retries=4")
    result.assert_outcomes(passed=1)
    assert read_report(pytester)["calls"]["failed"] == 0


# --------------------------------------------------------------------------------- which pairs are planned
def test_the_seed_draws_the_perturbations_and_the_same_seed_the_same_ones(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate(extra=", users=4, inconclusive='pass'"))

    def perturbations(seed: str) -> list[Any]:
        result = _template(pytester, f"--robustexplain-seed={seed}", "--robustexplain-cache=off")
        result.assert_outcomes(passed=1)
        return [(p["key"]["user_id"], p["key"]["severity"], p["changes"]) for p in _pairs(pytester)]

    first, again, other = perturbations("1"), perturbations("1"), perturbations("2")
    assert first == again and first != other


def test_repeats_multiply_the_pairs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    _template(pytester, "--robustexplain-repeats=2").assert_outcomes(passed=1)
    keys = [p["key"] for p in _pairs(pytester) if p["key"]["kind"] == "noise_injection"]
    assert {k["repeat"] for k in keys} == {0, 1} and len(keys) == 6 * 2 * 2


def test_the_balanced_design_runs_one_severity_per_case(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate(extra=", users=6, severities=[1, 2, 3, 4, 5], inconclusive='pass'")
                        .replace("severities=[1, 5], ", ""))
    _template(pytester, "--robustexplain-design=balanced").assert_outcomes(passed=1)
    keys = [p["key"] for p in _pairs(pytester) if p["key"]["kind"] == "noise_injection"]
    assert len(keys) == 6 and len({k["user_id"] for k in keys}) == 6
    assert len({k["severity"] for k in keys}) == 5  # rotated over the cases


def test_the_command_line_decision_applies_where_the_marker_is_silent(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6)
        def test_silent(robustness):
            assert robustness.verdict.mode == "confident"

        @pytest.mark.robustness(perturbations=["noise"], severities=[1], users=6, decision="mean")
        def test_own(robustness):
            assert robustness.verdict.mode == "mean"
    """)
    result = _template(pytester, "--robustexplain-decision=confident", "--robustexplain-inconclusive=pass")
    result.assert_outcomes(passed=2)


def test_the_noise_floor_option_adds_its_controls(pytester: pytest.Pytester,
                                                  server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    _fake(pytester, server, "--robustexplain-noise-floor=on", "--robustexplain-temperature=0.7"
          ).assert_outcomes(passed=1)
    assert sum(p["key"]["kind"] == "control" for p in _pairs(pytester)) == 6


def test_zero_users_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate(extra=""))
    result = _template(pytester, "--robustexplain-users=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--robustexplain-users=0" in result.stderr.str()


# --------------------------------------------------------------------------------- which data are read
@pytest.mark.parametrize("ext", ["json", "jsonl", "yaml"])
def test_histories_and_catalog_files_in_every_format(pytester: pytest.Pytester, ext: str) -> None:
    for name in ("histories", "catalog"):
        shutil.copy(SAMPLES / f"{name}.{ext}", pytester.path / f"{name}.{ext}")
    pytester.makepyfile(_gate(extra=", users=2, inconclusive='pass'"))
    result = _template(pytester, f"--robustexplain-histories=histories.{ext}",
                       f"--robustexplain-catalog=catalog.{ext}")
    result.assert_outcomes(passed=1)
    users = {p["key"]["user_id"] for p in _pairs(pytester)}
    assert users and users <= {"alice", "bob", "carol", "dave", "erin"}


def test_a_cases_file_fixes_who_is_asked_about_what(pytester: pytest.Pytester) -> None:
    for name in ("histories.json", "catalog.json", "cases.json"):
        shutil.copy(SAMPLES / name, pytester.path / name)
    pytester.makepyfile(_gate(extra=", inconclusive='pass'"))
    _template(pytester, "--robustexplain-histories=histories.json", "--robustexplain-catalog=catalog.json",
              "--robustexplain-cases=cases.json").assert_outcomes(passed=1)
    asked = {(p["key"]["user_id"], p["key"]["item_id"]) for p in _pairs(pytester)}
    assert ("alice", "E4") in asked and ("bob", "B3") in asked


COLUMNS = "user_id=userId,item_id=itemId,category=genre,timestamp=time,rating=stars"


@pytest.mark.parametrize("source", ["flag", "ini", "env", "yaml"])
def test_your_own_csv_columns_from_every_settings_source(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    """The CSV files' own column names (userId, itemId, genre, time, stars) mapped from the command line, the
    ini file, the environment or robustexplain.yaml alike (issue 62: once only from Python)."""
    for name in ("histories.csv", "catalog.csv", "cases.csv"):
        shutil.copy(SAMPLES / name, pytester.path / name)
    pytester.makepyfile(_gate(extra=", inconclusive='pass'"))
    files = ("--robustexplain-histories=histories.csv", "--robustexplain-catalog=catalog.csv",
             "--robustexplain-cases=cases.csv")
    given: tuple[str, ...] = ()
    if source == "flag":
        given = (f"--robustexplain-columns={COLUMNS}",)
    elif source == "ini":
        pytester.makeini(f"[pytest]\nrobustexplain_columns = {COLUMNS}\n")
    elif source == "env":
        monkeypatch.setenv("ROBUSTEXPLAIN_COLUMNS", COLUMNS)
    else:
        mapping = "".join(f"  {pair.replace('=', ': ')}\n" for pair in COLUMNS.split(","))
        (pytester.path / "robustexplain.yaml").write_text(f"columns:\n{mapping}", encoding="utf-8")
    _template(pytester, *files, *given).assert_outcomes(passed=1)
    asked = {(p["key"]["user_id"], p["key"]["item_id"]) for p in _pairs(pytester)}
    assert asked >= {("alice", "E4"), ("bob", "B3")}
    result = _template(pytester, *files, "--robustexplain-columns=colour=c")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--robustexplain-columns: unknown field 'colour'" in result.stderr.str()


def test_a_histories_file_without_a_catalog_says_so(pytester: pytest.Pytester) -> None:
    shutil.copy(SAMPLES / "histories.json", pytester.path / "histories.json")
    pytester.makepyfile(_gate())
    result = _template(pytester, "--robustexplain-histories=histories.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "needs a catalog file too" in result.stderr.str()


def test_max_history_cuts_what_the_model_is_shown(pytester: pytest.Pytester,
                                                  server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    _fake(pytester, server).assert_outcomes(passed=1)
    full = max(len(r["prompt"]) for r in server.requests if r["prompt"])
    server.reset_stats()
    _fake(pytester, server, "--robustexplain-max-history=5").assert_outcomes(passed=1)
    cut = max(len(r["prompt"]) for r in server.requests if r["prompt"])
    assert cut < full / 2


# --------------------------------------------------------------------------------- which files are written
def test_save_baseline_then_compare_under_pytest(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    _fake(pytester, server, "--robustexplain-save-baseline=base.json").assert_outcomes(passed=1)
    assert (pytester.path / "base.json").is_file()
    _fake(pytester, server, "--robustexplain-baseline=base.json").assert_outcomes(passed=1)
    server.mode = "fragile"
    worse = _fake(pytester, server, "--robustexplain-baseline=base.json", "--robustexplain-min-combined=0.0",
                  "--robustexplain-min-metric=0.0", "--robustexplain-guard=off")
    worse.assert_outcomes(failed=1)
    worse.stdout.fnmatch_lines(["*Regression against baseline*"])


def test_a_missing_baseline_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    result = _template(pytester, "--robustexplain-baseline=nowhere.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "nowhere.json" in result.stderr.str()


def test_html_and_markdown_reports_name_every_gated_item(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=_gate().replace('["noise"]', '["noise", "shuffle"]'))
    result = _template(pytester, "--robustexplain-html=r.html", "--robustexplain-markdown=r.md")
    result.assert_outcomes(passed=3)
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    markdown = (pytester.path / "r.md").read_text(encoding="utf-8")
    for kind, escaped in (("noise_injection", r"noise\\_injection"),
                          ("temporal_shuffle", r"temporal\\_shuffle")):
        assert kind in page
        assert re.search(rf"^\| {escaped} \| .* \| PASS \|$", markdown, re.M), kind  # Markdown escapes "_"
    assert page.lstrip().lower().startswith("<!doctype html>")


# ------------------------------------------------------------------------- the run's defaults, a bare marker
BARE = "import pytest\n\n@pytest.mark.robustness\ndef test_gate(robustness):\n    pass\n"


def test_a_bare_marker_takes_kinds_severities_and_users_from_the_command_line(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=BARE)
    result = _template(pytester, "--robustexplain-perturbations=noise,drift",
                       "--robustexplain-severities=3", "--robustexplain-users=6", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_gate?noise_injection? PASSED*", "*test_gate?category_drift? PASSED*",
                                 "*test_gate?overall? PASSED*"])
    keys = [p["key"] for p in _pairs(pytester) if p["key"]["kind"] in ("noise_injection", "category_drift")]
    assert {k["severity"] for k in keys} == {3} and len({k["user_id"] for k in keys}) == 6


def test_a_command_line_threshold_gates_a_bare_marker_and_the_marker_beats_it(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bare=marked('perturbations=["noise"], users=6'),
                        test_own=marked('perturbations=["noise"], users=6, min_combined=0.3'))
    result = _template(pytester, "--robustexplain-min-combined=0.99", "-v")
    result.stdout.fnmatch_lines(["*test_bare.py::test_gate?noise_injection? FAILED*"])
    result.stdout.fnmatch_lines(["*test_own.py::test_gate?noise_injection? PASSED*"])


def test_per_kind_thresholds_from_the_command_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gate=marked('perturbations=["noise", "shuffle"], severities=[1, 5], users=6'))
    result = _template(pytester, "--robustexplain-per-kind=shuffle.min_combined=0.999", "-v")
    result.stdout.fnmatch_lines(["*test_gate?noise_injection? PASSED*",
                                 "*test_gate?temporal_shuffle? FAILED*"])


def test_weights_from_the_command_line_make_rho_the_semantic_score(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    _template(pytester, "--robustexplain-weights=1,0,0,0").assert_outcomes(passed=1)
    assert all(p["combined"] == pytest.approx(p["semantic"]) for p in _pairs(pytester))


def test_alpha_sets_the_intervals_the_verdict_speaks_of(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    _template(pytester, "--robustexplain-alpha=0.01").assert_outcomes(passed=1)
    assert "99 % intervals" in read_report(pytester)["gates"][0]["verdict"]["message"]


def test_num_ctx_reaches_the_server(pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    _fake(pytester, server, "--robustexplain-num-ctx=8192").assert_outcomes(passed=1)
    assert {r["options"]["num_ctx"] for r in server.requests} == {8192}


def test_an_embedding_model_adds_the_fifth_metric(pytester: pytest.Pytester,
                                                  server: FakeOllamaServer) -> None:
    pytester.makepyfile(_gate())
    _fake(pytester, server, "--robustexplain-embed-model=fake-model").assert_outcomes(passed=1)
    assert server.embedded_texts > 0
    assert all(p.get("embedding") is not None for p in _pairs(pytester))


def test_the_openai_backend_sends_the_key_from_the_variable_it_is_told(
        pytester: pytest.Pytester, server: FakeOllamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_LLM_KEY", "sk-test-123")
    pytester.makepyfile(_gate())
    result = pytester.runpytest("--robustexplain-backend=openai", f"--robustexplain-host={server.url}/v1",
                                "--robustexplain-model=fake-model",
                                "--robustexplain-api-key-env=TEAM_LLM_KEY")
    result.assert_outcomes(passed=1)
    chats = [r for r in server.requests if r["prompt"]]
    assert chats and all(r["path"].startswith("/v1/") for r in chats)
    assert {r["authorization"] for r in chats} == {"Bearer sk-test-123"}


def test_a_call_that_hangs_past_the_timeout_is_retried(pytester: pytest.Pytester,
                                                       server: FakeOllamaServer) -> None:
    server.hang_next(1, seconds=30)
    pytester.makepyfile(_gate())
    result = _fake(pytester, server, "--robustexplain-timeout=1", "--robustexplain-retries=2")
    result.assert_outcomes(passed=1)
    assert read_report(pytester)["calls"]["failed"] == 0


def test_the_cache_dir_option_moves_the_cache(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    pytester.runpytest("--robustexplain-backend=template", "--robustexplain-cache-dir=shared/cache"
                       ).assert_outcomes(passed=1)
    assert (pytester.path / "shared" / "cache").is_dir()
    assert not (pytester.path / ".robustexplain-cache").exists()


def test_max_users_bounds_a_sequential_decision(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate(extra=", users=12, decision='sequential', inconclusive='pass'"))
    _template(pytester, "--robustexplain-max-users=4").assert_outcomes(passed=1)
    assert len({p["key"]["user_id"] for p in _pairs(pytester)}) <= 4


def test_a_copying_model_fails_the_copy_gate_set_on_the_command_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    with FakeOllamaServer(mode="copycat") as server:
        result = _fake(pytester, server, "--robustexplain-max-copy-rate=0.1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Copy FAIL*"])


def test_judge_all_judges_the_perturbed_explanations_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_gate())
    with FakeOllamaServer(mode="stable") as server:
        _fake(pytester, server, "--robustexplain-judge-model=fake-model").assert_outcomes(passed=1)
        originals_only = server.judge_calls
        server.reset_stats()
        _fake(pytester, server, "--robustexplain-judge-model=fake-model", "--robustexplain-judge=all"
              ).assert_outcomes(passed=1)
        assert server.judge_calls > originals_only == 12  # 6 originals, each also with the history reversed
