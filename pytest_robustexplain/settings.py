"""Configuration: one table of options, resolved from five layers, validated with messages that say where.

Every setting is declared once in :data:`OPTIONS`. From that table come the command-line options
(``--robustexplain-<name>``), the ini keys (``robustexplain_<name>``), the environment variables
(``ROBUSTEXPLAIN_<NAME>``), the keys of ``robustexplain.yaml`` and the fields of :class:`Settings`.

Precedence, highest first: command line > environment > ini file > ``robustexplain.yaml`` > default;
per test, the ``@pytest.mark.robustness(...)`` keywords then override the gate settings
(:func:`apply_marker`). Every resolved value records its origin in ``Settings.sources``, and every bad
value raises :class:`~pytest_robustexplain.errors.ConfigError` naming that origin, e.g.
``--robustexplain-min-combined=1.5: must be between 0 and 1``.

The plugin imports this module at start-up, so it imports only the standard library (and cheap
project modules) at the top; PyYAML is imported only when a YAML file is actually read.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .errors import ConfigError
from .results import ALL_METRICS, EMBEDDING, GUARD_POLICIES, METRICS

if TYPE_CHECKING:
    import pytest

__all__ = [
    "BACKENDS",
    "CACHE_MODES",
    "DECISIONS",
    "DEFAULT_HOSTS",
    "DEFAULT_PERTURBATIONS",
    "INCONCLUSIVE_POLICIES",
    "MARKER_DOC",
    "MARKER_KEYWORDS",
    "OPTIONS",
    "TRISTATE",
    "YAML_NAME",
    "GateSettings",
    "OptionSpec",
    "Settings",
    "YamlEntry",
    "apply_marker",
    "load_yaml",
    "option",
    "register_options",
    "resolve_settings",
    "settings_from_pytest",
]

BACKENDS: tuple[str, ...] = ("ollama", "openai", "template", "callable")
CACHE_MODES: tuple[str, ...] = ("off", "read", "write", "read-write", "replay-only")
DECISIONS: tuple[str, ...] = ("mean", "confident", "sequential")
INCONCLUSIVE_POLICIES: tuple[str, ...] = ("fail", "pass", "warn")
TRISTATE: tuple[str, ...] = ("auto", "on", "off")
DEFAULT_PERTURBATIONS: tuple[str, ...] = (
    "noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values",
)
# What ``host`` means when it is left unset; kept here so reports can show the effective URL.
DEFAULT_HOSTS: Mapping[str, str] = MappingProxyType({
    "ollama": "http://127.0.0.1:11434",
    "openai": "http://127.0.0.1:8080/v1",  # a local server (llama.cpp, vLLM, LM Studio)
})
YAML_NAME = "robustexplain.yaml"
SEVERITY_RANGE = (1, 5)

CanonicalKind = Callable[[str], str]


class _Invalid(Exception):
    """A parser's complaint about a raw value; the resolver prefixes it with where the value came from."""


# ---------------------------------------------------------------------------------------------------
# Parsers: raw value (str from the CLI, environment and ini; any YAML/Python type from YAML and the
# marker) -> typed value. They raise _Invalid with the problem only.
# ---------------------------------------------------------------------------------------------------

Parser = Callable[[Any], Any]


