"""``docs/options.md``: every setting of the one option table, in the groups ``robustexplain run`` shows them.

The page is generated, never edited: ``python -m pytest_robustexplain.cli.reference > docs/options.md``
writes it, and ``tests/test_options_doc.py`` fails when the file and the table differ, so the reference a
newcomer reads is the table the plugin parses.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from ..settings import OPTIONS, YAML_NAME, OptionSpec, option
from .common import PROG, RUN_OPTION_GROUPS, RUN_OPTIONS

TITLE = "# Every option"
# Options only pytest honours (a baseline is compared per test item): the one group the command lacks.
PYTEST_GROUP = "pytest only"


def _where(spec: OptionSpec) -> str:
    """Every spelling of one setting, in the order of precedence (the marker first)."""
    value = "" if spec.flag else f"={spec.metavar}"
    parts = [f"marker `{spec.field}=`"] if spec.marker else []
    parts.append(f"`{spec.cli}{value}`")
    if spec.name in RUN_OPTIONS:
        parts.append(f"`{PROG} run --{spec.name}`")
    parts += [f"env `{spec.env}`", f"ini `{spec.ini}`", f"YAML `{spec.field}:`"]
    parts += [f"env `{name}` (after YAML, before the default)" for name in spec.env_fallbacks]
    return " · ".join(parts)


def _section(spec: OptionSpec) -> Iterator[str]:
    yield f"### `{spec.name}`"
    yield ""
    yield _where(spec)
    yield ""
    yield spec.help.replace("|", "\\|")
    yield ""


def _groups() -> Iterator[tuple[str, tuple[OptionSpec, ...]]]:
    for group, names in RUN_OPTION_GROUPS.items():
        yield group, tuple(option(name) for name in names)
    yield PYTEST_GROUP, tuple(spec for spec in OPTIONS if spec.name not in RUN_OPTIONS)


def options_markdown() -> str:
    """The text of ``docs/options.md``."""
    lines = [
        TITLE,
        "",
        "<!-- Generated from the option table (pytest_robustexplain/settings/table.py) by "
        "`python -m pytest_robustexplain.cli.reference > docs/options.md`; tests/test_options_doc.py "
        "fails when they differ. Do not edit by hand. -->",
        "",
        f"Each setting has every spelling below. Precedence: **marker > command line > environment > ini > "
        f"{YAML_NAME} > default**; the reports record where each value came from. A misspelt name in any "
        "of them is an error that suggests the closest one. `robustexplain run` takes the options of its "
        "groups as `--NAME`; the last group is the plugin's alone.",
        "",
    ]
    for group, specs in _groups():
        lines += [f"## {group[0].upper()}{group[1:]}", ""]
        for spec in specs:
            lines += list(_section(spec))
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(options_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
