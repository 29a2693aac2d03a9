"""One rule counts things in every message (``wording.py``)."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_robustexplain.wording import count_noun, noun

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_robustexplain"


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert [count_noun(n, "user") for n in (0, 1, 2)] == ["0 users", "1 user", "2 users"]
    assert count_noun(1, "reply", "replies") == "1 reply" and count_noun(3, "reply", "replies") == "3 replies"
    assert noun(1, "severity", "severities") == "severity" and noun(5, "pair") == "pairs"


def test_no_module_spells_its_own_plural_rule() -> None:
    # "{n} user{'s' if n != 1 else ''}" and private _plural helpers: each was a copy of the rule above.
    inline = re.compile(r"""\{['"]s['"] if [^}]*!= 1 else ['"]['"]\}"""
                        r"""|\{['"]['"] if [^}]*== 1 else ['"]s['"]\}|repl\{['"]y['"] if""")
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in PACKAGE.rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if inline.search(line) or re.match(r"\s*def _plural", line)]
    assert found == []
