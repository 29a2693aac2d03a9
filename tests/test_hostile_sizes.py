"""Hostile input, second round (issue 26): a small input that expands — YAML aliases, a huge reply, a
template that pads — stays bounded in memory and time and ends as one clear error or a counted cut."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.yaml_limits import MAX_YAML_VALUES, YamlTooLarge, check_expansion

MARKED = ("import pytest\n\n@pytest.mark.robustness(perturbations=['noise'], severities=[1])\n"
          "def test_gate(robustness):\n    pass\n")


def laughs(levels: int = 10, indent: str = "") -> str:
    """Billion laughs: ``levels`` anchors, each a list of nine aliases of the one before (9**levels)."""
    lines = [f"{indent}l0: &l0 [{', '.join(['lol'] * 9)}]"]
    for level in range(1, levels):
        lines.append(f"{indent}l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_the_expansion_is_measured_without_building_it() -> None:
    import yaml

    node = yaml.SafeLoader(laughs()).get_single_node()
    with pytest.raises(YamlTooLarge, match="more than 1,000,000 values"):
        check_expansion(node)
    check_expansion(yaml.SafeLoader(laughs(5)).get_single_node())  # 9**5 = 59,049 values: fine
    small = yaml.SafeLoader("a: [1, 2, {b: 3}]").get_single_node()
    check_expansion(small, limit=8)  # the mapping, a, the list, 1, 2, the inner mapping, b, 3
    with pytest.raises(YamlTooLarge):
        check_expansion(small, limit=7)
    assert MAX_YAML_VALUES >= 100_000


def test_an_alias_bomb_in_the_settings_file_is_one_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MARKED)
    (pytester.path / "robustexplain.yaml").write_text(laughs(), encoding="utf-8")
    result = pytester.runpytest("--robustexplain-backend=template")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "INTERNALERROR" not in result.stdout.str()
    result.stderr.fnmatch_lines(["*robustexplain.yaml: not a settings file: it expands to more than "
                                 "1,000,000 values*"])


def test_an_alias_bomb_in_a_data_file_is_one_data_error(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    histories = tmp_path / "h.json"
    histories.write_text(json.dumps([{"user_id": "u1", "interactions": [
        {"item_id": "i1", "timestamp": 1, "rating": 4}]}]), encoding="utf-8")
    catalog = tmp_path / "c.yaml"
    catalog.write_text("- item_id: i1\n  title: T\n  features:\n" + laughs(indent="    "), encoding="utf-8")
    code = cli.main(["run", "--backend", "template", "--histories", str(histories), "--catalog", str(catalog),
                     "--progress", "off", "-q"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert "c.yaml" in err and "expands to more than 1,000,000 values" in err and "Traceback" not in err


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_reply_larger_than_any_explanation_is_refused_unread(backend: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_robustexplain.testing import FakeOllamaServer

    with FakeOllamaServer() as server:
        server.bloat_next(1000)  # 20 MB of text in each JSON reply, past num_predict
        host = server.url + ("/v1" if backend == "openai" else "")
        code = cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host,
                         "--users", "2", "--perturbations", "noise", "--severities", "1", "--guard", "off",
                         "--retries", "0", "--cache", "off", "--progress", "off", "-q",
                         "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    # Every call refused is a broken backend, not a robustness finding: one sentence, no traceback.
    assert code == cli.EXIT_BACKEND, err
    assert "every model call failed" in err and "longer than 8 MiB" in err and "Traceback" not in err


# ---------------------------------------------------------------------- outside text in linear time
_OLD_THINK = re.compile(r"<(think|thinking)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_OLD_YEAR = re.compile(r"\s*\(\s*\d{4}\s*\)\s*$")
_OLD_ARTICLE = re.compile(r"^(?P<rest>.+),\s*(?P<article>the|a|an)$", re.IGNORECASE)


def _pieces(rng: random.Random, alphabet: list[str], n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_think_blocks_are_removed_as_the_regex_removed_them() -> None:
    from pytest_robustexplain.explainers.reply import _without_blocks

    rng = random.Random(5)
    alphabet = ["<think>", "</think>", "<thinking>", "</thinking>", "<THINK>", "</Thinking>", "a", " ", "\n",
                "<thin>", "think>"]
    for _ in range(3000):
        text = _pieces(rng, alphabet, rng.randrange(0, 14))
        assert _without_blocks(text) == _OLD_THINK.sub("", text), text


def test_title_forms_are_the_regexes_forms() -> None:
    from pytest_robustexplain.metrics.mentions import _title_forms

    def old(title: str) -> list[str]:
        base = _OLD_YEAR.sub("", title).strip()
        moved = _OLD_ARTICLE.match(base)
        return [base, f"{moved['article']} {moved['rest']}"] if moved else [base]

    rng = random.Random(6)
    alphabet = ["Matrix", ",", " ", "The", "the", "A", "an", "(", ")", "1999", "19", "\t", "x"]
    for _ in range(5000):
        title = _pieces(rng, alphabet, rng.randrange(0, 9))
        assert _title_forms(title) == old(title), repr(title)
    assert _title_forms("Matrix, The (1999)") == ["Matrix, The", "The Matrix"]


@pytest.mark.parametrize("text", [" " * 60_000, "<think>" * 15_000, ", " * 30_000 + "the", "(" * 50_000])
def test_pathological_outside_text_is_processed(text: str) -> None:
    # Each took seconds to minutes before (the regexes above); benchmarks/bench_text.py times them.
    from pytest_robustexplain.explainers.reply import strip_think
    from pytest_robustexplain.metrics.mentions import _title_forms

    assert isinstance(strip_think(text), str)
    assert _title_forms(text)[0] == text.strip()


@pytest.mark.parametrize("template", ["{history:>{n_interactions}{n_interactions}{n_interactions}}",
                                      "{history:{item_id}}", "{history:>{n_interactions}}"])
def test_a_template_whose_width_comes_from_the_data_is_refused(template: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_robustexplain.errors import ConfigError
    from pytest_robustexplain.explainers.prompt import PromptTemplate

    with pytest.raises(ConfigError, match="puts a placeholder inside a format spec"):
        PromptTemplate(template)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(f"Explain from {template}", encoding="utf-8")
    # Said before any call: the host has no server at all.
    assert cli.main(["run", "--model", "m", "--host", "http://127.0.0.1:9", "--prompt", str(prompt),
                     "--progress", "off"]) == 2
    assert "puts a placeholder inside a format spec" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["ollama", "openai"])
def test_a_prompt_no_context_could_hold_is_one_data_error_before_any_call(
        backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """100,000 interactions with max-history=all: an 8 MB prompt, said before the first call, naming the
    user and the setting, instead of gigabytes of prompts sent and cached."""
    from pytest_robustexplain.explainers.prompt import MAX_PROMPT_CHARS
    from pytest_robustexplain.testing import FakeOllamaServer

    catalog = [{"item_id": f"I{i}", "title": f"Item number {i} of a long catalog", "category": "Books"}
               for i in range(1000)]
    (tmp_path / "catalog.json").write_text(json.dumps(catalog), encoding="utf-8")
    heavy = {"user_id": "heavy", "interactions": [{"item_id": f"I{i % 999}", "rating": 4, "timestamp": i}
                                                   for i in range(100_000)]}
    light = {"user_id": "light", "interactions": [{"item_id": f"I{i}", "rating": 3} for i in range(5)]}
    (tmp_path / "h.jsonl").write_text(f"{json.dumps(heavy)}\n{json.dumps(light)}\n", encoding="utf-8")
    (tmp_path / "cases.json").write_text(json.dumps([{"user_id": u, "item_id": "I999"}
                                                     for u in ("heavy", "light")]), encoding="utf-8")
    with FakeOllamaServer() as server:
        host = server.url + ("/v1" if backend == "openai" else "")
        code = cli.main(["run", "--backend", backend, "--model", "fake-model:latest", "--host", host,
                         "--histories", str(tmp_path / "h.jsonl"), "--catalog",
                         str(tmp_path / "catalog.json"), "--cases", str(tmp_path / "cases.json"),
                         "--max-history", "all",
                         "--perturbations", "noise", "--severities", "1", "--guard", "off", "--cache", "off",
                         "--progress", "off", "-q"])
        chat_calls = server.chat_calls
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert chat_calls == 0, "said before any model call"
    assert "user heavy's prompt is" in err and f"1 of 2 users over {MAX_PROMPT_CHARS:,}" in err
    assert "Lower --max-history" in err and "Traceback" not in err
