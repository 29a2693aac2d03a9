"""The user's own metrics (``metrics/user.py``): registered by a conftest or the process, measured once per
distinct pair and cached on disk, reported in every writer, gated by name, in ρ only with a weight, checked
against a baseline and in ``compare``; identical serially and under ``-n 2``; and metrics written to break
the gate (values out of range, a raising function, a batch of the wrong length, a name one typo from a
built-in)."""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import marked, read_report, run_fake

from pytest_robustexplain.checks import DEFAULT_CHECKS, CheckRegistry
from pytest_robustexplain.errors import ConfigError
from pytest_robustexplain.metrics import Scorer, check_user_weights, weight_items
from pytest_robustexplain.metrics.user import MetricMeasure, make_metric, split_signature, tags_signature
from pytest_robustexplain.results import FAIL, METRICS, PairKey, PairResult, run_from_dict
from pytest_robustexplain.score_cache import MetricValueCache
from pytest_robustexplain.store import DB_NAME
from pytest_robustexplain.sweep import reweighted
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "custom_metric"


def _pair(original: str, perturbed: str, *, user: str = "u1", failure: str | None = None) -> PairResult:
    return PairResult(PairKey("m", user, "i1", "noise_injection", 1, 0), 0.5, 0.5, 0.5, 0.5, 0.5,
                      original, perturbed, failure=failure)


# ------------------------------------------------------------------------------ registration
@pytest.mark.parametrize(("kwargs", "said"), [
    ({"name": "Chars 3", "fn": len, "version": "1"}, "lower-case letters"),
    ({"name": "combined", "fn": len, "version": "1"}, "taken by a built-in quantity"),
    ({"name": "semantik", "fn": len, "version": "1"}, "one typo away from a built-in metric"),
    ({"name": "chars3", "version": "1"}, "give a function"),
    ({"name": "chars3", "fn": "not callable", "version": "1"}, "must be callable"),
    ({"name": "chars3", "fn": len}, "give version="),
    ({"name": "chars3", "fn": len, "version": "1|2"}, "give version="),
    ({"name": "chars3", "fn": len, "version": "1\n::error::x"}, "give version="),
    ({"name": "chars3", "fn": len, "version": "1,2"}, "give version="),
    ({"name": "chars3", "fn": len, "version": "v@2"}, "give version="),
])
def test_a_metric_registration_is_refused_in_one_sentence(kwargs: dict[str, object], said: str) -> None:
    name = kwargs.pop("name")
    with pytest.raises(ConfigError, match=said):
        make_metric(name, **kwargs)  # type: ignore[arg-type]


def test_a_registry_holds_metrics_over_the_process_ones_and_refuses_a_second_of_a_name() -> None:
    registry = CheckRegistry(base=DEFAULT_CHECKS)
    registry.register_metric("chars3", lambda a, b: 1.0, version="1")
    assert [m.tag for m in registry.metrics() if not m.builtin] == ["chars3@1"]
    # A conftest's registry never leaks into the process's.
    assert all(m.builtin for m in DEFAULT_CHECKS.metrics())
    with pytest.raises(ConfigError, match="registered already"):
        registry.register_metric("chars3", lambda a, b: 1.0, version="2")


def test_the_papers_four_are_in_the_registry_and_measure_as_the_scorer_does() -> None:
    """Issue 59: the built-in metrics are entries of the users' registry, first, each a Metric."""
    builtins = {m.name: m for m in DEFAULT_CHECKS.metrics() if m.builtin}
    assert set(builtins) == set(METRICS) and all(m.description for m in builtins.values())
    pairs = [("We recommend Heat for its tense crime story.", "Heat: a tense crime story you will like."),
             ("A quiet drama.", "")]
    scorer = Scorer()
    for name, metric in builtins.items():
        assert metric.evaluate(pairs) == [getattr(scorer, name)(e, e_prime) for e, e_prime in pairs]


def test_the_signature_lists_each_metric_version_and_splits_back() -> None:
    assert tags_signature([]) == ""
    part = tags_signature(["b@2", "a@1", "a@1"])
    assert part == "|user:a@1,b@2"
    assert split_signature("tok:x|v:0.1.0" + part) == ("tok:x|v:0.1.0", {"a": "1", "b": "2"})


