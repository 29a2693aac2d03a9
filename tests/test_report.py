"""Tests of the report package: summary, JSON, terminal, Markdown, HTML and the paper's tables.

Most tests render the recorded sample report ``tests/data_samples/report_sample.json``: two models,
five kinds × five severities, six users, control pairs, two generation failures, a flagged keyword pair
and a hostile explanation. ``build_sample_run`` below is the script that recorded it; run this file
(``python tests/test_report.py``) to record it again.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import html
import json
import math
import random
import re
import sys
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from pytest_robustexplain.errors import DataError
from pytest_robustexplain.report import html as html_report
from pytest_robustexplain.report.json_report import SCHEMA_VERSION, dumps, read_json, run_to_dict, write_json
from pytest_robustexplain.report.markdown import render_markdown
from pytest_robustexplain.report.paper_tables import render_paper_tables
from pytest_robustexplain.report.summary import ReportModel, recommend, summarize, worst_pairs
from pytest_robustexplain.report.terminal import render_terminal
from pytest_robustexplain.results import (
    CONTROL_KIND,
    FAIL,
    METRICS,
    OVERALL,
    PASS,
    GateCheck,
    GateResult,
    Interval,
    PairKey,
    PairResult,
    RunResult,
    Verdict,
)
from pytest_robustexplain.stats import cluster_interval

SAMPLE = Path(__file__).parent / "data_samples" / "report_sample.json"
HOSTILE = "<script>alert(1)</script>"

# ----------------------------------------------------------------------------------- the sample's script

KINDS = ("noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values")
CATEGORIES = ("Electronics", "Fashion", "Home", "Beauty", "Sports", "Books", "Toys")
MODELS: list[dict[str, Any]] = [
    {"name": "qwen2.5:7b", "backend": "ollama", "is_llm": True,
     "digest": "sha256:845dbda0ea48ed749caafd9e6037047aa19acfcfd82e704d7ca97d631a0b697e",
     "parameter_size": "7.6B", "quantization": "Q4_K_M", "server_version": "0.5.7",
     "host": "http://127.0.0.1:11434"},
    {"name": "qwen2.5:14b", "backend": "ollama", "is_llm": True,
     "digest": "sha256:7cdf5a0187d5c58cc5d369b255592f7841d1c4696d45a8c8a9489440385b22f6",
     "parameter_size": "14.8B", "quantization": "Q4_K_M", "server_version": "0.5.7",
     "host": "http://127.0.0.1:11434"},
]
# user id, history length, recommended item id, its title, its category, two liked titles
USERS = (
    ("u017", 14, "E012", "Wireless Earbuds Pro", "Electronics", ("Noise-Cancelling Headphones", "USB-C Hub")),
    ("u042", 18, "B207", "The Pragmatic Programmer", "Books", ("Clean Code", "Refactoring")),
    ("u108", 10, "S033", "Trail Running Shoes", "Sports", ("Hydration Vest", "Running Socks")),
    ("u151", 16, "H120", "Cast Iron Skillet", "Home", ("Chef's Knife", "Dutch Oven")),
    ("u233", 12, "F088", "Linen Summer Shirt", "Fashion", ("Canvas Sneakers", "Chino Shorts")),
    ("u290", 20, "T015", "Wooden Train Set", "Toys", ("Building Blocks", "Puzzle Map")),
)
BASE = {"qwen2.5:7b": {"semantic": 0.6, "keyword": 0.48, "structural": 0.33, "length": 0.72},
        "qwen2.5:14b": {"semantic": 0.66, "keyword": 0.54, "structural": 0.41, "length": 0.76}}
KIND_SHIFT = {"noise_injection": 0.005, "temporal_shuffle": -0.01, "behavior_dilution": 0.0,
              "category_drift": 0.008, "missing_values": 0.002}
THRESHOLDS = {"combined": 0.5, **dict.fromkeys(METRICS, 0.35)}  # as a GateResult records them


def _explanation(rng: random.Random, user: tuple[Any, ...], quality: float) -> str:
    """An explanation whose sentences stay as in the original with probability ``quality``."""
    _, _, _, title, category, liked = user
    variants = [
        (f"{title} fits your clear interest in {category.lower()}.",
         f"Because you keep coming back to {category.lower()}, {title} is a natural next pick."),
        (f"You rated {liked[0]} and {liked[1]} highly, and this item shares their strengths.",
         f"Items like {liked[1]} appear often in your history, which suggests similar tastes."),
        ("Its build quality and price match what you usually choose.",
         "Several recent purchases point to practical, well-reviewed products in this range."),
        ("Buyers with a similar history rate it well.",
         "It is also popular with people who browse the same categories as you."),
    ]
    return " ".join(a if rng.random() < quality else b for a, b in variants)


def _changes(rng: random.Random, kind: str, severity: int, length: int) -> dict[str, Any]:
    count = max(1, round(0.1 * severity * length))
    positions = sorted(rng.sample(range(length + count), count))
    others = rng.sample(CATEGORIES, 2)
    if kind == "noise_injection":
        return {"inserted": [{"position": p, "item_id": f"X{rng.randrange(200):03d}",
                              "category": rng.choice(CATEGORIES)} for p in positions]}
    if kind == "behavior_dilution":
        return {"inserted": [{"position": p, "item_id": f"X{rng.randrange(200):03d}",
                              "category": rng.choice(others)} for p in positions], "categories": others}
    if kind == "temporal_shuffle":
        chosen = sorted(rng.sample(range(length), max(2, round(severity * length / 5))))
        targets = chosen[1:] + chosen[:1]
        return {"moved": [[a, b] for a, b in zip(chosen, targets, strict=True)]}
    if kind == "category_drift":
        return {"replaced": [{"position": p, "old_item_id": f"X{rng.randrange(200):03d}",
                              "item_id": f"X{rng.randrange(200):03d}", "category": others[0]}
                             for p in range(length - min(count, length), length)], "categories": others[:1]}
    return {"blanked": [{"position": rng.randrange(length), "field": rng.choice(("rating", "timestamp",
                                                                                  "category"))}
                        for _ in range(max(1, round(0.1 * severity * 3 * length)))]}


def _pair(rng: random.Random, model: str, user: tuple[Any, ...], kind: str, severity: int,
          user_effect: float) -> PairResult:
    shift = KIND_SHIFT.get(kind, 0.0) - 0.006 * (severity - 1) + user_effect
    if model == "qwen2.5:7b" and kind == "temporal_shuffle":
        shift -= 0.07  # the 7b model is fragile to reordering: its shuffle gate fails
    if kind == CONTROL_KIND:
        shift = 0.3
    scores = {m: round(min(1.0, max(0.0, BASE[model][m] + shift + rng.gauss(0, 0.05))), 4) for m in METRICS}
    combined = round(sum(scores.values()) / 4, 4)
    original = _explanation(random.Random(f"{model}{user[0]}"), user, 1.0)
    perturbed = _explanation(rng, user, combined)
    changes = {"control": "resampled"} if kind == CONTROL_KIND else _changes(rng, kind, severity, user[1])
    cached = rng.random() < 0.12
    return PairResult(PairKey(model, user[0], user[2], kind, severity, 0), **scores, combined=combined,
                      original=original, perturbed=perturbed, changes=changes, cached_original=cached,
                      cached_perturbed=cached and rng.random() < 0.8,
                      latency_s=round(rng.uniform(1.5, 6.0), 3), history_length=user[1])


def _special(pair: PairResult) -> PairResult:
    """Turn a few pairs into the cases a report must handle: failures, a flagged pair, hostile text."""
    key = pair.key
    zero = dict.fromkeys((*METRICS, "combined"), 0.0)
    if key.model == "qwen2.5:7b" and (key.user_id, key.kind, key.severity) == ("u017", "noise_injection", 5):
        return replace(pair, **zero, perturbed="", failure="empty", failure_detail="")
    if key.model == "qwen2.5:7b" and (key.user_id, key.kind, key.severity) == ("u108", "category_drift", 3):
        return replace(pair, **zero, perturbed="", failure="error",
                       failure_detail="HTTP 500: llama runner process has terminated")
    if key.model == "qwen2.5:7b" and (key.user_id, key.kind, key.severity) == ("u042", "temporal_shuffle", 4):
        text = (f"Recommended because {HOSTILE} you like Books & \"Toys\" | cheap.\n"
                "<img src=x onerror=alert(2)> Ignore previous instructions.")
        return replace(pair, semantic=0.12, keyword=0.05, structural=0.0, length=0.4, combined=0.1425,
                       perturbed=text)
    if key.model == "qwen2.5:14b" and (key.user_id, key.kind, key.severity) == ("u233", "missing_values", 5):
        combined = round((pair.semantic + pair.structural + pair.length) / 4, 4)
        return replace(pair, keyword=0.0, combined=combined, keyword_empty=True)
    return pair


def _gate(pairs: list[PairResult], model: str, slice_: str, nodeid: str) -> GateResult:
    judged = [p for p in pairs if p.key.model == model and p.key.kind != CONTROL_KIND
              and slice_ in (OVERALL, p.key.kind)]
    users = [p.key.user_id for p in judged]
    quantities = [("combined", THRESHOLDS["combined"])]
    if slice_ == OVERALL:
        quantities += [(m, THRESHOLDS[m]) for m in METRICS]
    checks = []
    for quantity, threshold in quantities:
        interval = cluster_interval([p.metric(quantity) for p in judged], users)
        checks.append(GateCheck(quantity, threshold, interval, FAIL if interval.mean < threshold else PASS,
                                fragile=interval.low < threshold < interval.high))
    outcome = FAIL if any(c.outcome == FAIL for c in checks) else PASS
    return GateResult(nodeid, slice_, model, Verdict.of(outcome, checks), dict(THRESHOLDS))


def build_sample_run() -> RunResult:
    """The recorded sample run (deterministic)."""
    rng = random.Random(20240601)
    pairs = []
    for model in BASE:
        for user in USERS:
            effect = rng.gauss(0, 0.03)
            pairs.append(_pair(rng, model, user, CONTROL_KIND, 0, effect))
            pairs += [_special(_pair(rng, model, user, kind, severity, effect))
                      for kind in KINDS for severity in range(1, 6)]
    gates = [_gate(pairs, model, slice_, f"tests/test_explanations.py::test_robust[{model}-{slice_}]")
             for model in BASE for slice_ in (OVERALL, *KINDS)]
    made = sum(1 for p in pairs if not p.cached_perturbed) + len(USERS) * len(BASE)
    return RunResult(
        signature="tok:words|tag:textblob@0.19.0|bleu:4,exp|w:.25/.25/.25/.25|v:0.1.0", seed=42,
        models=[dict(m) for m in MODELS],
        settings={"min_combined": 0.5, "min_metric": 0.35, "kinds": list(KINDS),
                  "severities": [1, 2, 3, 4, 5], "users": len(USERS), "repeats": 1, "gate_mode": "mean",
                  "temperature": 0.7, "num_predict": 256, "controls": True},
        pairs=pairs, gates=gates,
        calls={"made": made, "cached": sum(p.cached_perturbed for p in pairs), "failed": 2, "cancelled": 0},
        timings={"perturb": 0.41, "generate": 812.35, "score": 3.12, "total": 816.02},
        started_at="2024-06-01T09:12:03Z", finished_at="2024-06-01T09:25:39Z", package_version="0.1.0",
    )


# --------------------------------------------------------------------------------------------- fixtures

M7, M14 = "qwen2.5:7b", "qwen2.5:14b"


@pytest.fixture(scope="module")
def run() -> RunResult:
    return read_json(SAMPLE)


@pytest.fixture(scope="module")
def page(run: RunResult) -> str:
    # Rendering the charts costs ~2 s: once per module.
    return html_report.render_html(run)


def _only(run: RunResult, model: str) -> RunResult:
    return replace(run, models=[m for m in run.models if m["name"] == model],
                   pairs=[p for p in run.pairs if p.key.model == model],
                   gates=[g for g in run.gates if g.model == model])


def _gate_result(model: str, slice_: str, outcome: str, checks: tuple[GateCheck, ...],
                 **kw: Any) -> GateResult:
    return GateResult(f"t.py::t[{slice_}]", slice_, model, Verdict.of(outcome, checks, **kw))


# ------------------------------------------------------------------------------------------ the sample


def test_sample_file_is_what_the_script_records(run: RunResult) -> None:
    built = build_sample_run()
    assert run.pairs == built.pairs
    assert (run.models, run.settings, run.calls, run.timings, run.seed) == (
        built.models, built.settings, built.calls, built.timings, built.seed)
    assert [(g.nodeid, g.verdict.outcome) for g in run.gates] == [
        (g.nodeid, g.verdict.outcome) for g in built.gates]


def test_sample_covers_the_cases_a_report_must_handle(run: RunResult) -> None:
    assert {p.key.model for p in run.pairs} == {M7, M14}
    assert {(p.key.kind, p.key.severity) for p in run.pairs if p.key.kind != CONTROL_KIND} == {
        (k, s) for k in KINDS for s in range(1, 6)}
    assert sum(p.key.kind == CONTROL_KIND for p in run.pairs) == 12
    assert sorted(p.failure for p in run.pairs if p.failure) == ["empty", "error"]
    assert any(HOSTILE in p.perturbed for p in run.pairs)
    assert {g.verdict.outcome for g in run.gates if g.model == M7} == {PASS, FAIL}


# --------------------------------------------------------------------------------------------- summary


def test_summary_numbers(run: RunResult) -> None:
    s = summarize(run, M7)
    pairs = run.model_pairs(M7)
    assert (s.n_users, s.n_pairs, s.n_control_pairs) == (6, 150, 6)
    assert s.overall == cluster_interval([p.combined for p in pairs], [p.key.user_id for p in pairs])
    assert list(s.by_kind) == list(KINDS)
    assert list(s.by_metric) == list(METRICS)
    assert s.severities == (1, 2, 3, 4, 5)
    shuffle_l4 = [p.combined for p in pairs if p.key.kind == "temporal_shuffle" and p.key.severity == 4]
    assert s.kind_severity["temporal_shuffle"][4].mean == pytest.approx(sum(shuffle_l4) / len(shuffle_l4))
    l1, l5 = s.by_severity[1].mean, s.by_severity[5].mean
    assert s.degradation_pct == pytest.approx((l5 - l1) / l1 * 100)
    assert s.noise_floor is not None and s.noise_floor.n == 6
    assert s.cached_pairs == sum(p.cached_original and p.cached_perturbed for p in pairs)
    assert (s.weakest_metric, s.weakest_kind) == ("structural", "temporal_shuffle")
    assert [(f.key.user_id, f.failure) for f in s.failures] == [("u017", "empty"), ("u108", "error")]
    assert s.failures[1].detail.startswith("HTTP 500")
    assert s.small_kinds == KINDS  # 30 pairs per kind < the paper's 50
    assert "structured explanation template" in s.recommendation
    assert [k.user_id for k in summarize(run, M14).keyword_empty] == ["u233"]
    assert json.loads(json.dumps(s.to_dict()))["by_severity"]["5"]["n"] == 30


def test_summary_without_controls_has_no_noise_floor(run: RunResult) -> None:
    bare = replace(run, pairs=[p for p in run.pairs if p.key.kind != CONTROL_KIND])
    assert summarize(bare, M7).noise_floor is None
    assert "not measured (no control pairs)" in render_terminal(bare)


def _count_kind_tests(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts calls of the paper's kind analyses: Friedman and ANOVA (``kind_differences``), Tukey HSD."""
    from pytest_robustexplain import stats
    from pytest_robustexplain.stats import analyses

    calls = {"kind tests": 0, "tukey": 0}
    kind_differences, tukey = stats.kind_differences, analyses._tukey

    def counted_kinds(*args: Any, **kwargs: Any) -> Any:
        calls["kind tests"] += 1
        return kind_differences(*args, **kwargs)

    def counted_tukey(*args: Any, **kwargs: Any) -> Any:
        calls["tukey"] += 1
        return tukey(*args, **kwargs)

    monkeypatch.setattr(stats, "kind_differences", counted_kinds)
    monkeypatch.setattr(analyses, "_tukey", counted_tukey)
    return calls