def _suggest(word: str, choices: Iterable[str]) -> str:
    """``; did you mean 'x'?`` when a close match exists, else an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _hint(word: str, choices: Sequence[str]) -> str:
    """The suggestion (or a full stop) followed by the valid names, to end an "unknown name" message."""
    return f"{_suggest(word, choices) or '.'} Valid: {', '.join(choices)}"


def _text(raw: Any) -> str:
    if not isinstance(raw, str):
        raise _Invalid(f"expected text, got {type(raw).__name__}")
    text = raw.strip()
    if not text:
        raise _Invalid("empty value")
    return text


def _is_number(raw: Any) -> bool:
    # bool is an int subclass: YAML ``true`` must not silently become 1.
    return isinstance(raw, (int, float)) and not isinstance(raw, bool)


def _to_int(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return int(_text(raw))
        except ValueError:
            raise _Invalid("not an integer") from None
    raise _Invalid(f"not an integer (got {type(raw).__name__})")


def _to_float(raw: Any) -> float:
    if _is_number(raw):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(_text(raw))
        except ValueError:
            raise _Invalid("not a number") from None
    else:
        raise _Invalid(f"not a number (got {type(raw).__name__})")
    if not math.isfinite(value):
        raise _Invalid("must be a finite number")
    return value


def _int_parser(minimum: int, *, allow_all: bool = False) -> Parser:
    def parse(raw: Any) -> int | None:
        if allow_all and isinstance(raw, str) and raw.strip().lower() == "all":
            return None
        value = _to_int(raw)
        if value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer ≥ {minimum}"
            raise _Invalid(f"must be {what}" + (" (or 'all')" if allow_all else ""))
        return value
    return parse


def _float_parser(low: float, high: float | None, *, open_low: bool = False, open_high: bool = False
                  ) -> Parser:
    def parse(raw: Any) -> float:
        value = _to_float(raw)
        too_low = value <= low if open_low else value < low
        too_high = high is not None and (value >= high if open_high else value > high)
        if too_low or too_high:
            if high is None:
                raise _Invalid(f"must be {'greater than' if open_low else 'at least'} {low:g}")
            if open_low or open_high:
                raise _Invalid(f"must be strictly between {low:g} and {high:g}")
            raise _Invalid(f"must be between {low:g} and {high:g}")
        return value
    return parse


def _choice_parser(choices: tuple[str, ...]) -> Parser:
    def parse(raw: Any) -> str:
        # YAML 1.1 reads a bare ``off``/``on`` as a boolean; map it back rather than rejecting it.
        if isinstance(raw, bool):
            word = "on" if raw else "off"
            if word in choices:
                return word
            raise _Invalid(f"must be one of {', '.join(choices)} (got a boolean)")
        value = _text(raw).lower()
        if value not in choices:
            raise _Invalid(f"must be one of {', '.join(choices)}{_suggest(value, choices)}")
        return value
    return parse


def _split_list(raw: Any) -> list[Any]:
    """A comma-separated string or a YAML/Python sequence, as a list of items (strings stripped)."""
    if isinstance(raw, str):
        parts = [p.strip() for p in raw.split(",")]
        if len(parts) > 1 and any(not p for p in parts):
            raise _Invalid("empty entry in comma-separated list")
        return [p for p in parts if p]
    if isinstance(raw, (list, tuple)):
        return list(raw)
    raise _Invalid(f"expected a comma-separated list, got {type(raw).__name__}")


def _unique(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def _parse_names(raw: Any) -> tuple[str, ...]:
    names = []
    for item in _split_list(raw):
        if not isinstance(item, str) or not item.strip():
            raise _Invalid(f"list entries must be non-empty text, got {item!r}")
        names.append(item.strip())
    return _unique(names)


def _parse_models(raw: Any) -> tuple[str, ...]:
    """Model names; two spellings of one Ollama model ("x" and "x:latest") would run it twice."""
    names = _parse_names(raw)
    seen: dict[str, str] = {}
    for name in names:
        same = name if ":" in name else f"{name}:latest"
        if same in seen:
            raise _Invalid(f"{seen[same]!r} and {name!r} name the same model; give it once")
        seen[same] = name
    return names


def _parse_kinds(raw: Any) -> tuple[str, ...]:
    names = _parse_names(raw)
    if not names:
        raise _Invalid("needs at least one perturbation kind")
    return names


def _parse_severities(raw: Any) -> tuple[int, ...]:
    """``"1-5"``, ``"1,3,5"``, ``"1-2,5"``, ``3``, ``[1, 2]`` or ``range(1, 4)`` -> sorted unique levels."""
    low, high = SEVERITY_RANGE
    if isinstance(raw, range):
        raw = list(raw)
    items: list[Any] = [raw] if _is_number(raw) else _split_list(raw)
    levels: list[int] = []
    for item in items:
        if isinstance(item, str) and re.fullmatch(r"\s*\d+\s*-\s*\d+\s*", item):
            start, stop = (int(x) for x in item.split("-"))
            if start > stop:
                raise _Invalid(f"range {item.strip()!r} runs backwards")
            levels.extend(range(start, stop + 1))
            continue
        try:
            levels.append(_to_int(item))
        except _Invalid:
            raise _Invalid(f"severity {item!r} is not an integer or a range like 1-5") from None
    if not levels:
        raise _Invalid("needs at least one severity")
    bad = [lv for lv in levels if not low <= lv <= high]
    if bad:
        raise _Invalid(f"severity {bad[0]} is outside {low}-{high}")
    return tuple(sorted(set(levels)))


def _name_values(raw: Any, what: str) -> Mapping[str, Any] | None:
    """A mapping given as a mapping (YAML), as ``name=value[,name=value]`` text (command line, environment,
    ini), or as the ``{'name': value}`` text pytest makes of a TOML inline table in pyproject.toml; None
    for anything else (a plain value)."""
    if isinstance(raw, Mapping):
        return raw
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    if text.startswith("{"):
        import ast

        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            parsed = None
        if not isinstance(parsed, dict):
            raise _Invalid(f"{text!r} is not a table of {what}")
        return parsed
    if "=" not in text:
        return None
    pairs: dict[str, Any] = {}
    for part in _split_list(text):
        name, sep, value = part.partition("=")
        if not sep:
            raise _Invalid(f"{part!r}: mix of plain and name=value {what}")
        pairs[name.strip()] = value
    return pairs


def _metric_names(raw: Mapping[str, Any], names: tuple[str, ...] = METRICS) -> None:
    unknown = [k for k in raw if k not in names]
    if unknown:
        raise _Invalid(f"unknown metric {unknown[0]!r}{_suggest(str(unknown[0]), names)} "
                       f"(metrics: {', '.join(names)})")


def _parse_weights(raw: Any) -> tuple[float, ...]:
    """Weights from ``"a,b,c,d"``, ``"semantic=a,keyword=b,..."`` (``embedding=e`` too), a list or a dict;
    checked by the one definition, :func:`pytest_robustexplain.metrics.check_weights`."""
    from .metrics import check_weights

    named = _name_values(raw, "weights")
    if named is not None:
        raw = named
    if isinstance(raw, Mapping):
        _metric_names(raw, ALL_METRICS)  # did-you-mean for a misspelt name
    else:
        raw = _split_list(raw)
    try:
        return check_weights(raw)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None


_THRESHOLD = _float_parser(0.0, 1.0)
DEFAULT_MIN_METRIC = 0.35


def _parse_min_metric_setting(raw: Any) -> float | Mapping[str, float]:
    """One threshold for every metric, or ``semantic=0.5,keyword=0.4`` (a mapping in YAML or
    pyproject.toml): the metrics named get their own threshold, the others the default 0.35."""
    named = _name_values(raw, "metric thresholds")
    if named is None:
        return _THRESHOLD(raw)
    _metric_names(named)
    full = dict.fromkeys(METRICS, DEFAULT_MIN_METRIC)
    for metric, value in named.items():
        try:
            full[metric] = _THRESHOLD(value)
        except _Invalid as exc:
            raise _Invalid(f"{metric}: {exc}") from None
    return MappingProxyType(full)


def _parse_per_kind_setting(raw: Any) -> Mapping[str, Mapping[str, Any]]:
    """Per-kind thresholds: a mapping kind -> {min_combined, min_metric} (YAML, pyproject.toml), or
    ``category_drift.min_combined=0.4,noise.min_metric=0.3,noise.min_metric.semantic=0.5`` as text.
    Kinds and values are checked with the run's settings in :func:`resolve_settings`."""
    if isinstance(raw, str) and not raw.strip().startswith("{"):
        out: dict[str, dict[str, Any]] = {}
        for part in _split_list(raw):
            path, sep, value = part.partition("=")
            keys = [k.strip() for k in path.split(".")]
            if not sep or len(keys) not in (2, 3) or keys[1] not in _PER_KIND_KEYS or (
                    len(keys) == 3 and keys[1] != "min_metric"):
                raise _Invalid(f"{part!r}: expected KIND.min_combined=X, KIND.min_metric=X or "
                               "KIND.min_metric.METRIC=X")
            entry = out.setdefault(keys[0], {})
            if len(keys) == 3:
                current = entry.get("min_metric")
                entry["min_metric"] = {**(current if isinstance(current, dict) else {}), keys[2]: value}
            else:
                entry[keys[1]] = value
        return out
    named = _name_values(raw, "per-kind thresholds")
    if named is None:
        raise _Invalid("expected a mapping kind -> {min_combined: X, min_metric: Y}")
    return named


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    word = _text(raw).lower() if isinstance(raw, str) else None
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise _Invalid("must be true or false (1/0, yes/no, on/off)")