# ------------------------------------------------------------------------------ measuring
def test_each_distinct_pair_is_measured_once_and_failed_pairs_score_zero() -> None:
    seen: list[tuple[str, str]] = []

    def overlap(a: str, b: str) -> float:
        seen.append((a, b))
        return len(set(a) & set(b)) / len(set(a) | set(b))

    metric = make_metric("chars", overlap, version="1")
    measure = MetricMeasure()
    pairs = [_pair("abc", "abd"), _pair("abc", "abd", user="u2"), _pair("abc", "", failure="empty")]
    out = measure.measure(pairs, [metric])
    assert [p.user_metrics["chars"] for p in out] == [0.5, 0.5, 0.0]
    assert seen == [("abc", "abd")] and measure.evaluations == 1  # the failed pair is never asked about
    measure.measure(pairs, [metric])
    assert measure.evaluations == 1  # from memory
    assert out[0].metric("chars") == 0.5
    with pytest.raises(KeyError, match="has no metric 'other'"):
        out[0].metric("other")


def test_the_batch_form_gets_every_pair_a_call_needs_at_once() -> None:
    batches: list[int] = []

    def batch(pairs: list[tuple[str, str]]) -> list[float]:
        batches.append(len(pairs))
        return [1.0 if a == b else 0.0 for a, b in pairs]

    metric = make_metric("same", batch=batch, version="1")
    out = MetricMeasure().measure([_pair("a", "a"), _pair("a", "b"), _pair("c", "c")], [metric])
    assert [p.user_metrics["same"] for p in out] == [1.0, 0.0, 1.0] and batches == [3]


@pytest.mark.parametrize(("fn", "said"), [
    (lambda a, b: 1.5, "returned 1.5; a metric's value must be a number in \\[0, 1\\]"),
    (lambda a, b: -0.1, "returned -0.1"),
    (lambda a, b: math.nan, "returned nan"),
    (lambda a, b: True, "returned True"),
    (lambda a, b: "0.5", "returned '0.5'"),
    (lambda a, b: a.nonexistent(), "metric 'hostile' raised AttributeError"),
])
def test_a_metric_that_misbehaves_is_one_sentence_naming_it(fn: object, said: str) -> None:
    metric = make_metric("hostile", fn, version="1")
    with pytest.raises(ConfigError, match=said):
        MetricMeasure().measure([_pair("a", "b")], [metric])


def test_a_batch_of_the_wrong_length_is_refused() -> None:
    metric = make_metric("short", batch=lambda pairs: [0.5], version="1")
    with pytest.raises(ConfigError, match="returned 1 values for 2 pairs"):
        MetricMeasure().measure([_pair("a", "b"), _pair("c", "d")], [metric])


def test_values_are_cached_per_version_and_an_unreadable_one_is_measured_again(tmp_path: Path) -> None:
    calls: list[str] = []

    def fn(a: str, b: str) -> float:
        calls.append(a)
        return 0.25

    v1 = make_metric("quarter", fn, version="1")
    MetricMeasure(MetricValueCache(tmp_path)).measure([_pair("x", "y")], [v1])
    warm = MetricMeasure(MetricValueCache(tmp_path))
    assert warm.measure([_pair("x", "y")], [v1])[0].user_metrics == {"quarter": 0.25}
    assert warm.evaluations == 0 and len(calls) == 1
    v2 = make_metric("quarter", fn, version="2")  # a new version is another metric: measured again
    MetricMeasure(MetricValueCache(tmp_path)).measure([_pair("x", "y")], [v2])
    assert len(calls) == 2
    with contextlib.closing(sqlite3.connect(tmp_path / DB_NAME)) as db, db:  # one value out of range
        db.execute("UPDATE kept SET value = '{\"value\": 7}' WHERE kind = 'value' AND "
                   "key = (SELECT min(key) FROM kept WHERE kind = 'value')")
    with pytest.warns(Warning, match="cannot be read"):
        MetricMeasure(MetricValueCache(tmp_path)).measure([_pair("x", "y")], [v1, v2])
    assert len(calls) == 3  # only the broken one's pair again
    read_only = MetricMeasure(MetricValueCache(tmp_path, "off"))
    read_only.measure([_pair("x", "y")], [v1])
    assert read_only.evaluations == 1


