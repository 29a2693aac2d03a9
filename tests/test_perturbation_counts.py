"""``perturbation-counts`` (issue 40, item 3): ``paper`` inserts exactly s items for noise and dilution, as
the paper and the guide write it; ``proportional`` (the default) stays what it was; the choice enters the
signature, so a baseline or ``compare`` of the other rule is refused with the reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_robustexplain import api, cli
from pytest_robustexplain.cli.common import CommandError
from pytest_robustexplain.cli.compare import check_comparable
from pytest_robustexplain.data import default_dataset
from pytest_robustexplain.errors import ConfigError
from pytest_robustexplain.perturbations import DEFAULT_REGISTRY, KindRegistry, apply_perturbation
from pytest_robustexplain.report.json_report import read_json
from pytest_robustexplain.testing import FakeOllamaServer

pytest_plugins = ["pytester"]

INSERTING = ("noise_injection", "behavior_dilution")
OTHERS = ("temporal_shuffle", "category_drift", "missing_values")


def _case_with(length: int) -> tuple[object, object]:
    dataset = default_dataset()
    case = next(c for c in dataset.cases if len(c.history) >= length)
    return case, dataset.catalog


@pytest.mark.parametrize("kind", INSERTING)
@pytest.mark.parametrize("severity", [1, 2, 3, 4, 5])
def test_paper_counts_insert_exactly_s_items(kind: str, severity: int) -> None:
    case, catalog = _case_with(40)
    n = len(case.history)
    paper = KindRegistry(base=DEFAULT_REGISTRY, counts="paper")
    literal = apply_perturbation(case.history, kind, severity, catalog=catalog, seed=3, item_id=case.item_id,
                                 kinds=paper)
    scaled = apply_perturbation(case.history, kind, severity, catalog=catalog, seed=3, item_id=case.item_id)
    assert len(literal.changes["inserted"]) == severity == len(literal.perturbed) - n
    assert len(scaled.changes["inserted"]) == max(1, (severity * n + 5) // 10)  # unchanged default


@pytest.mark.parametrize("kind", OTHERS)
def test_the_other_kinds_do_not_depend_on_the_rule(kind: str) -> None:
    case, catalog = _case_with(20)
    paper = KindRegistry(base=DEFAULT_REGISTRY, counts="paper")
    for severity in (1, 5):
        a = apply_perturbation(case.history, kind, severity, catalog=catalog, seed=3, item_id=case.item_id)
        b = apply_perturbation(case.history, kind, severity, catalog=catalog, seed=3, item_id=case.item_id,
                               kinds=paper)
        assert a.perturbed == b.perturbed and a.changes == b.changes


def test_a_registered_kind_keeps_working_under_the_paper_rule() -> None:
    own = KindRegistry(base=DEFAULT_REGISTRY)
    own.register("drop_oldest", lambda history, severity, catalog, rng: (
        type(history)(history.user_id, history.interactions[1:]), {"dropped": 1}))
    paper = KindRegistry(base=own, counts="paper")  # what a run with conftest kinds builds
    case, catalog = _case_with(20)
    result = apply_perturbation(case.history, "drop_oldest", 2, catalog=catalog, seed=1, kinds=paper)
    assert len(result.perturbed) == len(case.history) - 1


def test_the_python_api_takes_the_rule_by_name() -> None:
    history = [{"item_id": f"i{k}", "category": "Books", "rating": 4, "timestamp": 1_700_000_000 + k}
               for k in range(30)]
    catalog = [{"item_id": f"c{k}", "category": "Toys"} for k in range(40)]
    assert len(api.noise_injection(history, 2, catalog=catalog, counts="paper")) == 32
    assert len(api.noise_injection(history, 2, catalog=catalog)) == 36  # round(0.1 * 2 * 30) = 6
    with pytest.raises(ConfigError, match="counts must be one of proportional, paper"):
        api.apply_perturbation(history, "noise", 2, catalog=catalog, counts="literal")


# ------------------------------------------------------------------------- a run, its signature, its baseline
def _gate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_gate="""
import pytest