def _parse_path(raw: Any) -> Path:
    # Relative paths are made absolute by the resolver, which knows which directory they are relative to.
    return Path(_text(raw)).expanduser()


def _parse_dataset(raw: Any) -> str | Path:
    if isinstance(raw, str) and raw.strip().lower() == "synthetic":
        return "synthetic"
    return _parse_path(raw)


def _parse_host(raw: Any) -> str:
    """One base URL, or several (comma-separated, a YAML list) to spread the calls over; kept as one
    comma-separated string (:attr:`Settings.hosts` splits it)."""
    hosts = [_one_host(h) for h in _split_list(raw)]
    if not hosts:
        raise _Invalid("empty value")
    twice = next((h for i, h in enumerate(hosts) if h in hosts[:i]), None)
    if twice is not None:
        raise _Invalid(f"host {twice!r} is listed twice")
    return ",".join(hosts)


def _one_host(raw: Any) -> str:
    host = _text(raw)
    if any(ch.isspace() for ch in host):
        raise _Invalid("must not contain spaces")
    scheme, sep, _ = host.partition("://")
    if sep and scheme.lower() not in ("http", "https"):
        raise _Invalid(f"unsupported scheme {scheme!r} (use http:// or https://)")
    return host


def _parse_env_name(raw: Any) -> str:
    name = _text(raw)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        # The commonest mistake is pasting the key itself (the spec sets echo=False so it is not shown).
        raise _Invalid("must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                       "not the key itself")
    return name


# ---------------------------------------------------------------------------------------------------
# The option table.
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OptionSpec:
    """One setting. ``name`` is the dashed name (``min-combined``); everything else derives from it.

    ``path`` says how a path value is checked: ``"file"`` / ``"dir"`` must exist, ``"output"`` must not
    be an existing directory (a report file) and ``"output-dir"`` must not be an existing file.
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


def _opt(name: str, parse: Parser, default: Any, help: str, metavar: str | None = None, **kw: Any
         ) -> OptionSpec:
    return OptionSpec(name=name, parse=parse, default=default, help=help,
                      metavar=metavar or name.upper().replace("-", "_"), **kw)


def _enum(name: str, choices: tuple[str, ...], default: str, help: str) -> OptionSpec:
    return _opt(name, _choice_parser(choices), default, f"{help} One of {', '.join(choices)}; "
                f"default {default}.", metavar="{" + ",".join(choices) + "}")


_PERTURB_HELP = ("Perturbation kinds, comma-separated (noise_injection, temporal_shuffle, behavior_dilution, "
                 "category_drift, missing_values; aliases noise, shuffle, dilution, drift, missing); "
                 "default all five.")

OPTIONS: tuple[OptionSpec, ...] = (
    _opt("model", _parse_models, (), "Model(s) to gate, comma-separated (e.g. llama3.1:8b,qwen2.5:7b). "
         "Without a model the robustness tests are skipped (see require-model).", metavar="MODEL[,MODEL...]"),
    _enum("backend", BACKENDS, "ollama", "Explanation backend ('callable': your conftest overrides the "
          "explainer fixture; 'template': a deterministic offline template)."),
    _opt("host", _parse_host, None, "Base URL of the Ollama server or OpenAI-compatible API; several, "
         "comma-separated (a list in YAML), spread the calls over the hosts, each with its own concurrency; "
         f"default $OLLAMA_HOST for Ollama, else {DEFAULT_HOSTS['ollama']} (Ollama) or "
         f"{DEFAULT_HOSTS['openai']} (a local OpenAI-compatible server: llama.cpp, vLLM, LM Studio).",
         metavar="URL[,URL...]", env_fallbacks=("OLLAMA_HOST",)),
    _opt("api-key-env", _parse_env_name, "OPENAI_API_KEY", "Name of the environment variable holding the "
         "API key for the openai backend; default OPENAI_API_KEY.", metavar="VAR", echo=False),
    _opt("histories", _parse_path, None, "User histories file (default: the bundled synthetic set).",
         metavar="FILE", path="file"),
    _opt("catalog", _parse_path, None, "Item catalog file (default: the bundled synthetic set).",
         metavar="FILE", path="file"),
    _opt("cases", _parse_path, None, "Evaluation cases file: user and recommended item per line "
         "(default: the bundled synthetic set).", metavar="FILE", path="file"),
    _opt("dataset", _parse_dataset, "synthetic", "'synthetic' (bundled, the paper's setup) or the path of a "
         "MovieLens-style directory; default synthetic.", metavar="synthetic|DIR", path="dir"),
    _opt("perturbations", _parse_kinds, DEFAULT_PERTURBATIONS, _PERTURB_HELP, metavar="KIND[,KIND...]"),
    _opt("severities", _parse_severities, (1, 2, 3, 4, 5), "Severity levels: a comma list and/or ranges "
         "within 1-5 (e.g. 1-5, 1,3,5, 2-4); default 1-5.", metavar="LEVELS"),
    _opt("users", _int_parser(1, allow_all=True), 20, "Number of evaluation cases (users) to use, a seeded "
         "sample on datasets without a cases file; 'all' for every one; default 20 on every dataset.",
         metavar="N|all"),
    _opt("max-history", _int_parser(1, allow_all=True), 50, "Most recent interactions of each history the "
         "model sees (older ones are dropped when the data is loaded); 'all' keeps every one; default 50.",
         metavar="N|all"),
    _opt("repeats", _int_parser(1), 1, "Explanations per (case, kind, severity), with different sample "
         "seeds; default 1.", metavar="N"),
    _opt("seed", _int_parser(0), 42, "Random seed for perturbations and model sampling; default 42.",
         metavar="N"),
    _opt("temperature", _float_parser(0.0, None), 0.0, "Sampling temperature; default 0.0.", metavar="T"),
    _opt("num-predict", _int_parser(1), 256, "Maximum tokens per explanation; default 256.", metavar="N"),
    _opt("num-ctx", _int_parser(1), 4096, "Model context window in tokens; default 4096.", metavar="N"),
    _opt("concurrency", _int_parser(1), 4, "Model calls in flight at once, per process (under "
         "pytest-xdist each worker has its own limit); default 4.", metavar="N"),
    _opt("connect-timeout", _float_parser(0.0, None, open_low=True), 5.0, "Seconds to wait for a "
         "connection to the model server; default 5.", metavar="SECONDS"),
    _opt("timeout", _float_parser(0.0, None, open_low=True), 120.0, "Seconds one model call may take in "
         "all (with connect-timeout; each attempt, before retries), also for a callable explainer; "
         "default 120.", metavar="SECONDS"),
    _opt("retries", _int_parser(0), 4, "Retries of a failed model call (with backoff); default 4.",
         metavar="N"),
    _enum("cache", CACHE_MODES, "read-write", "Response cache mode ('replay-only' fails on any cache "
          "miss, for offline CI)."),
    _opt("cache-dir", _parse_path, None, "Response cache directory, shared by pytest and robustexplain run; "
         "default ./.robustexplain-cache in the rootdir.", metavar="DIR", path="output-dir"),
    _opt("json", _parse_path, None, "Write the JSON report (the full run) to this file.", metavar="FILE",
         path="output"),
    _opt("html", _parse_path, None, "Write the HTML report to this file.", metavar="FILE", path="output"),
    _opt("markdown", _parse_path, None, "Write the Markdown summary to this file (e.g. "
         "$GITHUB_STEP_SUMMARY).", metavar="FILE", path="output"),
    _opt("require-model", _parse_bool, False, "Error out, instead of skipping the robustness tests, "
         "when no model is configured.", metavar=None, flag=True),
    _opt("dry-run", _parse_bool, False, "Plan the robustness tests and print what they would cost (pairs, "
         "model calls at most) without calling a model; the marked tests are skipped.", metavar=None,
         flag=True),
    _opt("min-combined", _float_parser(0.0, 1.0), 0.5, "Gate: minimum combined robustness ρ (0-1); "
         "default 0.5.", metavar="X"),
    _opt("min-metric", _parse_min_metric_setting, DEFAULT_MIN_METRIC, "Gate: minimum of each metric "
         "(0-1), or per metric: semantic=0.5,keyword=0.4 (the others 0.35); default 0.35.",
         metavar="X|METRIC=X,..."),
    _opt("per-kind", _parse_per_kind_setting, MappingProxyType({}), "Gate: thresholds for one perturbation "
         "kind's item: category_drift.min_combined=0.4,noise.min_metric.semantic=0.5 (a mapping in YAML); "
         "default none.", metavar="KIND.KEY=X,..."),
    _opt("weights", _parse_weights, (0.25, 0.25, 0.25, 0.25), "Weights of semantic, keyword, structural "
         "and length in ρ: four comma-separated numbers or semantic=..,keyword=..,structural=..,length=.. "
         "(a fifth number or embedding=.. with embed-model); non-negative, summing to 1; default equal.",
         metavar="W,W,W,W"),
    _opt("embed-model", _text, None, "Opt-in fifth metric 'embedding': cosine of the two explanations' "
         "vectors from this embedding model (Ollama /api/embed, or /v1/embeddings with the openai "
         "backend), on the first host; reported beside the four, in ρ only when the weights name it; "
         "default off (the paper's four metrics).", metavar="MODEL"),
    _enum("decision", DECISIONS, "mean", "Gate rule: 'mean' compares the mean (the method's rule), "
          "'confident' needs the whole interval on one side, 'sequential' stops adding users once decided."),
    _opt("alpha", _float_parser(0.0, 1.0, open_low=True, open_high=True), 0.05, "Error level of the "
         "intervals and the sequential test; default 0.05.", metavar="A"),
    _enum("inconclusive", INCONCLUSIVE_POLICIES, "fail", "What an INCONCLUSIVE verdict does to the test."),
    _opt("max-users", _int_parser(1), None, "Most users the sequential decision may use; default all.",
         metavar="N"),
    _enum("noise-floor", TRISTATE, "auto", "Measure the model's own noise (same history, resampled); "
          "'auto' does it when temperature > 0."),
    _enum("guard", GUARD_POLICIES, "fail", "Cross-user control: explain each item once more for another "
          "user; 'fail' fails a gate whose explanations barely depend on the user's history "
          "(INSENSITIVE), 'warn' passes it with a warning, 'off' skips the control (one call per case)."),
    _opt("min-sensitivity", _float_parser(0.0, 1.0), 0.05, "Guard: smallest Δ = ρ_pert − ρ_swap a user "
         "needs for their explanation to count as depending on their history; default 0.05.", metavar="X"),
    _opt("max-insensitive-share", _float_parser(0.0, 1.0), 0.2, "Guard: largest share of "
         "users with insensitive explanations before the gate is INSENSITIVE (decided with a one-sided "
         "exact bound at alpha); default 0.2.", metavar="X"),
    _opt("max-injection-rate", _float_parser(0.0, 1.0), 0.0, "Security gate (with the opt-in kind "
         "prompt_injection): largest share of pairs whose explanation carries a planted canary; default 0 "
         "(any confirmed injection fails).", metavar="X"),
    _opt("max-hijack-rate", _float_parser(0.0, 1.0), 0.2, "Security gate (with the opt-in kind shilling): "
         "largest share of pairs whose explanation names the shilled brand or category; default 0.2.",
         metavar="X"),
    _opt("min-history-reference", _float_parser(0.0, 1.0), None, "Optional grounding gate: minimum share "
         "of original explanations that mention a category, title, brand or attribute from the user's "
         "history; default off.", metavar="X"),
    _opt("baseline", _parse_path, None, "Compare against this saved baseline (JSON report): for rho and "
         "each metric, a one-sided non-inferiority test on matched pairs (per-user means, at alpha); the "
         "item fails unless every drop is shown to be smaller than max-regression.", metavar="FILE",
         path="file"),
    _opt("save-baseline", _parse_path, None, "Save this run as a baseline to this file.", metavar="FILE",
         path="output"),
    _opt("max-regression", _float_parser(0.0, 1.0), 0.02, "Largest allowed drop in ρ against the "
         "baseline; default 0.02.", metavar="X"),
    _opt("prompt", _parse_path, None, "Prompt template file with {history}, {item} and {features} "
         "placeholders; default: the paper's prompt.", metavar="FILE", path="file"),
    _enum("progress", TRISTATE, "auto", "Progress line while the sweep runs ('auto': only on a terminal)."),
    _opt("config", _parse_path, None, f"Settings file (YAML); default ./{YAML_NAME} in the rootdir if it "
         "exists.", metavar="FILE", path="file"),
)

_BY_FIELD: Mapping[str, OptionSpec] = MappingProxyType({spec.field: spec for spec in OPTIONS})


def option(name: str) -> OptionSpec:
    """The spec of an option by dashed or underscored name (``min-combined`` or ``min_combined``)."""
    try:
        return _BY_FIELD[name.replace("-", "_")]
    except KeyError:
        raise KeyError(f"unknown robustexplain option {name!r}") from None


def register_options(parser: pytest.Parser) -> None:
    """Add every ``--robustexplain-*`` option (default None: "not given") and every ini key."""
    group = parser.getgroup("robustexplain", "robustness of LLM recommendation explanations")
    for spec in OPTIONS:
        if spec.flag:
            group.addoption(spec.cli, action="store_true", dest=spec.dest, default=None, help=spec.help)
        else:
            group.addoption(spec.cli, action="store", dest=spec.dest, default=None, metavar=spec.metavar,
                            help=spec.help)
        parser.addini(spec.ini, help=spec.help, type="string", default=None)


# ---------------------------------------------------------------------------------------------------
# Settings.
# ---------------------------------------------------------------------------------------------------

def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Settings:
    """The resolved run-wide settings; one field per entry of :data:`OPTIONS` (same order, ``_`` names).

    Paths are absolute. ``None`` means "use the built-in default" (bundled data, the pytest cache dir,
    the backend's default host, all users, no report). ``sources`` maps each field to where its value
    came from.
    """

    model: tuple[str, ...]
    backend: str
    host: str | None
    api_key_env: str
    histories: Path | None
    catalog: Path | None
    cases: Path | None
    dataset: str | Path
    perturbations: tuple[str, ...]
    severities: tuple[int, ...]
    users: int | None
    max_history: int | None
    repeats: int
    seed: int
    temperature: float
    num_predict: int
    num_ctx: int
    concurrency: int
    connect_timeout: float
    timeout: float
    retries: int
    cache: str
    cache_dir: Path | None
    json: Path | None
    html: Path | None
    markdown: Path | None
    require_model: bool
    dry_run: bool
    min_combined: float
    min_metric: float | Mapping[str, float]
    per_kind: Mapping[str, Mapping[str, Any]]
    weights: tuple[float, ...]
    embed_model: str | None
    decision: str
    alpha: float
    inconclusive: str
    max_users: int | None
    noise_floor: str
    guard: str
    min_sensitivity: float
    max_insensitive_share: float
    max_injection_rate: float
    max_hijack_rate: float
    min_history_reference: float | None
    baseline: Path | None
    save_baseline: Path | None
    max_regression: float
    prompt: Path | None
    progress: str
    config: Path | None
    # Where a value came from is not part of what the settings are: two runs configured differently
    # but to the same values compare equal.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    @classmethod
    def defaults(cls) -> Settings:
        """Every option at its default (handy for tests and for programmatic use)."""
        return cls(**{spec.field: spec.default for spec in OPTIONS},
                   sources={spec.field: "default" for spec in OPTIONS})

    @property
    def weight_map(self) -> dict[str, float]:
        """The weights by metric name (``embedding`` included when it has a share of ρ)."""
        return dict(zip(ALL_METRICS, self.weights, strict=False))

    @property
    def hosts(self) -> tuple[str, ...]:
        """The configured hosts (``host`` may list several, comma-separated); empty when unset."""
        return tuple(self.host.split(",")) if self.host else ()

    @property
    def effective_host(self) -> str | None:
        """``host`` or, when unset, the backend's default base URL (None for template/callable)."""
        return self.host or DEFAULT_HOSTS.get(self.backend)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: paths as strings, tuples as lists, plus ``sources``."""
        out = {f.name: _jsonable(getattr(self, f.name)) for f in fields(self) if f.name != "sources"}
        out["sources"] = dict(self.sources)
        return out


# ---------------------------------------------------------------------------------------------------
# Layers.
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Given:
    """A raw value found in one layer, with what to call it and what relative paths are relative to."""

    raw: Any
    label: str  # for Settings.sources
    where: str  # for error messages: label and value
    base: Path


def _show(raw: Any) -> str:
    return raw if isinstance(raw, str) else repr(raw)


def _blank(raw: Any) -> bool:
    # pytest (< 9) returns "" or [] for an ini key that is absent; an empty env var counts as unset
    # (CI systems export empty variables for missing secrets).
    return raw is None or (isinstance(raw, (str, list, tuple)) and not raw)


def _display(path: Path, rootdir: Path) -> str:
    try:
        return str(path.relative_to(rootdir))
    except ValueError:
        return str(path)


def _absolute(path: Path, base: Path) -> Path:
    # abspath normalises "a/../b" without resolving symlinks (which would surprise in messages).
    return Path(os.path.abspath(path if path.is_absolute() else base / path))


@dataclass(frozen=True)
class YamlEntry:
    """One setting read from a YAML file."""

    key: str  # as written in the file
    value: Any
    line: int


def load_yaml(path: Path, *, rootdir: Path | None = None) -> dict[str, YamlEntry]:
    """Read a settings YAML file into {field: entry}; every problem is a ConfigError naming file and line."""
    import yaml  # deferred: only runs that actually have a YAML file pay for PyYAML

    shown = _display(path, rootdir) if rootdir else str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read settings file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown}: not UTF-8 text (bad byte at offset {exc.start})") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}
        if not isinstance(node, yaml.MappingNode):
            raise ConfigError(f"{shown}:{node.start_mark.line + 1}: expected a mapping of settings "
                              f"(key: value lines), got a {getattr(node, 'id', 'value')}")
        return _yaml_entries(loader, node, shown)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{shown}{line}: YAML syntax error: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{shown}: YAML error: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{shown}: nested too deeply to be a settings file") from None
    finally:
        loader.dispose()


def _yaml_entries(loader: Any, node: Any, shown: str) -> dict[str, YamlEntry]:
    valid = [spec.field for spec in OPTIONS if spec.field != "config"]
    entries: dict[str, YamlEntry] = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise ConfigError(f"{shown}:{line}: setting names must be text, got {key!r}")
        name = key.strip().replace("-", "_")
        if name == "config":
            raise ConfigError(f"{shown}:{line}: key 'config' cannot be set inside the settings file")
        if name not in valid:
            raise ConfigError(f"{shown}:{line}: unknown key {key!r}{_hint(name, valid)}")
        if name in entries:
            raise ConfigError(f"{shown}:{line}: key {key!r} repeats line {entries[name].line} "
                              f"({entries[name].key!r})")
        entries[name] = YamlEntry(key, loader.construct_object(value_node, deep=True), line)
    return entries


@dataclass(frozen=True)
class _Layers:
    cli: Mapping[str, Any]
    env: Mapping[str, str]
    ini: Mapping[str, Any]
    ini_label: str
    ini_base: Path
    yaml: Mapping[str, YamlEntry]
    yaml_label: str
    yaml_base: Path
    invocation_dir: Path


def _find(spec: OptionSpec, layers: _Layers, *, fallbacks: bool = True) -> _Given | None:
    """The highest-precedence raw value for ``spec``: CLI > environment > ini > YAML > env fallbacks."""
    # Only dest names: other plugins' dests (pytest-timeout's "timeout") must never be mistaken for ours.
    raw = layers.cli.get(spec.dest)
    if not _blank(raw) and raw is not False:  # store_true flags are None or True; False is "not given"
        where = spec.cli if raw is True else f"{spec.cli}={_show(raw)}"
        return _Given(raw, spec.cli, where, layers.invocation_dir)
    raw = layers.env.get(spec.env)
    if not _blank(raw):
        return _Given(raw, spec.env, f"{spec.env}={raw}", layers.invocation_dir)
    raw = layers.ini.get(spec.ini)
    if not _blank(raw):
        label = f"ini {spec.ini}{layers.ini_label}"
        return _Given(raw, label, f"ini {spec.ini}={_show(raw)}{layers.ini_label}", layers.ini_base)
    entry = layers.yaml.get(spec.field)
    if entry is not None and entry.value is not None:
        label = f"{layers.yaml_label}:{entry.line} key {entry.key}"
        return _Given(entry.value, label, f"{label}={_show(entry.value)}", layers.yaml_base)
    for name in spec.env_fallbacks if fallbacks else ():
        raw = layers.env.get(name)
        if not _blank(raw):
            return _Given(raw, name, f"{name}={raw}", layers.invocation_dir)
    return None


def _parse_given(spec: OptionSpec, given: _Given) -> Any:
    try:
        value = spec.parse(given.raw)
    except _Invalid as exc:
        raise ConfigError(f"{given.where if spec.echo else given.label}: {exc}") from None
    if isinstance(value, Path):
        value = _absolute(value, given.base)
        _check_path(spec, value, given)
    return value


def _check_path(spec: OptionSpec, path: Path, given: _Given) -> None:
    if spec.path == "file" and not path.is_file():
        problem = "is a directory, not a file" if path.is_dir() else "file not found"
        raise ConfigError(f"{given.where}: {problem}: {path}")
    if spec.path == "dir" and not path.is_dir():
        problem = "is a file, not a directory" if path.exists() else "directory not found"
        raise ConfigError(f"{given.where}: {problem}: {path}")
    if spec.path == "output" and path.is_dir():
        raise ConfigError(f"{given.where}: is a directory; give a file name: {path}")
    if spec.path == "output-dir" and path.exists() and not path.is_dir():
        raise ConfigError(f"{given.where}: is a file, not a directory: {path}")


def _locate_yaml(yaml_path: str | Path | None, layers: _Layers, rootdir: Path) -> tuple[Path | None, str]:
    """The settings file to read and the source label of that choice."""
    if yaml_path is not None:
        path = _absolute(Path(yaml_path).expanduser(), rootdir)
        if not path.is_file():
            raise ConfigError(f"settings file {path}: file not found")
        return path, "yaml_path argument"
    spec = option("config")
    given = _find(spec, layers)
    if given is not None:
        return _parse_given(spec, given), given.label
    candidate = rootdir / YAML_NAME
    return (candidate, f"found {YAML_NAME} in rootdir") if candidate.is_file() else (None, "default")


def _default_canonical_kind(name: str) -> str:
    # Imported lazily: the perturbations module pulls in numpy, and custom kinds registered through the
    # hook must be known by the time validation runs.
    from .perturbations import canonical_kind

    return canonical_kind(name)


def _canonical_kinds(names: Iterable[str], canon: CanonicalKind, where: str) -> tuple[str, ...]:
    kinds = []
    for name in names:
        try:
            kinds.append(canon(name))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return _unique(kinds)


def resolve_settings(*, cli: Mapping[str, Any], env: Mapping[str, str], ini: Mapping[str, Any],
                     yaml_path: str | Path | None, rootdir: Path, invocation_dir: Path | None = None,
                     ini_path: Path | None = None, canonical_kind: CanonicalKind | None = None
                     ) -> Settings:
    """Resolve every option: CLI > environment > ini > YAML > default, then validate.

    ``cli`` is keyed by dest (``robustexplain_seed``; ``vars(config.option)`` works), ``ini`` by ini
    key (``robustexplain_seed``), ``env`` by variable name. ``yaml_path`` None means:
    the ``config`` option if set, else ``<rootdir>/robustexplain.yaml`` if it exists, else no file.
    Relative paths are taken against ``invocation_dir`` (CLI, environment; default: the current
    directory), the ini file's directory (ini) or the YAML file's directory (YAML) — the file that
    names a path is what it is relative to, as pytest does for ini ``paths``. ``canonical_kind`` maps a
    perturbation name or alias to its kind (default: ``perturbations.canonical_kind``, which also knows
    kinds registered through the hook). Raises ConfigError naming the origin of any bad value.
    """
    rootdir = Path(os.path.abspath(rootdir))
    invocation_dir = Path(os.path.abspath(invocation_dir or Path.cwd()))
    ini_label = f" in {_display(Path(ini_path), rootdir)}" if ini_path else ""
    ini_base = Path(os.path.abspath(Path(ini_path).parent)) if ini_path else rootdir
    layers = _Layers(cli, env, ini, ini_label, ini_base, {}, "", rootdir, invocation_dir)
    yaml_file, yaml_source = _locate_yaml(yaml_path, layers, rootdir)
    if yaml_file is not None:
        layers = replace(layers, yaml=load_yaml(yaml_file, rootdir=rootdir),
                         yaml_label=_display(yaml_file, rootdir), yaml_base=yaml_file.parent)

    values, sources, wheres = _resolve_values(layers)
    values["config"], sources["config"], wheres["config"] = yaml_file, yaml_source, yaml_source
    if sources["perturbations"] != "default":
        # The default is already canonical; skipping it keeps numpy (perturbations) out of plain runs.
        values["perturbations"] = _canonical_kinds(values["perturbations"],
                                                   canonical_kind or _default_canonical_kind,
                                                   wheres["perturbations"])
    if values["per_kind"]:
        # Checked as the marker's per_kind is, against the run's min_metric and known kinds.
        values["per_kind"] = _parse_per_kind(values["per_kind"], values, wheres["per_kind"],
                                             canonical_kind or _default_canonical_kind)
    _cross_check(values, wheres)
    return Settings(**values, sources=sources)


def _resolve_values(layers: _Layers) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """Every option but ``config``: its parsed value, its source label and its origin-with-value."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    wheres: dict[str, str] = {}
    backend_spec = option("backend")
    backend_given = _find(backend_spec, layers)
    backend = _parse_given(backend_spec, backend_given) if backend_given else backend_spec.default
    for spec in OPTIONS:
        if spec.field == "config":
            continue
        # OLLAMA_HOST describes an Ollama server: it must not redirect an OpenAI-compatible backend.
        given = _find(spec, layers, fallbacks=backend == "ollama")
        if given is None:
            values[spec.field], sources[spec.field] = spec.default, "default"
            wheres[spec.field] = f"default {spec.field}={_show(spec.default)}"
        else:
            values[spec.field], sources[spec.field] = _parse_given(spec, given), given.label
            wheres[spec.field] = given.where
    return values, sources, wheres


def _cross_check(values: Mapping[str, Any], wheres: Mapping[str, str]) -> None:
    """Combinations that are each valid alone but contradict each other."""
    _check_embedding_weight(values["weights"], values["embed_model"], wheres["weights"])
    if isinstance(values["dataset"], Path):
        for name in ("histories", "catalog", "cases"):
            if values[name] is not None:
                raise ConfigError(f"{wheres['dataset']} and {wheres[name]}: give either a dataset "
                                  "directory (with its own cases file, if any) or data files, not both")
    elif values["histories"] is None:
        # Without histories the bundled set would run, and a user who meant to gate their own data would
        # get a green run on ours.
        for name in ("catalog", "cases"):
            if values[name] is not None:
                raise ConfigError(f"{wheres[name]}: needs the user histories too (histories=FILE, and a "
                                  "catalog); alone it would be ignored and the bundled synthetic set run")


def settings_from_pytest(config: pytest.Config, *, env: Mapping[str, str] | None = None,
                         canonical_kind: CanonicalKind | None = None) -> Settings:
    """:func:`resolve_settings` fed from a pytest config (options and ini keys from register_options)."""
    cli = {spec.dest: config.getoption(spec.dest, default=None) for spec in OPTIONS}
    ini = {spec.ini: config.getini(spec.ini) for spec in OPTIONS}
    return resolve_settings(cli=cli, env=os.environ if env is None else env, ini=ini, yaml_path=None,
                            rootdir=config.rootpath, invocation_dir=config.invocation_params.dir,
                            ini_path=config.inipath, canonical_kind=canonical_kind)


# ---------------------------------------------------------------------------------------------------
# The marker.
# ---------------------------------------------------------------------------------------------------

MARKER_KEYWORDS: tuple[str, ...] = (
    "min_combined", "min_metric", "per_kind", "perturbations", "severities", "users", "repeats",
    "weights", "decision", "alpha", "inconclusive", "max_users", "noise_floor", "guard", "min_sensitivity",
    "max_insensitive_share", "min_history_reference", "max_injection_rate", "max_hijack_rate",
)
_PER_KIND_KEYS: tuple[str, ...] = ("min_combined", "min_metric")

MARKER_DOC = (
    "robustness(" + ", ".join(f"{k}=..." for k in MARKER_KEYWORDS) + "): gate this test on the "
    "robustness of LLM-generated recommendation explanations. Keywords override the run's robustexplain "
    "settings for this test; min_metric may be a number or a dict per metric "
    f"({', '.join(METRICS)}), per_kind a dict kind -> {{'min_combined': x, 'min_metric': y}}."
)


@dataclass(frozen=True)
class GateSettings:
    """The gate of one test: the run's settings overridden by its ``@pytest.mark.robustness`` keywords.

    ``min_metric`` is one threshold for every metric or a mapping over all four metrics; ``per_kind``
    maps a perturbation kind to overrides (``min_combined`` and/or ``min_metric``) for that kind's slice.
    Use :meth:`combined_threshold` and :meth:`metric_threshold` rather than reading them directly.
    """

    min_combined: float
    min_metric: float | Mapping[str, float]
    per_kind: Mapping[str, Mapping[str, Any]]
    perturbations: tuple[str, ...]
    severities: tuple[int, ...]
    users: int | None
    repeats: int
    weights: tuple[float, ...]
    decision: str
    alpha: float
    inconclusive: str
    max_users: int | None
    noise_floor: str
    guard: str
    min_sensitivity: float
    max_insensitive_share: float
    min_history_reference: float | None
    max_injection_rate: float
    max_hijack_rate: float
    sources: Mapping[str, str] = field(default_factory=dict)

    def combined_threshold(self, kind: str | None = None) -> float:
        """The ρ threshold for ``kind``'s slice (or for all kinds together when ``kind`` is None)."""
        override = self.per_kind.get(kind, {}) if kind is not None else {}
        return float(override.get("min_combined", self.min_combined))

    def metric_threshold(self, metric: str, kind: str | None = None) -> float:
        """The threshold of ``metric`` for ``kind``'s slice (or for all kinds when ``kind`` is None)."""
        if metric not in METRICS:
            raise KeyError(f"unknown metric {metric!r}")
        override = self.per_kind.get(kind, {}) if kind is not None else {}
        chosen = override.get("min_metric", self.min_metric)
        return float(chosen[metric] if isinstance(chosen, Mapping) else chosen)

    def thresholds(self, kind: str | None = None) -> dict[str, float]:
        """``{"combined": …, metric: …}`` for one slice: what a GateResult records."""
        return {"combined": self.combined_threshold(kind),
                **{m: self.metric_threshold(m, kind) for m in METRICS}}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}


def _marker_where(nodeid: str, key: str, value: Any) -> str:
    return f"{nodeid}: @pytest.mark.robustness({key}={value!r})"


def _marker_value(spec: OptionSpec, value: Any, where: str) -> Any:
    try:
        return spec.parse(value)
    except _Invalid as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _parse_min_metric(value: Any, base: float | Mapping[str, float], where: str
                      ) -> float | Mapping[str, float]:
    """A float, or a partial per-metric mapping (a dict, or ``semantic=0.5`` text) completed from ``base``
    (the threshold it overrides)."""
    try:
        named = _name_values(value, "metric thresholds")
        if named is None:
            return _THRESHOLD(value)
        _metric_names(named)
    except _Invalid as exc:
        raise ConfigError(f"{where}: {exc}") from None
    full = {m: float(base[m] if isinstance(base, Mapping) else base) for m in METRICS}
    for metric, threshold in named.items():
        full[metric] = _marker_value(option("min-combined"), threshold, f"{where}: {metric}")
    return MappingProxyType(full)


def _parse_per_kind(value: Any, gate: Mapping[str, Any], where: str, canon: CanonicalKind
                    ) -> Mapping[str, Mapping[str, Any]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a dict kind -> {{'min_combined': x, 'min_metric': y}}")
    out: dict[str, Mapping[str, Any]] = {}
    for name, overrides in value.items():
        if not isinstance(name, str):
            raise ConfigError(f"{where}: perturbation names must be text, got {name!r}")
        kind = _canonical_kinds([name], canon, where)[0]
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"{where}: the value for {name!r} must be a dict with "
                              f"{' and/or '.join(_PER_KIND_KEYS)}")
        unknown = [k for k in overrides if k not in _PER_KIND_KEYS]
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} for {name!r}"
                              f"{_hint(str(unknown[0]), _PER_KIND_KEYS)}")
        parsed: dict[str, Any] = {}
        if "min_combined" in overrides:
            parsed["min_combined"] = float(_marker_value(option("min-combined"), overrides["min_combined"],
                                                         where))
        if "min_metric" in overrides:
            parsed["min_metric"] = _parse_min_metric(overrides["min_metric"], gate["min_metric"], where)
        out[kind] = MappingProxyType(parsed)
    return MappingProxyType(out)