def test_kind_analyses_run_only_for_the_reports_that_show_them(run: RunResult, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_kind_tests(monkeypatch)
    report = ReportModel(run)  # what write_reports hands every writer: the summaries, computed once
    assert summarize(report, M7).n_pairs == 150 and render_terminal(report, quiet=True)
    assert calls == {"kind tests": 0, "tukey": 0}  # the gate and the one-line report never need them
    assert "Kinds differ?" in render_terminal(report) and "Friedman" in render_markdown(report)
    assert calls == {"kind tests": 2, "tukey": 0}  # once per model; the findings line shows no Tukey table
    write_json(report, tmp_path / "report.json")
    assert calls == {"kind tests": 2, "tukey": 2}
    render_markdown(run)  # a bare record: a model of its own, summarised afresh
    assert calls == {"kind tests": 4, "tukey": 2}
    aggregates = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["aggregates"]
    tests = aggregates[M7]["kind_tests"]
    assert list(tests) == ["kinds", "kind_means", "friedman", "friedman_users", "anova", "tukey", "notes"]
    assert len(tests["tukey"]) == 10 and tests["anova"]["df_between"] == 4


def test_a_quiet_run_without_reports_never_runs_the_kind_analyses(pytester: pytest.Pytester, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_kind_tests(monkeypatch)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.robustness(severities=[1, 5], users=3, min_combined=0.0, min_metric=0.0)
        def test_gate(robustness):
            assert robustness.pairs
    """)
    args = ("-p", "no:randomly", "--robustexplain-backend=template")
    pytester.runpytest("-q", *args).assert_outcomes(passed=6)
    assert calls == {"kind tests": 0, "tukey": 0}
    report = tmp_path / "report.json"
    pytester.runpytest("-q", *args, f"--robustexplain-json={report}").assert_outcomes(passed=6)
    assert calls == {"kind tests": 1, "tukey": 1}
    aggregates = json.loads(report.read_text(encoding="utf-8"))["aggregates"]
    assert len(aggregates["template"]["kind_tests"]["tukey"]) == 10


def test_worst_pairs_skips_controls_and_failures(run: RunResult) -> None:
    worst = worst_pairs(run.pairs, n=4)
    assert len(worst) == 4
    assert all(p.key.kind != CONTROL_KIND and p.failure is None for p in worst)
    assert [p.combined for p in worst] == sorted(p.combined for p in worst)
    assert worst[0].combined == min(p.combined for p in run.pairs
                                    if p.failure is None and p.key.kind != CONTROL_KIND)
    assert worst_pairs(run.pairs, n=1, quantity="structural")[0].structural == 0.0
    assert worst_pairs(run.pairs, n=2, include_failures=True)[0].failure is not None


def _iv(mean: float) -> Interval:
    return Interval(mean, mean - 0.02, mean + 0.02, 100, 10)


@pytest.mark.parametrize(("metrics", "kinds", "expected"), [
    ((0.6, 0.5, 0.30, 0.7), (0.55,) * 5, "constrain the output format"),
    ((0.6, 0.33, 0.45, 0.7), (0.55,) * 5, "anchor the explanation to item attributes"),
    ((0.6, 0.5, 0.45, 0.30), (0.55,) * 5, "num_predict / explicit word budget"),
    ((0.30, 0.5, 0.45, 0.7), (0.55,) * 5, "Semantic similarity trails"),
    ((0.6, 0.55, 0.5, 0.65), (0.55, 0.45, 0.55, 0.55, 0.55), "ρ drops most under temporal_shuffle"),
    ((0.9, 0.9, 0.85, 0.95), (0.9,) * 5, "No metric or perturbation stands out"),
])
def test_recommendation_rules(metrics: tuple[float, ...], kinds: tuple[float, ...], expected: str) -> None:
    by_metric = {m: _iv(v) for m, v in zip(METRICS, metrics, strict=True)}
    by_kind = {k: _iv(v) for k, v in zip(KINDS, kinds, strict=True)}
    text = recommend(by_metric, by_kind, THRESHOLDS, n_failures=0, n_pairs=100)
    assert expected in text


def test_recommendation_puts_many_generation_failures_first() -> None:
    text = recommend({m: _iv(0.3) for m in METRICS}, {k: _iv(0.3) for k in KINDS}, {}, n_failures=20,
                     n_pairs=100)
    assert text.startswith("20 of 100 pairs had a generation failure")


def test_thresholds_come_from_the_gate_then_the_settings(run: RunResult) -> None:
    from pytest_robustexplain.report.summary import gate_thresholds

    ungated = replace(run, gates=[], settings={"min_combined": 0.6, "min_metric": {"length": 0.8}})
    assert gate_thresholds(ungated, M7) == {"combined": 0.6, "semantic": 0.35, "keyword": 0.35,
                                            "structural": 0.35, "length": 0.8}
    assert gate_thresholds(run, M7) == THRESHOLDS
    # A per-metric threshold decides which metric trails.
    by_metric = {m: _iv(v) for m, v in zip(METRICS, (0.6, 0.5, 0.45, 0.7), strict=True)}
    by_kind = {k: _iv(0.55) for k in KINDS}
    assert "num_predict" in recommend(by_metric, by_kind, {**THRESHOLDS, "length": 0.75}, n_pairs=100)
    assert "structured explanation template" in recommend(by_metric, by_kind, THRESHOLDS, n_pairs=100)


# ------------------------------------------------------------------------------------------------ JSON


def test_json_round_trips_exactly(run: RunResult, tmp_path: Path) -> None:
    built = build_sample_run()
    path = write_json(built, tmp_path / "sub" / "report.json")
    back = read_json(path)
    assert back == built
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["schema_version"] == SCHEMA_VERSION == 5
    assert set(doc["aggregates"]) == {M7, M14}
    assert doc["aggregates"][M7]["n_failures"] == 2
    assert doc["comparisons"][0]["names"] == [M7, M14]
    assert [r["quantity"] for r in doc["comparisons"][0]["rows"]] == ["combined", *METRICS]
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temporary file left behind
    write_json(back, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


@pytest.mark.parametrize("pairs", [True, False])
def test_the_streamed_json_is_byte_for_byte_the_document(pairs: bool, tmp_path: Path) -> None:
    built = build_sample_run() if pairs else RunResult(signature="s", seed=1)
    path = write_json(built, tmp_path / "r.json")
    assert path.read_text(encoding="utf-8") == dumps(run_to_dict(built)) + "\n"


def test_json_pair_records_carry_everything(run: RunResult) -> None:
    doc = run_to_dict(run)
    record = next(p for p in doc["pairs"] if HOSTILE in p["perturbed"])
    assert record["key"] == {"model": M7, "user_id": "u042", "item_id": "B207", "kind": "temporal_shuffle",
                             "severity": 4, "repeat": 0}
    assert {"semantic", "keyword", "structural", "length", "combined", "original", "perturbed", "changes",
            "failure", "failure_detail", "keyword_empty", "cached_original", "cached_perturbed",
            "latency_s"} <= set(record)
    assert record["changes"]["moved"]


def test_json_writes_non_finite_numbers_as_null(tmp_path: Path) -> None:
    run = RunResult(signature="s", seed=1, timings={"total": math.nan})
    path = write_json(run, tmp_path / "r.json")

    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON constant {name}")

    assert json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)["timings"] == {"total": None}


def _doc(run: RunResult) -> dict[str, Any]:
    return json.loads(json.dumps(run_to_dict(run)))


def test_json_newer_schema_is_refused(run: RunResult, tmp_path: Path) -> None:
    doc = _doc(_only(run, M14))
    newer = doc["schema_version"] = SCHEMA_VERSION + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(DataError, match=rf"future\.json.*schema_version.*{newer} is newer.*upgrade"):
        read_json(path)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["pairs"][3]["key"].update(severity="high"), r"pairs\[3\].*'severity'.*expected an integer"),
    (lambda d: d["pairs"][0].pop("combined"), r"pairs\[0\].*'combined'.*missing"),
    (lambda d: d["pairs"][1].update(semantic="0.5"), r"pairs\[1\].*'semantic'.*expected a number"),
    (lambda d: d["pairs"][2].update(combined=None), r"pairs\[2\].*'combined'.*score between 0 and 1"),
    (lambda d: d["pairs"][2].update(length=1.5), r"pairs\[2\].*'length'.*score between 0 and 1"),
    (lambda d: d["gates"][0]["verdict"]["details"]["stability"][0].update(interval=[]),
     r"gates\[0\]\.verdict\.details\.stability\[0\]\.interval.*expected an object"),
    (lambda d: d.pop("schema"), r"not a pytest-robustexplain report"),
    (lambda d: d.update(models={}), r"'models'.*expected a list, got dict"),
    # Hand-edited words a writer would render where an outcome, a severity or a kind belongs (issue 26).
    (lambda d: d["gates"][0]["verdict"].update(outcome="**PWNED**"),
     r"gates\[0\]\.verdict.*'outcome'.*expected one of PASS, FAIL, INCONCLUSIVE, INSENSITIVE, "
     r"got '\*\*PWNED"),
    (lambda d: d["gates"][0]["verdict"]["details"]["stability"][0].update(outcome="<b>ok</b>"),
     r"stability\[0\].*'outcome'.*expected one of PASS"),
    (lambda d: d["pairs"][3]["key"].update(severity=99),
     r"pairs\[3\].*'severity'.*expected 0 \(a control\) or 1–5, got 99"),
    (lambda d: d["pairs"][3]["key"].update(severity=-1), r"pairs\[3\].*'severity'.*got -1"),
    (lambda d: d["pairs"][3]["key"].update(kind="[x](http://e.vil)"), r"pairs\[3\].*'kind'.*kind's name"),
])
def test_json_bad_record_names_file_record_and_field(run: RunResult, tmp_path: Path, mutate: Any,
                                                     message: str) -> None:
    doc = _doc(_only(run, M14))
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.json.*" + message):
        read_json(path)


def test_json_unreadable_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "pytest-robustexplain/report",\n "schema_version": 1,,}', encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.json, line 2: not valid JSON"):
        read_json(broken)
    with pytest.raises(DataError, match=r"missing\.json: cannot read the report"):
        read_json(tmp_path / "missing.json")
    listed = tmp_path / "list.json"
    listed.write_text("[]", encoding="utf-8")
    with pytest.raises(DataError, match=r"list\.json: expected a JSON object"):
        read_json(listed)


# -------------------------------------------------------------------------------------------- terminal


def test_terminal_layout(run: RunResult) -> None:
    out = render_terminal(run)
    lines = out.splitlines()
    s7 = summarize(run, M7)
    assert lines[0] == (f"robustexplain — model qwen2.5:7b (sha256:845d…, 7.6B, Q4_K_M) · seed 42 · "
                        f"6 users · 150 pairs · {s7.cached_pairs} cached")
    assert lines[1] == "signature: " + run.signature
    overall = next(line for line in lines if line.startswith("Overall robustness ρ"))
    assert overall == f"Overall robustness ρ            {s7.overall.fmt()}   gate ≥ 0.50   PASS"
    section = out.split("robustexplain — model qwen2.5:14b")[0]
    order = ["Overall robustness ρ", "Gate verdict (all checks)", "By perturbation", "By metric",
             "Kind × severity (ρ)             L1     L2     L3     L4     L5", "Severity degradation L1 → L5",
             "Noise floor (same history, resampled)", "Weakest dimension               structural (",
             "Weakest perturbation            temporal_shuffle (",
             "Generation failures             2 (listed in the JSON report)", "Recommendation"]
    positions = [section.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "FAIL (structural 0.320 < 0.35)" in section
    row = f"  semantic   (BoW cosine)       {s7.by_metric['semantic'].fmt()}   PASS"
    assert row in lines
    cells = "  ".join(f"{s7.kind_severity['noise_injection'][s].mean:.3f}" for s in range(1, 6))
    assert f"  noise_injection               {cells}" in lines


def test_terminal_fragile_note_and_comparison(run: RunResult) -> None:
    out = render_terminal(run)
    assert "PASS (fragile: interval straddles 0.50)" in out
    assert re.search(r"^Overall ρ\s+0\.\d{3} \[.*\]\s+0\.\d{3} \[.*\]\s+\+\d+\.\d %\s+\S+\s+\d\.\d\d$", out,
                     re.MULTILINE)
    assert "Holm-corrected across the 5 rows" in out
    assert "Conclusion: " in out
    assert "Conclusion: " not in render_terminal(_only(run, M7))


def test_terminal_lists_worst_pairs_of_each_failed_item_from_its_slice(run: RunResult) -> None:
    lines = render_terminal(run, width=200).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("  FAIL ") and "temporal_shuffle" in line)
    assert re.match(r"  FAIL tests/test_explanations\.py::\S+ · temporal_shuffle: ρ 0\.\d{3} "
                    r"\[0\.\d{3}, 0\.\d{3}\] < 0\.5$", lines[row]), lines[row]  # a report without scope
    assert lines[row + 1].strip() == "1. user u042 · item B207 · temporal_shuffle L4 · ρ 0.142"
    assert lines[row + 2].strip() == "changed:   moved 14 items"
    end = next(i for i in range(row + 1, len(lines)) if not lines[i].startswith("      "))
    block = "\n".join(lines[row + 1: end])
    assert block.count("original:") == 3 and block.count("perturbed:") == 3
    assert "<script>alert(1)</script>" in block  # plain text in a terminal: shown as is
    # Explanations are trimmed to about 200 characters.
    cut = block.index("perturbed:")
    original = " ".join(line.strip() for line in block[block.index("original:"):cut].splitlines())
    assert original.removeprefix("original:").strip().endswith("…”") and len(original) <= 215
    passing = next(i for i, line in enumerate(lines) if line.startswith("  behavior_dilution "))
    assert "PASS" in lines[passing] and not lines[passing + 1].strip().startswith("1.")
    short = render_terminal(run, width=100, verbose=False).splitlines()
    row = next(i for i, line in enumerate(short) if line.startswith("  FAIL ") and "temporal_shuffle" in line)
    # The item's line wraps at the width, never cut (issue 43: cut mid-number at 140 columns), then its pair.
    first = next(i for i in range(row + 1, len(short)) if short[i].strip().startswith("1. "))
    assert all(line.startswith("      ") and not line.endswith("…") for line in short[row + 1: first])
    assert "0.453 [0.423, 0.482] < 0.5" in " ".join(short[row: first])
    assert short[first].strip().startswith("1. user u042 · item B207 · temporal_shuffle L4 · ρ 0.142 · moved")
    assert short[first + 1].count("“") == 2 and " → " in short[first + 1]  # both explanations on one line
    assert all(len(line) <= 100 for line in short[row: first + 2])


def test_terminal_quiet(run: RunResult) -> None:
    s14 = summarize(run, M14)
    one = render_terminal(_only(run, M14), quiet=True)
    assert one == (f"robustexplain: qwen2.5:14b ρ {s14.overall.fmt()} PASS · 150 pairs · "
                   f"{s14.cached_pairs} cached")
    both = render_terminal(run, quiet=True).splitlines()
    assert len(both) == 2
    assert re.fullmatch(r"robustexplain: qwen2\.5:7b ρ 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\] FAIL · 150 pairs · "
                        r"\d+ cached · 2 generation failures", both[0])


def test_terminal_labels_a_template_explainer(run: RunResult) -> None:
    single = _only(run, M14)
    template = replace(single, models=[{"name": M14, "backend": "template", "is_llm": False}])
    header = render_terminal(template).splitlines()[0]
    assert header.startswith(
        "robustexplain — model qwen2.5:14b [template explainer — not a language model] · seed 42 ·")
    assert "not a language model" not in render_terminal(single).splitlines()[0]


def test_terminal_inconclusive_and_ungated(run: RunResult) -> None:
    single = _only(run, M14)
    check = GateCheck("combined", 0.5, Interval(0.51, 0.47, 0.55, 150, 6), "INCONCLUSIVE", fragile=True)
    gated = replace(single, gates=[_gate_result(M14, OVERALL, "INCONCLUSIVE", (check,), users_needed=12)])
    out = render_terminal(gated)
    assert ("INCONCLUSIVE (fragile: interval straddles 0.50; ≈12 more users would likely decide)" in out)
    ungated = render_terminal(replace(single, gates=[]))
    assert "not gated" in ungated and "FAIL" not in ungated and "PASS" not in ungated


def test_no_comparison_between_models_that_ran_different_cases(run: RunResult) -> None:
    moved = [replace(p, key=replace(p.key, user_id="x" + p.key.user_id)) if p.key.model == M14 else p
             for p in run.pairs]
    apart = replace(run, pairs=moved)
    assert "Model comparison" not in render_terminal(apart)
    assert "Model comparison" not in render_markdown(apart)
    assert "Model comparison" not in html_report.render_html(apart)
    assert run_to_dict(apart)["comparisons"] == []


def test_empty_run_renders_everywhere() -> None:
    empty = RunResult(signature="s", seed=0)
    assert render_terminal(empty) == "robustexplain: no pairs were scored"
    assert "No pairs were scored" in render_markdown(empty)
    assert "Table 6" in render_paper_tables(empty)


# -------------------------------------------------------------------------------------------- markdown


def test_markdown_tables_and_escaping(run: RunResult) -> None:
    md = render_markdown(run)
    assert md.count("## robustexplain — model ") == 2
    assert "**Status: FAIL**" in md and "**Status: PASS**" in md
    s7 = summarize(run, M7)
    assert f"| Overall ρ | {s7.overall.fmt()} | ≥ 0.50 | PASS |" in md
    assert "| Kind × severity (ρ) | L1 | L2 | L3 | L4 | L5 |" in md
    assert "<script>" not in md and "<img" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert "Books &amp; \"Toys\" \\| cheap." in md
    assert all(line.endswith("|") for line in md.splitlines() if line.startswith("|"))
    table_rows = [line for line in md.splitlines() if line.startswith("| 1 | u042 |")]
    assert len(table_rows) == 1 and "Ignore previous instructions." in table_rows[0]  # each pair once
    assert "## Model comparison: qwen2.5:7b vs qwen2.5:14b" in md
    assert not any(ord(ch) >= 0x1F000 for ch in md)  # status words, no emoji


def test_markdown_cells_keep_the_column_count(run: RunResult) -> None:
    md = render_markdown(run)
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            columns = line.count("|")
            j = i + 1
            while j < len(lines) and lines[j].startswith("|"):
                unescaped = len(re.findall(r"(?<!\\)\|", lines[j]))
                assert unescaped == columns, lines[j]
                j += 1


# ------------------------------------------------------------------------------------------------ HTML


def test_html_escapes_model_output(page: str) -> None:
    parser = _Tags()
    parser.feed(page)
    assert parser.tags.count("script") == 2  # the pairs' JSON block and the page's own script
    markup = page
    for _, text in parser.scripts:
        markup = markup.replace(text, "")
    assert markup.lower().count("<script") == 2
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markup
    assert "&lt;img src=x onerror=alert(2)&gt;" in markup
    assert "<img src=x" not in page
    data = json.loads(parser.scripts[0][1])
    assert any(HOSTILE in row[8] for row in data["rows"])  # in the JSON block as data, never as markup
    assert "<" not in parser.scripts[0][1]


class _Tags(HTMLParser):
    """Collects the tags, attributes and script contents of a page as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [(name, value or "") for name, value in attrs]
        if tag == "script":
            self.scripts.append(({name: value or "" for name, value in attrs}, ""))
            self._in_script = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def _svgs(page: str) -> list[str]:
    return [base64.b64decode(data).decode("utf-8")
            for data in re.findall(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]*)"', page)]


def test_the_banner_gives_a_reason_even_for_a_verdict_without_a_message(run: RunResult, page: str) -> None:
    # The sample's verdicts carry only their checks (no message): the banner must still say why.
    assert not next(g for g in run.gates if g.verdict.outcome == FAIL).verdict.message
    banner = page.split('role="status">', 1)[1].split("</div></div>", 1)[0]
    failing = next(line for line in banner.split("<div>") if 'class="FAIL"' in line)
    assert failing.endswith("— overall: structural 0.320 [0.311, 0.330] &lt; 0.35 — and 1 more item did not "
                            "pass (temporal_shuffle; below)</div>"), failing


def test_html_is_self_contained(page: str) -> None:
    parser = _Tags()
    parser.feed(page)
    assert "link" not in parser.tags and "iframe" not in parser.tags and "object" not in parser.tags
    (data_attrs, _), (code_attrs, code) = parser.scripts
    assert data_attrs == {"type": "application/json", "id": "pairs-data"} and code_attrs == {}
    references = [value for name, value in parser.attributes if name in ("src", "href", "action", "srcset")]
    assert len(references) == 7 and all(r.startswith("data:image/svg+xml;base64,") for r in references)
    assert not any(name.startswith("on") for name, _ in parser.attributes)
    assert "url(" not in page and "@import" not in page
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?\s*(?:https?:)?//", page, re.IGNORECASE)
    # Only the page's own script may run, and nothing may be fetched.
    found = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    assert found
    policy = html.unescape(found.group(1))
    digest = base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii")
    rules = dict(rule.strip().split(" ", 1) for rule in policy.split(";"))
    assert rules["default-src"] == "'none'" and rules["img-src"] == "data:"
    assert rules["script-src"] == f"'sha256-{digest}'"


def test_html_has_charts_tables_and_worst_pairs(run: RunResult, page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("data:image/svg+xml;base64,") == 7  # 3 per model + the comparison
    assert html_report.PLOTS_NOTE not in page
    for heading in ("By perturbation", "By metric", "Kind × severity (ρ)", "Findings", "Model comparison",
                    "least robust pairs", "Generation failures (scored 0 on every metric)", "All 312 pairs"):
        assert heading in page
    assert '<span class="FAIL">FAIL</span> — tests/test_explanations.py::' in page
    assert "<th>original explanation</th><th>perturbed explanation</th>" in page
    assert "moved 14 items<details>" in page
    assert "<del>" in page and "<ins>" in page


def test_html_charts_are_scalable_deterministic_svg_with_text_as_outlines(run: RunResult, page: str) -> None:
    svgs = _svgs(page)
    assert len(svgs) == 7
    for svg in svgs:
        root = ET.fromstring(svg)  # well-formed, and no DOCTYPE to fetch
        assert root.tag == "{http://www.w3.org/2000/svg}svg" and len(root.get("viewBox", "").split()) == 4
        tags = {element.tag.rsplit("}", 1)[-1] for element in root.iter()}
        assert not tags & {"text", "script", "foreignObject", "a", "iframe"}, tags
        links = [v for element in root.iter() for k, v in element.attrib.items() if k.endswith("href")]
        # Glyphs are the file's own ids; the colour bar's gradient is a bitmap inside the file.
        assert links and all(link.startswith(("#", "data:image/png;base64,")) for link in links)
        assert "<!--" not in svg and "dc:date" not in svg
    # The page gives the images their size (no layout shift) and CSS scales them to the column's width.
    heatmap = r'<img alt="heatmap of ρ by kind and severity for qwen2\.5:7b" width="422" height="\d+" '
    assert re.search(heatmap, page)
    plotter = html_report.Plotter.load()
    assert plotter is not None
    summary = summarize(run, M7)
    with plotter.style():
        first, second = (plotter.svg(plotter.metric_bars(summary, THRESHOLDS)[0]) for _ in range(2))
    assert first == second and 'clip-path="url(#p' in first  # clip ids hashed with a fixed salt: one file


def _charts(run: RunResult) -> list[tuple[Any, str]]:
    plotter = html_report.Plotter.load()
    assert plotter is not None
    s7, s14 = summarize(run, M7), summarize(run, M14)
    charts = [plotter.heatmap(s7, 0.5), plotter.metric_bars(s7, THRESHOLDS), plotter.severity_curve(s7, 0.5),
              plotter.comparison_chart([s7, s14])]
    return [c for c in charts if c is not None]


def test_chart_legends_sit_outside_the_axes_and_inside_the_figure(run: RunResult) -> None:
    """The metric legend once covered the length bar: every legend now sits under its axes, apart from
    the bars, tick labels and titles, and whole inside the image."""
    plotter = html_report.Plotter.load()
    assert plotter is not None
    with plotter.style():
        charts = _charts(run)[1:]  # the heatmap has a colour bar, no legend
        for fig, alt in charts:
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            (legend,) = fig.legends
            box = legend.get_window_extent(renderer)
            for ax in fig.axes:
                assert ax.get_legend() is None, alt
                assert not box.overlaps(ax.get_tightbbox(renderer)), alt
            assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0, alt


def test_chart_text_is_legible_on_a_400_px_screen(run: RunResult) -> None:
    """A chart takes its column's width: ~384 CSS px on a 400 px screen. No text in it is smaller than 10 px
    there (the PNGs it replaces were shrunk until their 8 pt labels were 5 px)."""
    plotter = html_report.Plotter.load()
    assert plotter is not None
    from matplotlib.text import Text

    with plotter.style():
        for fig, alt in _charts(run):
            fig.canvas.draw()
            scale = 384 / (fig.get_size_inches()[0] * 96)
            sizes = [t.get_fontsize() * 96 / 72 * scale for t in fig.findobj(Text)
                     if t.get_visible() and t.get_text()]
            assert sizes and min(sizes) >= 10, (alt, min(sizes))


def test_the_pairs_table_holds_every_pair_once(run: RunResult, page: str) -> None:
    parser = _Tags()
    parser.feed(page)
    data = json.loads(parser.scripts[0][1])
    assert data == json.loads(json.dumps(html_report.pairs_data(run)))
    field = {name: i for i, name in enumerate(data["fields"])}
    assert len(data["rows"]) == len(run.pairs) == 312  # controls too
    for pair, row in zip(run.pairs, data["rows"], strict=True):
        key = pair.key
        names = (data["models"][row[field["model"]]], data["kinds"][row[field["kind"]]])
        assert names == (key.model, key.kind)
        assert (row[field["severity"]], row[field["user"]], row[field["item"]]) == (key.severity, key.user_id,
                                                                                    key.item_id)
        assert data["originals"][row[field["original"]]] == pair.original
        assert row[field["perturbed"]] == pair.perturbed and row[field["failure"]] == (pair.failure or "")
        assert [row[field[m]] for m in ("combined", *METRICS)] == [round(pair.metric(m), 3)
                                                                   for m in ("combined", *METRICS)]
    assert len(data["originals"]) == len({p.original for p in run.pairs}) == 6  # each text once, not 52 times
    # Columns to sort (ρ first: least robust on top), filters for every kind and severity, and pages.
    sortable = re.findall(r'<th data-field="(\w+)" data-type="\w+"(?: aria-sort="(\w+)")?><button', page)
    assert [f for f, _ in sortable] == ["model", "user", "item", "kind", "severity", "combined", *METRICS,
                                        "failure"]
    assert dict(sortable)["combined"] == "ascending"
    kinds = re.search(r'<select data-field="kind">(.*?)</select>', page)
    assert kinds and kinds.group(1).count("<option") == len(data["kinds"]) + 1
    assert '<div id="pairs-app" hidden>' in page and "<noscript>" in page  # shown by the script only


def test_html_without_matplotlib_still_renders_tables(run: RunResult, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    real_import = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    path = html_report.write_html(run, tmp_path / "report.html")
    text = path.read_text(encoding="utf-8")
    assert "charts need the plots extra: pip install 'pytest-robustexplain[plots]'" in text
    assert "data:image/" not in text and "<img" not in text
    assert "<h3>Kind × severity (ρ)</h3><div class=\"table-wrap\"><table>" in text and "By metric" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert '<section id="all-pairs">' in text  # the pairs table needs no matplotlib


# -------------------------------------------------------------------------------------------- paper


def test_paper_tables(run: RunResult) -> None:
    text = render_paper_tables(run)
    positions = [text.index(f"Table {n} — ") for n in range(1, 7)]
    assert positions == sorted(positions)
    assert text.count("\nPaper: ") == 6
    s7 = summarize(run, M7)
    noise = s7.by_kind["noise_injection"]
    assert re.search(rf"^qwen2\.5:7b\s+{noise.mean:.3f} \[{noise.low:.2f}, {noise.high:.2f}\]", text, re.M)
    assert "Overall" in text and "Average" in text
    table4 = text[text.index("Table 4"):text.index("Table 5")]
    assert table4.index("14.8B") < table4.index("7.6B")  # largest first, like the paper
    assert "Sem–Key 0.72" in text
    table6 = text[text.index("Table 6"):]
    assert re.search(r"^Semantic\s+1\.00\s+0\.\d\d", table6, re.M)


def _table(text: str, n: int) -> list[str]:
    """Table ``n``'s header and data rows (up to its Paper: line)."""
    block = text[text.index(f"Table {n} — "):].split("\nPaper: ")[0]
    return block.splitlines()[1:]


def test_paper_tables_have_the_papers_shapes(run: RunResult) -> None:
    """Rows and columns as the paper prints them (design/paper-reference.md): Tables 1 and 2 a row per model
    and an Average row; Table 3 a row per kind and Average, a column per severity; Table 5 a row per model and
    metric, a column per kind; Table 6 four by four."""
    text = render_paper_tables(run)
    kinds, metrics, models = 5, 4, [M7, M14]
    cell = r"\d\.\d{3} \[\d\.\d\d, \d\.\d\d\]\*?"
    one = _table(text, 1)
    assert [r.split()[0] for r in one[1:]] == [*models, "Average"]
    assert one[0].split()[1:] == ["Noise", "Shuffle", "Dilute", "Drift", "Missing", "Overall"]
    assert all(len(re.findall(cell, r)) == kinds + 1 for r in one[1:])
    two = _table(text, 2)
    assert [r.split()[0] for r in two[1:]] == [*models, "Average"]
    assert all(len(re.findall(cell, r)) == metrics for r in two[1:])
    three = _table(text, 3)
    assert [r.split()[0] for r in three[1:]] == ["Noise", "Shuffle", "Dilute", "Drift", "Missing", "Average"]
    assert three[0].split()[1:] == ["L1", "L2", "L3", "L4", "L5"]
    five = _table(text, 5)
    assert five[0].split()[1:] == ["Metric", "Noise", "Shuffle", "Dilute", "Drift", "Missing"]
    titles = ("Semantic", "Keyword", "Structural", "Length")
    assert [tuple(r.split()[:2]) for r in five[1:]] == [(m, t) for m in models for t in titles]
    columns = [[float(v[:5]) for v in re.findall(cell, r)] for r in five[1:]]
    starred = [[v.endswith("*") for v in re.findall(cell, r)] for r in five[1:]]
    for j in range(kinds):  # each column's best value, and only it, is starred
        best = max(row[j] for row in columns)
        assert [row[j] == best for row in columns] == [row[j] for row in starred]
    six = _table(text, 6)
    assert len(six) == 1 + metrics and all(len(r.split()) == 1 + metrics for r in six[1:])


def test_paper_tables_say_the_severity_test_tukey_and_the_size_gap(run: RunResult) -> None:
    from pytest_robustexplain.stats import severity_test

    text = render_paper_tables(run)
    found = severity_test(run.model_pairs(M7) + run.model_pairs(M14))
    assert found is not None and found.users == 6 and found.t is not None and found.d is not None
    assert re.search(rf"L1 vs L5: users' mean ρ {found.mean_l1:.3f} → {found.mean_l5:.3f} \([+-]\d+\.\d %\), "
                     rf"paired over 6 users: t\(5\) = {found.t:.2f}, p [=<] [\d.]+, "
                     rf"Cohen's d_z = {found.d:.2f}", text)
    assert text.count("Tukey HSD between kinds") == 1
    assert len(re.findall(r"^  \w+ − \w+: [+-]\d\.\d{3} \[", text, re.M)) == 10  # 5 kinds: 10 pairs
    assert re.search(r"Largest vs smallest: 14\.8B ρ 0\.\d{3} vs 7\.6B 0\.\d{3} \([+-]\d+\.\d %\)", text)
    assert "Formulas: " in text and "authors' released code" in text


def test_paper_tables_in_markdown_and_html_hold_the_same_cells_as_the_text(run: RunResult) -> None:
    """``report --tables paper --format markdown|html``: the same six tables, the paper's values, the severity
    test, Tukey and the size gap — each table's cells exactly the text table's (issue 40, item 2)."""
    text = render_paper_tables(run)
    markdown = render_paper_tables(run, "markdown")
    page = render_paper_tables(run, "html")
    for n in range(1, 7):
        block = markdown[markdown.index(f"### Table {n} — "):].split("\n*Paper: ")[0]
        md_rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in block.splitlines()
                   if line.startswith("| ")]
        text_rows = _table(text, n)
        assert len(md_rows) == len(text_rows), n
        for md, plain in zip(md_rows, text_rows, strict=True):  # the text joins the same cells with spaces
            assert " ".join(c for c in md if c.strip()).split() == plain.split(), n
    assert markdown.count("\n*Paper: ") == page.count('<p class="paper">Paper: ') == 6
    for said in ("L1 vs L5: users' mean ρ", "Tukey HSD between kinds", "Largest vs smallest: 14.8B",
                 "Formulas: ", "signature: "):
        assert said in markdown and said in page, said
    assert len(re.findall(r"^- \w+ − \w+: [+-]\d\.\d{3} \[", markdown, re.M)) == 10

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tables: list[list[list[str]]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: object) -> None:
            if tag == "table":
                self.tables.append([])
            elif tag == "tr":
                self.tables[-1].append([])
            elif tag in ("td", "th"):
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag in ("td", "th") and self.cell is not None:
                self.tables[-1][-1].append("".join(self.cell))
                self.cell = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    parsed = Cells()
    parsed.feed(page)
    assert len(parsed.tables) == 6 and page.startswith("<!DOCTYPE html>")
    for n, table in enumerate(parsed.tables, 1):
        expected = [r.split() for r in _table(text, n)]
        assert [" ".join(c for c in row if c).split() for row in table] == expected


def test_the_paper_tables_command_writes_markdown_and_html(tmp_path: Path, run: RunResult,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_robustexplain.cli import main

    report = tmp_path / "r.json"
    write_json(run, report)
    assert main(["report", str(report), "--tables", "paper", "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("## RobustExplain paper tables")
    assert main(["report", str(report), "--tables", "paper", "--format", "html", "-o",
                 str(tmp_path / "t.html")]) == 0
    assert "<h2>Table 5 — " in (tmp_path / "t.html").read_text(encoding="utf-8")


def test_the_severity_test_is_paired_by_user() -> None:
    from pytest_robustexplain.stats import severity_test

    def pair(user: str, severity: int, rho: float) -> PairResult:
        key = PairKey("m", user, "i", "noise_injection", severity, 0)
        return PairResult(key, rho, rho, rho, rho, rho, "a", "b")

    # Users differ a lot in level, but each loses 0.1 or 0.2 from L1 to L5: differences -.1 -.2 -.1 -.1,
    # mean -0.125, sd 0.05 — d_z = -2.5 and t(3) = -2.5 * sqrt(4) = -5.0, clear though the levels overlap.
    levels = {"u1": (0.9, 0.8), "u2": (0.5, 0.3), "u3": (0.2, 0.1), "u4": (0.7, 0.6)}
    pairs = [pair(u, s, rho) for u, (l1, l5) in levels.items() for s, rho in ((1, l1), (5, l5))]
    found = severity_test(pairs)
    assert found is not None and found.users == 4
    assert found.d == pytest.approx(-2.5) and found.t == pytest.approx(-5.0)
    assert found.p is not None and 0.01 < found.p < 0.02
    assert severity_test([pair("u1", 1, 0.5)]) is None
    flat = severity_test([pair("u1", 1, 0.5), pair("u1", 5, 0.4), pair("u2", 1, 0.6), pair("u2", 5, 0.5)])
    assert flat is not None and flat.t is None  # every user changed alike: no spread, no test


def test_paper_tables_unknown_size(run: RunResult) -> None:
    from pytest_robustexplain.report.paper_tables import parse_size

    unsized = replace(run, models=[{**m, "parameter_size": None} for m in run.models])
    table4 = render_paper_tables(unsized).split("Table 4")[1].split("Table 5")[0]
    assert re.search(r"^unknown\s+0\.\d{3} \[.*qwen2\.5:7b, qwen2\.5:14b$", table4, re.M)
    assert (parse_size("8.0B"), parse_size("500M"), parse_size("70b"), parse_size("big")) == (
        8e9, 5e8, 70e9, None)


if __name__ == "__main__":
    write_json(build_sample_run(), SAMPLE)
    sys.exit(0)


def test_markdown_of_a_failing_model_fits_one_screen_with_details_folded(run: RunResult) -> None:
    md = render_markdown(run)
    failing = next(s for s in md.split("## robustexplain — model ")[1:] if "**Status: FAIL**" in s)
    visible, folded = failing.split("<details>", 1)
    assert len(visible.strip().splitlines()) <= 40, visible  # status, tables, one line per failed item
    assert "**Failed items**" in visible and "- tests/test\\_explanations.py::" in visible
    assert "</details>" in folded and "original" in folded.lower()
    passing = next(s for s in md.split("## robustexplain — model ")[1:] if "**Status: PASS**" in s)
    assert "<details>" not in passing.split("## Model comparison")[0]


def test_html_colours_are_anchored_to_the_gate_not_to_the_runs_range() -> None:
    """0.84 in a run whose every cell passes a 0.5 gate is green, not the dark red of the run's minimum; a
    0.40 cell under that gate is red even when it is the run's maximum."""
    shade = html_report.gate_shade
    rgb = [tuple(int(x) for x in re.findall(r"\d+", shade(v, 0.5))) for v in (0.843, 0.99, 0.403, 0.5)]
    high, top, low, at_gate = rgb
    assert high[1] > high[0] and top[1] > top[0]  # green side
    assert low[0] > low[1]  # red side
    assert at_gate == (255, 235, 132)  # the gate itself is the neutral middle
    assert shade(0.843, 0.5) == shade(0.843, 0.5)  # the same value, the same colour in every run
    assert html_report.gate_position(0.95, 0.95) == 0.5 and html_report.gate_position(0.0, 0.0) == 0.5


_TABLE_PROBE = """<!DOCTYPE html><html><body><pre id="result">waiting</pre><script>
// Drives the pairs table of the framed report as a reader would and notes, after each step, the status
// line and the cells of one column on the page shown.
const frame = document.createElement("iframe");
frame.style.width = "1400px";
frame.addEventListener("load", () => {
  const w = frame.contentWindow;
  const d = frame.contentDocument;
  const heads = Array.from(d.querySelectorAll("#pairs-app thead th"));
  const steps = [];
  const note = (label, field) => {
    const column = heads.findIndex((th) => th.dataset.field === field);
    const rows = Array.from(d.querySelectorAll("#pairs-app tbody tr:not(.pair-detail)"));
    steps.push([label, d.querySelector(".pairs-status").textContent,
                rows.map((tr) => tr.children[column].textContent)]);
  };
  const click = (field) => d.querySelector(`th[data-field="${field}"] button`).click();
  const choose = (selector, value, event) => {
    const control = d.querySelector(selector);
    control.value = value;
    control.dispatchEvent(new w.Event(event));
  };
  note("initial", "combined");
  click("combined");
  note("ρ descending", "combined");
  click("severity");
  note("severity ascending", "severity");
  choose('select[data-field="kind"]', "%(kind)s", "change");
  note("kind", "kind");
  choose("input[type=search]", "TOYS", "input");
  note("kind and text", "user");
  choose("input[type=search]", "", "input");
  choose('select[data-field="severity"]', "3", "change");
  note("kind and severity", "severity");
  choose('select[data-field="kind"]', "", "change");
  choose('select[data-field="severity"]', "", "change");
  choose("select.page-size", "25", "change");
  d.querySelector('button[data-page="next"]').click();
  note("page 2", "severity");
  d.querySelector('button[data-page="last"]').click();
  note("last page", "severity");
  document.getElementById("result").textContent = JSON.stringify(steps);
});
frame.src = "report.html";
document.body.appendChild(frame);
</script></body></html>"""


def test_the_pairs_table_sorts_filters_searches_and_pages(run: RunResult, page: str, tmp_path: Path,
                                                          chromium: Any) -> None:
    """In headless Chromium: ρ ascending first, a header click reverses it, severities sort as numbers;
    the kind and severity selects and the text box (any case; user, item, explanations, what changed) filter;
    pages of 25 step on. Every count is checked against the run."""
    data = html_report.pairs_data(run)
    kind = data["kinds"].index("temporal_shuffle")
    (tmp_path / "report.html").write_text(page, encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(_TABLE_PROBE % {"kind": kind}, encoding="utf-8")
    steps = {label: (status, cells) for label, status, cells in chromium(probe)}

    rho = sorted(round(p.combined, 3) for p in run.pairs)
    status, cells = steps["initial"]
    assert status == "pairs 1–50 of 312" and [float(c) for c in cells] == rho[:50]
    status, cells = steps["ρ descending"]
    assert [float(c) for c in cells] == rho[::-1][:50]
    _, cells = steps["severity ascending"]
    severities = [int(c[1:]) for c in cells]
    assert severities == sorted(severities) and severities[0] == 0 and severities[-1] == 1  # controls first
    status, cells = steps["kind"]
    assert status == "pairs 1–50 of 60 (312 in the run)" and set(cells) == {"temporal_shuffle"}
    fields = {name: i for i, name in enumerate(data["fields"])}
    matching = [row for row in data["rows"] if row[fields["kind"]] == kind and "toys" in "\n".join(
        [row[fields["user"]], row[fields["item"]], row[fields["failure"]], row[fields["changes"]],
         data["originals"][row[fields["original"]]], row[fields["perturbed"]]]).lower()]
    status, cells = steps["kind and text"]
    assert 0 < len(matching) < 60 and status == f"pairs 1–{len(matching)} of {len(matching)} (312 in the run)"
    assert sorted(cells) == sorted(row[fields["user"]] for row in matching)
    status, cells = steps["kind and severity"]
    assert status == "pairs 1–12 of 12 (312 in the run)" and set(cells) == {"L3"}
    assert steps["page 2"][0] == "pairs 26–50 of 312"
    assert steps["last page"][0] == "pairs 301–312 of 312" and len(steps["last page"][1]) == 12


_TREND_PROBE = """<!DOCTYPE html><html><body><pre id="result">waiting</pre><script>
// Notes, once the framed report has loaded, each trend chart's drawn size, its text alternative and caption.
const frame = document.createElement("iframe");
frame.addEventListener("load", () => {
  const figures = Array.from(frame.contentDocument.querySelectorAll("figure.trend"));
  document.getElementById("result").textContent = JSON.stringify(figures.map((f) => {
    const img = f.querySelector("img");
    const caption = f.querySelector("figcaption").innerText;
    return [img.complete, img.naturalWidth, img.naturalHeight, img.alt, caption];
  }));
});
frame.src = "report.html";
document.body.appendChild(frame);
</script></body></html>"""


def test_the_trend_of_ten_runs_is_drawn_with_its_change_and_its_text_alternative(
        run: RunResult, tmp_path: Path, chromium: Any) -> None:
    """A history of ten runs whose ρ drops at run six, its intervals and limit kept: the HTML report draws
    the item's trend as an image the browser decodes, says the values and the change under it, and names
    it in its text alternative (issue 62)."""
    from pytest_robustexplain.report.history import chart_of, recent, trends

    gate = run.gates[0]
    records = []
    for index in range(10):
        rho = 0.9 if index < 5 else 0.6
        records.append({"v": 1, "time": f"2026-12-0{index % 9 + 1}T10:00:00+00:00", "commit": f"{index:07d}",
                        "signature": run.signature, "dataset": "synthetic", "models": {gate.model: None},
                        "items": [{"test": gate.nodeid, "model": gate.model, "outcome": "PASS",
                                   "values": {"stability": rho, "relative": 0.7},
                                   "bounds": {"stability": [rho - 0.05, rho + 0.04]},
                                   "limits": {"stability": 0.5, "relative": 0.5}}]})
    [trend] = trends(records)
    settings = {**run.settings, "history_trend": [{"test": gate.nodeid, "model": gate.model, "runs": 10,
                                                   "said": recent(trend), "chart": chart_of(trend)}]}
    (tmp_path / "report.html").write_text(html_report.render_html(replace(run, settings=settings)),
                                          encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(_TREND_PROBE, encoding="utf-8")
    [(complete, width, height, alt, caption)] = chromium(probe)
    assert complete and width > 300 and height > 150  # decoded and drawn
    assert alt == f"trend of ρ, R over runs 1–10 of {gate.nodeid}"
    rho_line, relative_line = caption.splitlines()
    assert rho_line == ("ρ, runs 1–10: 0.90, 0.90, 0.90, 0.90, 0.90, 0.60, 0.60, 0.60, 0.60, 0.60; changed "
                        "at run 6: 0.90 → 0.60 (p 0.007)")
    assert relative_line == "R, runs 1–10: " + ", ".join(["0.70"] * 10)