@pytest.mark.robustness(perturbations=["noise_injection", "temporal_shuffle"], severities=[1, 4])
def test_gate(robustness):
    pass
""")
    return pytester.runpytest("--robustexplain-backend=template", "--robustexplain-users=3", "-p",
                              "no:cacheprovider", *args)


def test_a_paper_run_inserts_s_items_and_says_so_in_its_signature(pytester: pytest.Pytester) -> None:
    _gate(pytester, "--robustexplain-perturbation-counts=paper", "--robustexplain-json=paper.json")
    report = json.loads((pytester.path / "paper.json").read_text(encoding="utf-8"))
    assert report["signature"].endswith("|counts:paper")  # after the metrics' part, before any user metric
    assert report["settings"]["perturbation_counts"] == "paper"
    noise = [p for p in report["pairs"] if p["key"]["kind"] == "noise_injection"]
    assert noise and all(len(p["changes"]["inserted"]) == p["key"]["severity"] for p in noise)
    _gate(pytester, "--robustexplain-json=default.json")
    default = json.loads((pytester.path / "default.json").read_text(encoding="utf-8"))
    assert "counts" not in default["signature"]  # a default run's signature is what it always was
    assert default["settings"]["perturbation_counts"] == "proportional"


@pytest.mark.parametrize(("saved", "now"), [((), ("--robustexplain-perturbation-counts=paper",)),
                                            (("--robustexplain-perturbation-counts=paper",), ())])
def test_a_baseline_of_the_other_rule_is_refused_naming_it(pytester: pytest.Pytester, saved: tuple[str, ...],
                                                           now: tuple[str, ...]) -> None:
    _gate(pytester, *saved, "--robustexplain-json=base.json")  # 3 users: INCONCLUSIVE, but recorded
    assert (pytester.path / "base.json").is_file()
    result = _gate(pytester, *now, "--robustexplain-baseline=base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    theirs, ours = ("paper", "proportional") if saved else ("proportional", "paper")
    result.stderr.fnmatch_lines([f"*perturbed its histories with perturbation-counts={theirs} and this run "
                                 f"uses {ours}*"])


def test_compare_refuses_runs_of_the_two_rules(pytester: pytest.Pytester) -> None:
    _gate(pytester, "--robustexplain-perturbation-counts=paper", "--robustexplain-json=paper.json")
    _gate(pytester, "--robustexplain-json=default.json")
    paper, default = read_json(pytester.path / "paper.json"), read_json(pytester.path / "default.json")
    with pytest.raises(CommandError, match=r"perturbation-counts=paper and b\.json with proportional"):
        check_comparable(paper, "a.json", default, "b.json")
    check_comparable(paper, "a.json", paper, "a.json")


def test_the_command_takes_it_beside_the_paper_protocol(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("ROBUSTEXPLAIN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    with FakeOllamaServer() as fake:
        code = cli.main(["run", "--model", "fake-model", "--host", fake.url, "--protocol", "paper",
                         "--perturbation-counts", "paper", "--users", "2", "--severities", "2",
                         "--perturbations", "noise_injection", "--progress", "off", "-q", "--guard", "off",
                         "--min-combined", "0", "--min-metric", "0", "--json", str(tmp_path / "r.json")])
    assert code == 0
    report = read_json(tmp_path / "r.json")
    assert report.settings["perturbation_counts"] == "paper" and "|counts:paper" in report.signature
    assert "perturbation_counts" not in report.settings.get("protocol_departures", {})
    noise = [p for p in report.pairs if p.key.kind == "noise_injection"]
    assert noise and all(len(p.changes["inserted"]) == 2 for p in noise)


def test_a_bad_value_is_one_usage_error(pytester: pytest.Pytester) -> None:
    result = _gate(pytester, "--robustexplain-perturbation-counts=papr")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*perturbation-counts*papr*"])
    with pytest.raises(ConfigError):
        KindRegistry(base=DEFAULT_REGISTRY, counts="paper").canonical("no_such_kind")
