"""Configuration: one table of options, resolved from five layers, validated with messages that say where.

Every setting is declared once in :data:`OPTIONS` — the run's own in ``table``, each check's in its
module (``Check.options``, gathered as :data:`CHECK_OPTIONS`). From that table come the command-line
options (``--robustexplain-<name>``), the ini keys (``robustexplain_<name>``), the environment variables
(``ROBUSTEXPLAIN_<NAME>``), the keys of ``robustexplain.yaml`` and the values of :class:`Settings`.

Precedence, highest first: command line > environment > ini file > ``robustexplain.yaml`` > default;
per test, the ``@pytest.mark.robustness(...)`` keywords then override the gate settings
(:func:`apply_marker`). Every resolved value records its origin in ``Settings.sources``, and every bad
value raises :class:`~pytest_robustexplain.errors.ConfigError` naming that origin, e.g.
``--robustexplain-min-combined=1.5: must be between 0 and 1``.

The package face only hands names on, so ``from pytest_robustexplain.settings import X`` works for every
public name. From the bottom up: ``parsers`` (kept as the import path of ``options.parsers``: raw value ->
typed value), ``table`` (the option table and its choices), ``record`` (the :class:`Settings` record),
``checks`` (gate values checked by both the resolver and the marker), ``layers`` (the five-layer resolution
and the YAML reader), ``pytest_files`` (the layers pytest reads, for ``robustexplain run``), ``marker`` (the
per-test gate). The plugin imports this package at start-up, so it imports only the standard library (and
cheap project modules) at the top; PyYAML is imported only when a YAML file is actually read.
"""

from __future__ import annotations

from ..results import DEFAULT_MIN_METRIC as DEFAULT_MIN_METRIC
from .layers import (
    REPORT_OUTPUTS,
    check_report_paths,
    ignored_settings,
    load_yaml,
    resolve_settings,
    settings_from_pytest,
)
from .marker import MARKER_DOC, MARKER_KEYWORDS, GateSettings, apply_marker
from .pytest_files import read_pytest_files, settings_from_project
from .record import Settings
from .table import (
    CHECK_OPTIONS,
    DEFAULT_HOSTS,
    DEFAULT_PERTURBATIONS,
    OPTIONS,
    PYTEST_SPELLING,
    YAML_NAME,
    OptionSpec,
    Spelling,
    option,
    register_options,
)

__all__ = [
    "CHECK_OPTIONS",
    "DEFAULT_HOSTS",
    "DEFAULT_PERTURBATIONS",
    "MARKER_DOC",
    "MARKER_KEYWORDS",
    "OPTIONS",
    "PYTEST_SPELLING",
    "REPORT_OUTPUTS",
    "YAML_NAME",
    "GateSettings",
    "OptionSpec",
    "Settings",
    "Spelling",
    "apply_marker",
    "check_report_paths",
    "ignored_settings",
    "load_yaml",
    "option",
    "read_pytest_files",
    "register_options",
    "resolve_settings",
    "settings_from_project",
    "settings_from_pytest",
]
