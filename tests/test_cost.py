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
from pytest_robustexplain.report.json_report import read_json
from pytest_robustexplain.report.pr_comment import render_pr_comment
from pytest_robustexplain.settings.parsers import Invalid, parse_price

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



def test_the_pytest_door_gives_each_items_cost_as_a_junit_property(pytester: pytest.Pytester, server: Any
                                                                   ) -> None:
    from helpers import marked, run_fake

    pytester.makepyfile(test_gate=marked('perturbations=["noise"], severities=[1], users=4, guard="off"'))
    run_fake(pytester, server, "--robustexplain-price=0.15/0.60", "--junitxml=j.xml",
             "-p", "no:cacheprovider")
    costs = {p.get("value") for p in ET.parse(pytester.path / "j.xml").iter("property")
             if p.get("name") == "robustexplain_cost"}
    assert len(costs) == 1 and float(costs.pop()) > 0
