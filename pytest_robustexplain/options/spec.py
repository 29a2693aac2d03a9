"""What one option is (:class:`OptionSpec`) and how a door spells options (:class:`Spelling`): the parts of
the option table that the checks, below the settings, declare their own settings with.

The table itself (``settings.table``) lists the run's options and adds each check's
(``Check.options``); everything a setting is — flag, ini key, environment variable, YAML key, marker
keyword — derives from its spec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .parsers import Parser, choice_parser

# The doors a setting can be given through: ``pytest`` (the plugin) and ``run`` (``robustexplain run``).
DOORS: tuple[str, ...] = ("pytest", "run")


@dataclass(frozen=True)
class Spelling:
    """How a door names options in what it says: pytest's ``--robustexplain-users``; ``robustexplain run``'s
    ``--users`` for the options the command has (``names``), pytest's name for the others.

    Messages made below the doors (settings, explainers, the cache) name pytest's flags; a door shows
    them through :meth:`text`, so each message is written once and read in the door's own words."""

    prefix: str = "--robustexplain-"
    names: frozenset[str] | None = None  # the options this door has under ``prefix``; None: every option

    def flag(self, name: str) -> str:
        """The door's flag for the dashed option name (``max-history``)."""
        if self.names is None or name in self.names:
            return f"{self.prefix}{name}"
        return f"--robustexplain-{name}"

    def text(self, message: str) -> str:
        """``message`` with pytest's flags said in this door's names."""
        if self.names is None and self.prefix == "--robustexplain-":
            return message

        return re.sub(r"--robustexplain-([a-z][a-z-]*)", lambda m: self.flag(m.group(1)), message)


PYTEST_SPELLING = Spelling()


@dataclass(frozen=True)
class OptionSpec:
    """One setting. ``name`` is the dashed name (``min-combined``); everything else derives from it.

    ``path`` says how a path value is checked: ``"file"`` / ``"dir"`` must exist, ``"output"`` must not
    be an existing directory (a report file) and ``"output-dir"`` must not be an existing file.
    ``doors`` says which of :data:`DOORS` honour it (a baseline is compared per pytest item, so
    ``robustexplain run`` has none; ``robustexplain compare`` compares reports).
    """

    name: str
    parse: Parser
    default: Any
    help: str
    metavar: str | None = None
    flag: bool = False
    path: str | None = None
    env_fallbacks: tuple[str, ...] = ()
    echo: bool = True  # False: error messages name the origin but never repeat the (possibly secret) value
    doors: tuple[str, ...] = DOORS  # where the setting means something; elsewhere it is ignored, with a note
    marker: bool = False  # a per-test gate setting: also a keyword of ``@pytest.mark.robustness``

    @property
    def field(self) -> str:
        """The Settings field, YAML key and marker keyword: ``min_combined``."""
        return self.name.replace("-", "_")

    @property
    def cli(self) -> str:
        return f"--robustexplain-{self.name}"

    @property
    def dest(self) -> str:
        return f"robustexplain_{self.field}"

    @property
    def ini(self) -> str:
        return f"robustexplain_{self.field}"

    @property
    def env(self) -> str:
        return f"ROBUSTEXPLAIN_{self.field.upper()}"


def opt(name: str, parse: Parser, default: Any, help: str, metavar: str | None = None, **kw: Any
        ) -> OptionSpec:
    """An option whose metavar defaults to its name in capitals (``MAX_HISTORY``)."""
    return OptionSpec(name=name, parse=parse, default=default, help=help,
                      metavar=metavar or name.upper().replace("-", "_"), **kw)


def enum_opt(name: str, choices: tuple[str, ...], default: str, help: str, **kw: Any) -> OptionSpec:
    """An option taking one of ``choices``, which its help and metavar list."""
    return opt(name, choice_parser(choices), default, f"{help} One of {', '.join(choices)}; "
               f"default {default}.", metavar="{" + ",".join(choices) + "}", **kw)