# ------------------------------------------------------------------------------ weights
def test_a_tests_weights_give_a_user_metric_its_share_of_rho() -> None:
    weights = check_user_weights({"semantic": 0.2, "keyword": 0.2, "structural": 0.2, "length": 0.2,
                                  "chars3": 0.2})
    assert dict(weight_items(weights)) == {"semantic": 0.2, "keyword": 0.2, "structural": 0.2,
                                           "length": 0.2, "chars3": 0.2}
    pair = PairResult(PairKey("m", "u", "i", "noise_injection", 1, 0), 1.0, 1.0, 1.0, 1.0, 1.0, "a", "b",
                      user_metrics={"chars3": 0.0})
    assert reweighted(pair, weights).combined == pytest.approx(0.8)
    # A share of 0 is no share: the paper's four weights, signature and all.
    assert check_user_weights({"semantic": 0.25, "keyword": 0.25, "structural": 0.25, "length": 0.25,
                               "chars3": 0}) == (0.25, 0.25, 0.25, 0.25)
    with pytest.raises(ValueError, match="must sum to 1"):
        check_user_weights({"semantic": 0.25, "keyword": 0.25, "structural": 0.25, "length": 0.25,
                            "chars3": 0.25})
    with pytest.raises(ValueError, match="missing weight"):
        check_user_weights({"semantic": 0.5, "chars3": 0.5})


# ------------------------------------------------------------------------------ end to end
COUNTING = '''
import json, os
from pathlib import Path

LOG = Path(os.environ["METRIC_LOG"])


def trigrams(text):
    t = " ".join(text.lower().split())
    return {t[i:i + 3] for i in range(len(t) - 2)}


def chars3(e, e_prime):
    with LOG.open("a") as log:  # every evaluation, whichever process makes it
        log.write("x\\n")
    a, b = trigrams(e), trigrams(e_prime)
    return len(a & b) / len(a | b) if a | b else 0.0


def pytest_robustexplain_register_checks(register_metric):
    register_metric("chars3", chars3, version="1")
'''


def _gated(threshold: float) -> str:
    return f"""
import pytest

@pytest.mark.robustness(min_combined=0.3, min_metric={{"chars3": {threshold}}},
                        perturbations=["noise_injection"], severities=[1], guard="off")
def test_gate(robustness):
    pass
"""


FAKE_ARGS = ("--robustexplain-users=6", "--robustexplain-json=r.json", "--robustexplain-html=r.html",
             "--robustexplain-markdown=r.md", "--junitxml=j.xml", "--robustexplain-cache-dir=cache", "-p",
             "no:cacheprovider")


