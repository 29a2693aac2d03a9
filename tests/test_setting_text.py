"""A setting's text never carries a line break or an invisible character into a CI log (issue 41): a model
name with a newline and "::error …" became a workflow command in the "not found" message. Every door —
flag, environment, YAML — refuses it in one line that shows the character instead of obeying it."""

from __future__ import annotations

import pytest

from pytest_robustexplain.options.parsers import Invalid, parse_models, parse_text, printable
from pytest_robustexplain.testing import FakeOllamaServer

HOSTILE = "x\n::error title=pwned::boom"
GATE = "import pytest\n\n@pytest.mark.robustness\ndef test_gate(robustness):\n    pass\n"


def _no_command(result: pytest.RunResult) -> None:
    lines = [*result.outlines, *result.errlines]
    assert not [line for line in lines if line.lstrip().startswith("::")], lines


@pytest.mark.parametrize("value, code", [("a\nb", "000A"), ("a\rb", "000D"), ("a\u200bb", "200B"),
                                         ("a\u202eb", "202E"), ("a\u2028b", "2028"), ("a\x1bb", "001B")])
def test_every_text_setting_refuses_what_a_log_would_obey_or_hide(value: str, code: str) -> None:
    for parse in (parse_text, parse_models):
        with pytest.raises(Invalid, match=rf"contains U\+{code} "):
            parse(value)
    assert printable("llama3.1:8b") == "llama3.1:8b" and parse_text(" café ") == "café"


def test_a_model_name_with_a_workflow_command_is_one_usage_error(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(GATE)
    with FakeOllamaServer() as server:
        flag = pytester.runpytest(f"--robustexplain-model={HOSTILE}", f"--robustexplain-host={server.url}")
        monkeypatch.setenv("ROBUSTEXPLAIN_MODEL", HOSTILE)
        env = pytester.runpytest(f"--robustexplain-host={server.url}")
        monkeypatch.delenv("ROBUSTEXPLAIN_MODEL")
        pytester.makefile(".yaml", robustexplain='model: "x\\n::error title=pwned::boom"\n')
        yaml = pytester.runpytest(f"--robustexplain-host={server.url}")
        assert server.chat_calls == 0
    for result in (flag, env, yaml):
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(["ERROR: robustexplain: *contains U+000A*"])
        _no_command(result)
