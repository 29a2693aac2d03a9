"""Cost in currency (issue 42, item 2): a price per model turns the tokens the server counted into money in
every writer, the dry run estimates it from the last run's tokens, and max-cost sizes a gate to fit — and
without a price nothing changes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.options.parsers import Invalid, parse_price
from pytest_robustexplain.report.json_report import read_json
from pytest_robustexplain.report.pr_comment import render_pr_comment

pytestmark = pytest.mark.usefixtures("isolated")

BASE = ("--model", "fake-model", "--perturbations", "noise", "--severities", "1,3", "--progress", "off",
        "--cache-dir", "cache", "--users", "4")
PRICE = ("--price", "0.15/0.60")


def _run(server: Any, name: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["run", "--host", server.url, *BASE, "--json", name, *extra])
    return code, json.loads(Path(name).read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------ the setting
@pytest.mark.parametrize(("raw", "prices"), [
    ("0.15/0.60", {"*": (0.15, 0.6)}),
    ("gpt-4o-mini=0.15/0.60,llama3.1:8b=0/0", {"gpt-4o-mini": (0.15, 0.6), "llama3.1:8b": (0.0, 0.0)}),
    ({"input": 1, "output": 2}, {"*": (1.0, 2.0)}),
    ({"m": {"input": 1, "output": 2}, "n": "3/4"}, {"m": (1.0, 2.0), "n": (3.0, 4.0)}),
    ("", {}),
])
def test_a_price_is_input_and_output_per_million_tokens(raw: Any, prices: dict[str, Any]) -> None:
    assert dict(parse_price(raw)) == prices


@pytest.mark.parametrize(("raw", "said"), [
    ("0.15", "INPUT/OUTPUT per million tokens"), ("m=1/nan", "m: must be a finite number"),
    ("-1/2", "between 0 and"), ({"input": 1}, "{input: X, output: Y}"), ("1/1e9", "between 0 and"),
    ("a=1/2,b", "mix of plain and name=value"),
])
def test_a_price_that_is_not_one_is_refused(raw: Any, said: str) -> None:
    with pytest.raises(Invalid, match=None) as caught:
        parse_price(raw)
    assert said in str(caught.value)


@pytest.mark.parametrize(("amount", "shown"), [(0.0024, "0.0024"), (0.00057, "0.00057"), (1.5e-5, "0.000015"),
                                              (0.5, "0.50"), (1.266, "1.27"), (1340.2, "1,340"), (0.0, "0")])
def test_an_amount_is_shown_with_two_significant_digits_and_never_in_exponent_form(amount: float,
                                                                                  shown: str) -> None:
    from pytest_robustexplain.results import money

    assert money(amount) == shown


# ------------------------------------------------------------------------------ every writer
def test_a_price_turns_the_counted_tokens_into_a_cost_in_every_writer(server: Any,
                                                                      capsys: pytest.CaptureFixture[str]
                                                                      ) -> None:
    code, doc = _run(server, "r.json", *PRICE, "--html", "r.html", "--markdown", "r.md",
                     "--junitxml", "j.xml")
    assert code == 0
    tokens, money = doc["aggregates"]["fake-model"]["cost"], doc["aggregates"]["fake-model"]["money"]
    assert money["total"] == pytest.approx((tokens["prompt"] * 0.15 + tokens["completion"] * 0.60) / 1e6)
    assert money["spent"] == pytest.approx(money["total"])  # nothing came from the cache
    assert "noise_injection" in money["by_kind"] and money["originals"] > 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Cost (at the price set)" in out and "price 0.15/0.6 per million tokens" in out
    for name in ("r.html", "r.md"):
        assert "Cost (at the price set)" in Path(name).read_text(encoding="utf-8"), name
    assert "Cost of the replies read (at the price set)" in render_pr_comment(read_json("r.json"))
    costs = [float(p.get("value")) for p in ET.parse("j.xml").iter("property")
             if p.get("name") == "robustexplain_cost"]
    assert costs and all(0 < c <= money["total"] + 1e-12 for c in costs)  # each item's share of the run
    # A warm rerun reads the same replies: the same cost of what the verdicts read, nothing spent.
    _, warm = _run(server, "warm.json", *PRICE)
    again = warm["aggregates"]["fake-model"]["money"]
    assert again["total"] == pytest.approx(money["total"]) and again["spent"] == 0


def test_without_a_price_no_writer_says_cost(server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _run(server, "r.json", "--html", "r.html", "--markdown", "r.md", "--junitxml", "j.xml")
    assert code == 0 and doc["aggregates"]["fake-model"]["money"] == {}
    assert not [p for p in ET.parse("j.xml").iter("property") if p.get("name") == "robustexplain_cost"]
    texts = [capsys.readouterr().out, Path("r.html").read_text(encoding="utf-8"),
             Path("r.md").read_text(encoding="utf-8"), render_pr_comment(read_json("r.json"))]
    assert not any("Cost" in text for text in texts)


def test_compare_says_what_each_sides_replies_cost_at_its_price(server: Any,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs side by side (a model change, a prompt change): what each side's replies cost is part of
    the choice; a side without a price says so, and without a price on either side nothing is said."""
    _run(server, "priced.json", *PRICE)
    _run(server, "unpriced.json")
    capsys.readouterr()
    for fmt in ("terminal", "markdown"):
        assert cli.main(["compare", "priced.json", "unpriced.json", "--format", fmt]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "Cost (at the price each run set):" in out, fmt
        assert "A = " in out and "price 0.15/0.6 per million tokens" in out.split("Cost (at the price")[1]
        assert "B = no price set, or the server counted no tokens" in out
    _run(server, "unpriced-again.json")
    capsys.readouterr()
    assert cli.main(["compare", "unpriced.json", "unpriced-again.json"]) == 0
    assert "Cost" not in capsys.readouterr().out


# ------------------------------------------------------------------------------ the dry run and max-cost
def test_the_dry_run_estimates_the_cost_once_a_run_has_counted_tokens(server: Any,
                                                                     capsys: pytest.CaptureFixture[str]
                                                                     ) -> None:
    assert cli.main(["run", "--host", server.url, *BASE, *PRICE, "--dry-run"]) == 0
    assert "the cost is known once a run has counted a call's tokens" in capsys.readouterr().out
    _run(server, "r.json", *PRICE)
    capsys.readouterr()
    assert cli.main(["run", "--host", server.url, *BASE, *PRICE, "--users", "8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "fake-model: ≈ " in out and " for these " in out and " calls at its price (" in out


def test_max_cost_sizes_the_gate_to_fit_and_says_so(server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # Before any run: sized on the most a call can cost (a full context and num-predict).
    code, doc = _run(server, "r.json", *PRICE, "--max-cost", "0.005", "--inconclusive", "warn")
    err = capsys.readouterr().err
    assert "max-cost 0.005: this test's gate costs up to " in err
    assert "before any measured call: a full context of" in err
    assert code == 0 and {len(g["scope"]["users"]) for g in doc["gates"]} == {2}
    spent = doc["aggregates"]["fake-model"]["money"]["spent"]
    assert spent <= 0.005
    # After it: sized on the tokens a call took, so more users fit the same budget.
    _, again = _run(server, "again.json", *PRICE, "--max-cost", "0.005", "--users", "20", "--inconclusive",
                    "warn")
    assert "tokens a call last time" in capsys.readouterr().err
    assert len(again["gates"][0]["scope"]["users"]) > 2


@pytest.mark.parametrize(("extra", "said"), [
    ((), "needs the price of the model's tokens"),
    (("--price", "other=1/2"), "model 'fake-model' has no price"),
])
def test_max_cost_without_a_price_for_the_model_is_a_usage_error(
        server: Any, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], said: str) -> None:
    code = cli.main(["run", "--host", server.url, *BASE, "--max-cost", "1", *extra])
    assert code == 2
    assert said in capsys.readouterr().err


def test_max_cost_counts_the_judges_calls_and_the_dry_run_prices_them(server: Any,
                                                                      capsys: pytest.CaptureFixture[str]
                                                                      ) -> None:
    """Judge calls count in the budget: before any run at the most a judge call can take, after one at its
    tokens a call; what the run then spends on the model and its judge stays under the budget."""
    judged = (*PRICE, "--judge-model", "fake-model", "--inconclusive", "warn")
    assert cli.main(["run", "--host", server.url, *BASE, *judged, "--dry-run"]) == 0
    assert "fake-model (judge): the cost is known once a run has counted a judge call's tokens" in (
        capsys.readouterr().out)
    code, doc = _run(server, "r.json", *judged, "--max-cost", "0.012")
    err = " ".join(capsys.readouterr().err.split())
    assert "; and judge calls: 2 at " in err
    assert "fake-model before any measured judge call: a full context" in err
    users = {len(g["scope"]["users"]) for g in doc["gates"]}
    assert code == 0 and users == {2}
    spent = doc["aggregates"]["fake-model"]["money"]["spent"] + doc["judge_cost"]["fake-model"]["spent"]
    assert 0 < spent <= 0.012 and doc["judge_cost"]["fake-model"]["spent"] > 0
    # Without the judge's calls the same budget holds more users: they are what cut it to two.
    _, unjudged = _run(server, "unjudged.json", *PRICE, "--inconclusive", "warn", "--max-cost", "0.012",
                       "--cache-dir", "other")
    assert len(unjudged["gates"][0]["scope"]["users"]) > 2
    capsys.readouterr()
    # After the judged run: its tokens a judge call are known, for max-cost and the dry run alike.
    assert cli.main(["run", "--host", server.url, *BASE, *judged, "--max-cost", "0.012", "--users", "20",
                     "--dry-run"]) == 0
    said = " ".join("".join(capsys.readouterr()).split())
    assert "fake-model's tokens a judge call last time" in said
    assert "fake-model (judge): ≈ " in said and " judge calls at its price (" in said


def test_max_cost_with_a_judge_that_has_no_price_is_a_usage_error(server: Any,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "--host", server.url, *BASE, "--price", "fake-model=0.15/0.60", "--judge-model",
                     "other-judge", "--max-cost", "1"])
    assert code == 2
    assert "judge model 'other-judge' has no price" in capsys.readouterr().err


def test_the_pytest_door_gives_each_items_cost_as_a_junit_property(pytester: pytest.Pytester, server: Any
                                                                   ) -> None:
    from helpers import marked, run_fake

    pytester.makepyfile(test_gate=marked('perturbations=["noise"], severities=[1], users=4, guard="off"'))
    run_fake(pytester, server, "--robustexplain-price=0.15/0.60", "--junitxml=j.xml",
             "-p", "no:cacheprovider")
    costs = {p.get("value") for p in ET.parse(pytester.path / "j.xml").iter("property")
             if p.get("name") == "robustexplain_cost"}
    assert len(costs) == 1 and float(costs.pop()) > 0


# ------------------------------------------------------------------------------ the judge's calls
JUDGES = {"judge-a:latest": "strict", "judge-b:latest": "lenient"}


def _judged_run(pytester: pytest.Pytester, server: Any, *extra: str
                ) -> tuple[pytest.RunResult, dict[str, Any]]:
    from helpers import read_report, run_fake

    result = run_fake(pytester, server, "-p", "no:randomly", "--robustexplain-judge-model=judge-a,judge-b",
                      "--robustexplain-price=judge-a=1/2,judge-b=3/4,fake-model=0.15/0.60",
                      "--robustexplain-json=r.json", "--robustexplain-html=r.html",
                      "--robustexplain-markdown=r.md", *extra)
    return result, read_report(pytester)


def test_the_judges_calls_count_at_each_judges_own_price(pytester: pytest.Pytester,
                                                         xdist_args: tuple[str, ...],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Judge calls count (issue 42): each judge's replies are priced at its own model's price from the
    tokens its server counted, summed over xdist workers; every writer says so, the history keeps what the
    run spent, and a warm rerun reads the same replies and spends nothing on them."""
    from helpers import marked

    from pytest_robustexplain.testing import FakeOllamaServer

    pytester.makepyfile(test_gate=marked('perturbations=["noise"], severities=[1], users=4, guard="off", '
                                         'min_faithful_rate=0.5'))
    with FakeOllamaServer(models=("fake-model:latest", *JUDGES), judge=JUDGES) as server:
        result, doc = _judged_run(pytester, server, *xdist_args)
        asked = server.judge_calls
    assert asked == 16  # 4 originals, each forward and reversed, by each of two judges
    tokens, cost = doc["judge_tokens"], doc["judge_cost"]
    assert sum(t["replies"] for t in tokens.values()) == asked
    for model, (inp, out) in (("judge-a", (1, 2)), ("judge-b", (3, 4))):
        counted = tokens[model]
        assert counted["made_prompt"] == counted["prompt"] > 0 and counted["completion"] > 0
        priced = (counted["prompt"] * inp + counted["completion"] * out) / 1e6
        assert cost[model]["total"] == pytest.approx(priced)
        assert cost[model]["spent"] == pytest.approx(cost[model]["total"])  # nothing from the cache
    out = " ".join(result.stdout.str().split())
    for text in (out, (pytester.path / "r.md").read_text(encoding="utf-8"),
                 (pytester.path / "r.html").read_text(encoding="utf-8")):
        assert "judge cost (at the price set)" in text and "judge-a: 0.0" in text  # the HTML: in two cells
        assert "price 3/4 per million tokens" in text
    assert read_json(pytester.path / "r.json").judge_tokens == tokens  # the record reads back whole
    comment = render_pr_comment(read_json(pytester.path / "r.json"))
    assert "Judge cost (at the price set):\n- judge-a: 0.0" in comment and "- judge-b: 0.0" in comment
    (pytester.path / "r.json").rename(pytester.path / "cold.json")
    history = [json.loads(line) for line in (pytester.path / ".robustexplain-cache" / "history.jsonl")
               .read_text(encoding="utf-8").splitlines()]
    assert history[-1]["cost"]["judge-b"] == pytest.approx(cost["judge-b"]["spent"], abs=1e-6)
    with FakeOllamaServer(models=("fake-model:latest", *JUDGES), judge=JUDGES) as server:
        _, warm = _judged_run(pytester, server, *xdist_args)
        assert server.judge_calls == 0
    for model in ("judge-a", "judge-b"):
        assert warm["judge_cost"][model]["total"] == pytest.approx(cost[model]["total"])
        assert warm["judge_cost"][model]["spent"] == 0
    capsys.readouterr()
    assert cli.main(["compare", str(pytester.path / "cold.json"), str(pytester.path / "r.json")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "Judge cost (at the price set), each run's judges: A = judge-a: " in said
    assert "B = judge-a: " in said and "0 spent this run" in said.split("B = judge-a:")[1]


def test_a_judge_without_a_price_costs_nothing_said(pytester: pytest.Pytester) -> None:
    from helpers import marked, read_report, run_fake

    from pytest_robustexplain.testing import FakeOllamaServer

    pytester.makepyfile(test_gate=marked('perturbations=["noise"], severities=[1], users=4, guard="off"'))
    with FakeOllamaServer(models=("fake-model:latest", *JUDGES), judge=JUDGES) as server:
        result = run_fake(pytester, server, "-p", "no:randomly", "--robustexplain-judge-model=judge-a",
                          "--robustexplain-price=fake-model=0.15/0.60", "--robustexplain-json=r.json")
    doc = read_report(pytester)
    assert doc["judge_tokens"]["judge-a"]["replies"] == 8 and "judge_cost" not in doc
    assert "judge cost" not in result.stdout.str()