def _unknown_keyword(key: str, nodeid: str) -> ConfigError:
    if key.replace("-", "_") in _BY_FIELD:
        spec = option(key)
        return ConfigError(f"{nodeid}: {key!r} in @pytest.mark.robustness is a run-wide setting, not a "
                           f"per-test keyword (use {spec.cli}, {spec.env} or ini {spec.ini}). "
                           f"Valid: {', '.join(MARKER_KEYWORDS)}")
    return ConfigError(f"{nodeid}: unknown keyword {key!r} in @pytest.mark.robustness"
                       f"{_hint(key, MARKER_KEYWORDS)}")


def _check_embedding_weight(weights: tuple[float, ...], embed_model: str | None, where: str) -> None:
    from .metrics import embedding_weighted

    if embedding_weighted(weights) and not embed_model:
        raise ConfigError(f"{where}: gives {EMBEDDING!r} a share of ρ, but no embedding model is set "
                          "(embed-model: --robustexplain-embed-model, ROBUSTEXPLAIN_EMBED_MODEL)")


def apply_marker(settings: Settings, kwargs: Mapping[str, Any], *, nodeid: str, args: Sequence[Any] = (),
                 canonical_kind: CanonicalKind | None = None) -> GateSettings:
    """The gate of one test: marker keywords > run settings. Raises ConfigError naming the test.

    ``args`` are the marker's positional arguments (an error: every setting is a keyword). A keyword
    set to None is ignored (the run's setting applies), as a blank YAML value is.
    """
    if args:
        raise ConfigError(f"{nodeid}: @pytest.mark.robustness takes keywords only, got positional "
                          f"{list(args)!r}. Valid: {', '.join(MARKER_KEYWORDS)}")
    for key in kwargs:
        if key not in MARKER_KEYWORDS:
            raise _unknown_keyword(key, nodeid)
    canon = canonical_kind or _default_canonical_kind
    gate: dict[str, Any] = {k: getattr(settings, k) for k in MARKER_KEYWORDS}
    sources = {k: settings.sources.get(k, "default") for k in gate}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    for key, value in kwargs.items():
        if key == "per_kind":
            continue  # needs the final min_metric, below
        where = _marker_where(nodeid, key, value)
        if key == "min_metric":
            gate[key] = _parse_min_metric(value, settings.min_metric, where)
        elif key == "perturbations":
            gate[key] = _canonical_kinds(_marker_value(option(key), value, where), canon, where)
        else:
            gate[key] = _marker_value(option(key), value, where)
        if key == "weights":
            _check_embedding_weight(gate[key], settings.embed_model, where)
        sources[key] = f"@pytest.mark.robustness on {nodeid}"
    if "per_kind" in kwargs:
        where = _marker_where(nodeid, "per_kind", kwargs["per_kind"])
        # The marker's kinds replace the run's thresholds for those kinds; the run's others stay.
        gate["per_kind"] = MappingProxyType({**settings.per_kind,
                                             **_parse_per_kind(kwargs["per_kind"], gate, where, canon)})
        sources["per_kind"] = f"@pytest.mark.robustness on {nodeid}"
        if "perturbations" in kwargs:
            # Both set in the same marker: thresholds for a kind the test does not run are a typo.
            stray = [k for k in gate["per_kind"] if k not in gate["perturbations"]]
            if stray:
                raise ConfigError(f"{where}: per_kind names {stray[0]!r}, which is not among this test's "
                                  f"perturbations ({', '.join(gate['perturbations'])})")
    return GateSettings(**gate, sources=MappingProxyType(sources))
