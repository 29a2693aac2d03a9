"""How a setting is declared: :class:`OptionSpec` (one setting, from which its flag, ini key, environment
variable, YAML key and marker keyword derive) and the parsers that turn a raw value into a typed one.

Below the checks, so that a check declares the settings it owns in its own module (``Check.options``);
the option table (``settings.table``) gathers them beside the run's own. Standard library only at the
top. The package face only hands names on.
"""

from __future__ import annotations

from .parsers import Invalid, Parser, choice_parser, float_parser, hint, int_parser, suggest
from .spec import DOORS, PYTEST_SPELLING, OptionSpec, Spelling, enum_opt, opt

__all__ = [
    "DOORS",
    "PYTEST_SPELLING",
    "Invalid",
    "OptionSpec",
    "Parser",
    "Spelling",
    "choice_parser",
    "enum_opt",
    "float_parser",
    "hint",
    "int_parser",
    "opt",
    "suggest",
]
