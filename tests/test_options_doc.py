"""docs/options.md is the option table: generated from it, and checked here so the two never drift."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_robustexplain.cli.reference import options_markdown
from pytest_robustexplain.settings import OPTIONS
from pytest_robustexplain.settings.marker import MARKER_KEYWORDS

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "options.md"
REGENERATE = "python -m pytest_robustexplain.cli.reference > docs/options.md"


def test_the_options_page_is_the_option_table() -> None:
    assert DOC.read_text(encoding="utf-8") == options_markdown(), f"docs/options.md is stale; {REGENERATE}"


def test_every_option_has_one_section_with_every_spelling() -> None:
    text = options_markdown()
    names = re.findall(r"^### `([a-z-]+)`$", text, flags=re.MULTILINE)
    assert sorted(names) == sorted(spec.name for spec in OPTIONS)  # each once, none invented
    for spec in OPTIONS:
        section = text.split(f"### `{spec.name}`\n", 1)[1].split("\n### ", 1)[0]
        for spelling in (spec.cli, spec.env, spec.ini, f"`{spec.field}:`"):
            assert spelling in section, (spec.name, spelling)
        assert (f"marker `{spec.field}=`" in section) == (spec.field in MARKER_KEYWORDS)
        assert spec.help.replace("|", "\\|") in section


def test_the_readme_points_to_the_page() -> None:
    assert "docs/options.md" in (REPO / "README.md").read_text(encoding="utf-8")