def _evaluations(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_conftests_metric_is_gated_reported_everywhere_and_cached(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    log = pytester.path / "evaluations.log"
    monkeypatch.setenv("METRIC_LOG", str(log))
    pytester.makeconftest(COUNTING)
    pytester.makepyfile(test_gate=_gated(0.99))  # no paraphrase keeps 99 % of its trigrams
    with FakeOllamaServer() as server:
        result = run_fake(pytester, server, *FAKE_ARGS)
        result.assert_outcomes(failed=1)
        measured = _evaluations(log)
        assert measured > 0
        doc = read_report(pytester)
        (gate,) = doc["gates"]
        checks = {c["quantity"]: c for c in gate["verdict"]["details"]["stability"]}
        assert checks["chars3"]["outcome"] == FAIL and checks["chars3"]["threshold"] == 0.99
        assert "chars3" in gate["verdict"]["message"]  # the headline names the metric that failed
        assert doc["signature"].endswith("|user:chars3@1")
        pairs = [p for p in doc["pairs"] if p["key"]["kind"] == "noise_injection"]
        assert pairs and all(0.0 <= p["user_metrics"]["chars3"] <= 1.0 for p in pairs)
        out = result.stdout.str()
        assert "chars3" in out
        for name in ("r.md", "r.html"):
            assert "chars3" in (pytester.path / name).read_text(encoding="utf-8"), name
        props = {p.get("name") for p in ET.parse(pytester.path / "j.xml").iter("property")}
        assert {"robustexplain_chars3", "robustexplain_chars3_interval"} <= props
        back = run_from_dict(doc)
        assert back.pairs[0].user_metrics == doc["pairs"][0].get("user_metrics", {})
        calls = server.chat_calls
        # Warm: every explanation and every metric value from the caches.
        pytester.makepyfile(test_gate=_gated(0.2))
        run_fake(pytester, server, *FAKE_ARGS).assert_outcomes(passed=1)
        assert _evaluations(log) == measured
        assert server.chat_calls - calls <= 1  # at most the run's one warm-up request
        warm = read_report(pytester)
        warm_rows = warm["gates"][0]["verdict"]["details"]["stability"]
        assert warm_rows[-1]["interval"] == checks["chars3"]["interval"]


def test_a_conftests_metric_gives_the_same_numbers_under_xdist(pytester: pytest.Pytester,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                xdist_args: tuple[str, ...]) -> None:
    monkeypatch.setenv("METRIC_LOG", str(pytester.path / "evaluations.log"))
    shop = pytester.mkpydir("shop")
    (shop / "conftest.py").write_text(COUNTING)
    (shop / "test_shop.py").write_text(_gated(0.2))
    # Other severities: the root's pairs are its own, and the run's summary of chars3 is over shop's only.
    pytester.makepyfile(test_root=_gated(0.2).replace('min_metric={"chars3": 0.2}', "min_metric=0.35")
                        .replace("severities=[1]", "severities=[3]"))
    result = pytester.runpytest_subprocess("--robustexplain-backend=template", "--robustexplain-users=6",
                                           "--robustexplain-json=r.json", "-p", "no:cacheprovider",
                                           *xdist_args)
    result.assert_outcomes(passed=2)
    doc = read_report(pytester)
    gates = {g["nodeid"]: g for g in doc["gates"]}
    shop_gate = gates["shop/test_shop.py::test_gate[noise_injection]"]["verdict"]["details"]["stability"][-1]
    assert shop_gate["quantity"] == "chars3"
    # The metric is its directory's: the root test neither gates nor measures it.
    assert "chars3" not in {c["quantity"] for c in gates["test_root.py::test_gate[noise_injection]"]
                            ["verdict"]["details"]["stability"]}
    # The same value whichever process measured it (both runs of this test compare against this).
    assert shop_gate["interval"]["mean"] == pytest.approx(0.8961, abs=1e-4)
    assert doc["signature"].endswith("|user:chars3@1")
    summary = doc["aggregates"]["template"]["by_metric"]
    assert summary["chars3"]["n"] == 6 and summary["semantic"]["n"] == 12


def test_a_weight_puts_the_metric_into_rho_and_the_example_runs(pytester: pytest.Pytester) -> None:
    pytester.copy_example(str(EXAMPLE / "conftest.py"))
    pytester.copy_example(str(EXAMPLE / "test_chars3.py"))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-users=6",
                                "--robustexplain-json=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)


@pytest.mark.parametrize(("marker", "said"), [
    ('min_metric={"chars4": 0.5}',
     "min_metric names 'chars4', which is not a registered metric; did you mean 'chars3'?"),
    ('weights={"semantic": 0.2, "keyword": 0.2, "structural": 0.2, "length": 0.2, "chars4": 0.2}',
     "weights names 'chars4', which is not a registered metric"),
    ('min_metric={"semantc": 0.5}', "unknown metric 'semantc'; did you mean 'semantic'?"),
])
def test_a_metric_the_test_does_not_have_is_one_usage_error(pytester: pytest.Pytester, marker: str,
                                                            said: str) -> None:
    pytester.makeconftest((EXAMPLE / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_gate=f"""
import pytest

@pytest.mark.robustness({marker})
def test_gate(robustness):
    pass
""")
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-users=4", "-p",
                                "no:cacheprovider")
    assert said in result.stdout.str() + result.stderr.str()
    assert result.ret != pytest.ExitCode.OK


def test_a_metric_that_raises_mid_run_is_one_error_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
def pytest_robustexplain_register_checks(register_metric):
    register_metric("broken", lambda e, e_prime: e.nonexistent(), version="1")
""")
    pytester.makepyfile(test_gate=_gated(0.2).replace("chars3", "broken"))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-users=4", "-p",
                                "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*metric 'broken' raised AttributeError*"])


def test_a_baseline_that_measured_another_version_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((EXAMPLE / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_gate=_gated(0.2))
    args = ("--robustexplain-backend=template", "--robustexplain-users=4", "-p", "no:cacheprovider")
    pytester.runpytest(*args, "--robustexplain-save-baseline=base.json").assert_outcomes(passed=1)
    saved = json.loads((pytester.path / "base.json").read_text(encoding="utf-8"))
    assert any("chars3" in p.get("user_metrics", {}) for p in saved["pairs"])
    pytester.runpytest(*args, "--robustexplain-baseline=base.json").assert_outcomes(passed=1)
    conftest = (pytester.path / "conftest.py").read_text(encoding="utf-8")
    (pytester.path / "conftest.py").write_text(conftest.replace('version="1"', 'version="2"'))
    result = pytester.runpytest(*args, "--robustexplain-baseline=base.json")
    assert "measured metric 'chars3' at version '1', this run at '2'" in result.stdout.str()
    assert result.ret != pytest.ExitCode.OK


def test_compare_sets_the_metric_beside_the_four() -> None:
    from pytest_robustexplain.stats import compare_models

    def pairs(model: str, value: float) -> list[PairResult]:
        return [PairResult(PairKey(model, f"u{i}", "i", "noise_injection", 1, 0), 0.5, 0.5, 0.5, 0.5, 0.5,
                           "a", "b", user_metrics={"chars3": value + 0.01 * i}) for i in range(6)]

    comparison = compare_models(pairs("a", 0.4), pairs("b", 0.6), names=("a", "b"))
    row = next(r for r in comparison.rows if r.quantity == "chars3")
    assert row.mean_a.mean == pytest.approx(0.425) and row.mean_b.mean == pytest.approx(0.625)
    assert row.label == "chars3" and row.significant


def test_the_sequential_gate_stops_on_a_user_metric(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((EXAMPLE / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_gate=_gated(0.99).replace('guard="off"', 'guard="off", decision="sequential"'))
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-users=20",
                                "--robustexplain-json=r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    (gate,) = read_report(pytester)["gates"]
    checks = {c["quantity"]: c for c in gate["verdict"]["details"]["stability"]}
    assert checks["chars3"]["outcome"] == FAIL
    assert checks["chars3"]["interval"]["n_clusters"] < 20  # decided before every user was measured


def test_a_user_metric_that_hangs_stops_the_run_at_max_minutes_naming_it(pytester: pytest.Pytester) -> None:
    """A metric that never returns held the sweep's loop — the budget's own clock included — for as long as it
    liked (90 s for three pairs under max-minutes 0.2); now the run stops when the budget runs out, with one
    line naming the metric (issue 61). The function waits on an event nobody sets, far past the budget."""
    pytester.makeconftest("""
import threading

NEVER = threading.Event()

def pytest_robustexplain_register_checks(register_metric):
    register_metric("stuck", lambda e, f: NEVER.wait(600) or 0.5, version="1")
""")
    pytester.makepyfile(test_gate=marked('perturbations=["noise"], severities=[1], users=3, guard="off", '
                                         'inconclusive="warn"'))
    result = pytester.runpytest_subprocess("--robustexplain-backend=template", "-p", "no:cacheprovider",
                                           "--robustexplain-max-minutes=0.2", timeout=120)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*user metric 'stuck' gave no values for * pairs within the run's "
                                 "max-minutes (0.2 min, and 5 s after it)*"])


def test_a_quick_user_metric_is_measured_on_the_users_a_spent_budget_decides_on(
        pytester: pytest.Pytester, server: FakeOllamaServer) -> None:
    """When max-minutes runs out the slices are decided on the users that finished, and their user metric is
    measured after the budget's end: a quick one is waited for, not refused for the budget."""
    pytester.makeconftest("""
def pytest_robustexplain_register_checks(register_metric):
    register_metric("half", lambda e, f: 0.5, version="1")
""")
    pytester.makepyfile(test_gate=marked('perturbations=["noise"], severities=[1, 5], guard="off", '
                                         'inconclusive="warn"'))
    args = ("-p", "no:cacheprovider", "--robustexplain-json=r.json", "--robustexplain-cache-dir=cache")
    run_fake(pytester, server, "--robustexplain-users=3", *args).assert_outcomes(passed=1)
    server.hang_next(1000)  # from now on only the three cached users can finish
    pytester.makeconftest("""
import time

def half(e, f):
    time.sleep(0.05)  # quick, but not done the instant its thread starts
    return 0.5

def pytest_robustexplain_register_checks(register_metric):
    register_metric("half", half, version="2")  # a new version: measured again, not read from the cache
""")
    result = run_fake(pytester, server, "--robustexplain-users=6", "--robustexplain-max-minutes=0.05", *args)
    result.assert_outcomes(passed=1)
    doc = read_report(pytester)
    assert "ran out: decided on the first 3 of 6 users" in doc["gates"][0]["verdict"]["message"]
    assert {p["user_metrics"]["half"] for p in doc["pairs"] if p["key"]["kind"] == "noise_injection"} == {0.5}
