"""The engine's run without pytest: plan, price, run, decide and judge with the template backend."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_robustexplain.engine import Run, gate_slices, outcome_of
from pytest_robustexplain.results import FAIL, INCONCLUSIVE, PASS
from pytest_robustexplain.settings import PYTEST_SPELLING, Settings, apply_marker


def _run(tmp_path: Path, **settings: object) -> Run:
    chosen: dict[str, object] = {"backend": "template", "users": 6, "severities": (1, 4), "cache": "off",
                                 **settings}
    base = replace(Settings.defaults(), **chosen)  # type: ignore[arg-type]
    return Run(base, base_dir=tmp_path, spelling=PYTEST_SPELLING)


def _plan_bare(run: Run, **marker: object) -> list[str]:
    gate = apply_marker(run.settings, marker, nodeid="t")
    return [run.plan(gate, nodeid=f"t[{name}]", model="template", slice_name=name).spec.slice_id
            for name in gate_slices(gate)]


def test_a_run_prices_what_it_then_runs_and_decides_every_slice_once(tmp_path: Path) -> None:
    run = _run(tmp_path)
    slice_ids = _plan_bare(run)
    priced = {p.slice_id: p for p in run.price()}
    assert set(priced) == set(slice_ids) and all(run.decided(s) is None for s in slice_ids)
    result = run.run_all()
    for slice_id in slice_ids:
        decided = run.decided(slice_id)
        assert decided is not None and run.result(slice_id) is decided  # decided once, then looked up
        assert len(decided.pairs) == priced[slice_id].pairs  # the sweep ran what the planner priced
    assert {g.nodeid for g in result.gates} == {f"t[{name}]" for name in (
        "noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values",
        "overall")}


def test_outcomes_follow_the_inconclusive_policy_and_carry_the_junit_properties(tmp_path: Path) -> None:
    run = _run(tmp_path, users=3)  # three users cannot decide the template's gates: INCONCLUSIVE
    _plan_bare(run)
    run.run_all()
    outcomes = run.outcomes()
    assert len(outcomes) == 6
    for outcome in outcomes:
        verdict = outcome.result.verdict
        assert verdict.outcome in (PASS, FAIL, INCONCLUSIVE)
        assert dict(outcome.properties)["robustexplain_outcome"] == verdict.outcome
        for policy, passes, warns in (("fail", False, False), ("pass", True, False), ("warn", True, True)):
            if verdict.outcome == INCONCLUSIVE:
                judged = outcome_of(outcome.nodeid, outcome.result, policy)
                assert (judged.passed, judged.warning is not None) == (passes, warns), policy
    assert any(o.result.verdict.outcome == INCONCLUSIVE and not o.passed for o in outcomes)


def test_an_unknown_inconclusive_policy_is_a_config_error(tmp_path: Path) -> None:
    from pytest_robustexplain.errors import ConfigError

    run = _run(tmp_path, users=3)
    slice_id = _plan_bare(run)[0]
    run.run_all()
    decided = run.decided(slice_id)
    assert decided is not None
    with pytest.raises(ConfigError, match="inconclusive_policy='maybe'"):
        outcome_of("t", decided, "maybe")


def test_one_rule_expands_a_gated_test_into_items_for_both_doors(tmp_path: Path) -> None:
    from pytest_robustexplain.engine import expand

    run = _run(tmp_path)
    gate = apply_marker(run.settings, {"perturbations": ["noise", "shuffle"]}, nodeid="t")
    assert [p.label for p in expand(("m",), gate)] == ["noise_injection", "temporal_shuffle", "overall"]
    two = expand(("a", "b"), gate)
    assert [p.label for p in two][:3] == ["a-noise_injection", "a-temporal_shuffle", "a-overall"]
    assert {p.model for p in two} == {"a", "b"} and len(two) == 6
    assert next((p.model, p.label) for p in expand((), gate)) == ("", "noise_injection")  # no model named


def test_the_engine_keeps_the_items_a_door_asks_about_and_plans_each_once(tmp_path: Path) -> None:
    from pytest_robustexplain.engine import expand

    run = _run(tmp_path)
    gate = apply_marker(run.settings, {"perturbations": ["noise"]}, nodeid="t")
    (param,) = expand(("template",), gate)
    item = run.expect("t[noise_injection]", gate, param)
    assert run.expect("t[noise_injection]", gate, param) is item and item.slice_id == ""
    own = run.expect("t2[noise_injection]", gate, param, own_explainer=True)
    assert own.own_explainer and set(run.items) == {"t[noise_injection]", "t2[noise_injection]"}
    planned = run.plan_item(item.ref)
    assert item.slice_id == planned.spec.slice_id == "t[noise_injection]::template"
    assert run.plan_item(item.ref) is planned  # planned once
    run.forget(["t2[noise_injection]", "never-registered"])
    assert set(run.items) == {"t[noise_injection]"}
    # An unmarked test's perturbations: the same planner, never started (no sweep, no explainer).
    listed = run.perturbations_of(gate)
    assert listed and {p.kind for p in listed} == {"noise_injection"} and run.call_counters() == {}
    run.run_all()
    assert run.outcome(item.slice_id).nodeid == "t[noise_injection]"
