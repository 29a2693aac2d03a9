"""Parsers of the option table: a raw value (text from the command line, environment and ini; any YAML or
Python value from the YAML file and the marker) becomes a typed value, or raises ``Invalid`` with the
problem only; the resolver (``settings.layers``) and the marker (``settings.marker``) prefix it with where
the value came from.

Standard library only at the top; the metrics module loads when weights are parsed.
"""

from __future__ import annotations

import ast
import difflib
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from ..metrics import check_weights
from ..results import (
    ALL_METRICS,
    ANY_MODEL,
    DEFAULT_MIN_METRIC,
    KIND_NAME,
    METRICS,
    SEVERITY_RANGE,
    TYPO_CUTOFF,
    is_number,
    user_metric_name,
)

PER_KIND_KEYS: tuple[str, ...] = ("min_combined", "min_metric", "min_relative")


class Invalid(Exception):
    """A parser's complaint about a raw value; the resolver prefixes it with where the value came from."""


Parser = Callable[[Any], Any]


def suggest(word: str, choices: Iterable[str]) -> str:
    """``; did you mean 'x'?`` when a close match exists, else an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=TYPO_CUTOFF)
    return f"; did you mean {close[0]!r}?" if close else ""


def hint(word: str, choices: Sequence[str]) -> str:
    """The suggestion (or a full stop) followed by the valid names, to end an "unknown name" message."""
    return f"{suggest(word, choices) or '.'} Valid: {', '.join(choices)}"


def parse_text(raw: Any) -> str:
    if not isinstance(raw, str):
        raise Invalid(f"expected text, got {type(raw).__name__}")
    text = raw.strip()
    if not text:
        raise Invalid("empty value")
    return printable(text)


def parse_shard(raw: Any) -> str:
    """``"2/4"`` (this run measures the second of four shards of the plan's users) -> ``"2/4"``, normalised;
    1 <= i <= N."""
    text = parse_text(raw) if isinstance(raw, str) else raw
    found = re.fullmatch(r"\s*(\d{1,6})\s*/\s*(\d{1,6})\s*", text) if isinstance(text, str) else None
    if found is None:
        raise Invalid(f"expected I/N, the shard and how many there are (2/4), got {raw!r}")
    index, count = int(found[1]), int(found[2])
    if not 1 <= index <= count:
        raise Invalid(f"shard {index} of {count}: I runs from 1 to N")
    return f"{index}/{count}"


def printable(text: str) -> str:
    """``text`` when it holds no control, line-break, format (zero-width, bidi) or separator character;
    else Invalid naming the first. A setting's value reaches CI logs and reports: a model name carrying a
    newline and ``::error …`` became a workflow command in the "not found" message."""
    for char in text:
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            name = unicodedata.name(char, "a control character")
            raise Invalid(f"contains U+{ord(char):04X} ({name.lower()}): a line break or an invisible "
                          "character in a setting reaches the logs and reports as written")
    return text


def _to_int(raw: Any) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        try:
            return int(parse_text(raw))
        except ValueError:
            raise Invalid("not an integer") from None
    raise Invalid(f"not an integer (got {type(raw).__name__})")


def _to_float(raw: Any) -> float:
    if is_number(raw):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(parse_text(raw))
        except ValueError:
            raise Invalid("not a number") from None
    else:
        raise Invalid(f"not a number (got {type(raw).__name__})")
    if not math.isfinite(value):
        raise Invalid("must be a finite number")
    return value


def int_parser(minimum: int, *, allow_all: bool = False) -> Parser:
    def parse(raw: Any) -> int | None:
        if allow_all and isinstance(raw, str) and raw.strip().lower() == "all":
            return None
        value = _to_int(raw)
        if value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer ≥ {minimum}"
            raise Invalid(f"must be {what}" + (" (or 'all')" if allow_all else ""))
        return value
    return parse


def float_parser(low: float, high: float | None, *, open_low: bool = False, open_high: bool = False
                  ) -> Parser:
    def parse(raw: Any) -> float:
        value = _to_float(raw)
        too_low = value <= low if open_low else value < low
        too_high = high is not None and (value >= high if open_high else value > high)
        if too_low or too_high:
            if high is None:
                raise Invalid(f"must be {'greater than' if open_low else 'at least'} {low:g}")
            if open_low or open_high:
                raise Invalid(f"must be strictly between {low:g} and {high:g}")
            raise Invalid(f"must be between {low:g} and {high:g}")
        return value
    return parse


def choice_parser(choices: tuple[str, ...]) -> Parser:
    def parse(raw: Any) -> str:
        # YAML 1.1 reads a bare ``off``/``on`` as a boolean; map it back rather than rejecting it.
        if isinstance(raw, bool):
            word = "on" if raw else "off"
            if word in choices:
                return word
            raise Invalid(f"must be one of {', '.join(choices)} (got a boolean)")
        value = parse_text(raw).lower()
        if value not in choices:
            raise Invalid(f"must be one of {', '.join(choices)}{suggest(value, choices)}")
        return value
    return parse


def _split_list(raw: Any) -> list[Any]:
    """A comma-separated string or a YAML/Python sequence, as a list of items (strings stripped)."""
    if isinstance(raw, str):
        parts = [p.strip() for p in raw.split(",")]
        if len(parts) > 1 and any(not p for p in parts):
            raise Invalid("empty entry in comma-separated list")
        return [p for p in parts if p]
    if isinstance(raw, (list, tuple)):
        return list(raw)
    raise Invalid(f"expected a comma-separated list, got {type(raw).__name__}")


def unique(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def _parse_names(raw: Any) -> tuple[str, ...]:
    names = []
    for item in _split_list(raw):
        if not isinstance(item, str) or not item.strip():
            raise Invalid(f"list entries must be non-empty text, got {item!r}")
        names.append(printable(item.strip()))
    return unique(names)


def parse_models(raw: Any) -> tuple[str, ...]:
    """Model names; two spellings of one Ollama model ("x" and "x:latest") would run it twice."""
    names = _parse_names(raw)
    seen: dict[str, str] = {}
    for name in names:
        same = name if ":" in name else f"{name}:latest"
        if same in seen:
            raise Invalid(f"{seen[same]!r} and {name!r} name the same model; give it once")
        seen[same] = name
    return names


def parse_judge_models(raw: Any) -> str:
    """One judge model, or several comma-separated (kept as one string: :attr:`Settings.judge_models`
    splits it, as ``host`` is kept)."""
    names = parse_models(raw)
    if not names:
        raise Invalid("empty value")
    listed = [item.strip() for item in _split_list(raw) if isinstance(item, str)]
    twice = next((name for i, name in enumerate(listed) if name in listed[:i]), None)
    if twice is not None:  # two judges that are one agree by construction: their κ would mean nothing
        raise Invalid(f"judge model {printable(twice)!r} is listed twice; give each judge once")
    if any("," in name for name in names):  # a YAML list entry "a,b" would split differently later
        raise Invalid("a judge model name cannot hold a comma")
    return ",".join(names)


def parse_kinds(raw: Any) -> tuple[str, ...]:
    names = _parse_names(raw)
    if not names:
        raise Invalid("needs at least one perturbation kind")
    return names


def parse_severities(raw: Any) -> tuple[int, ...]:
    """``"1-5"``, ``"1,3,5"``, ``"1-2,5"``, ``3``, ``[1, 2]`` or ``range(1, 4)`` -> sorted unique levels."""
    low, high = SEVERITY_RANGE
    if isinstance(raw, range):
        raw = list(raw)
    items: list[Any] = [raw] if is_number(raw) else _split_list(raw)
    levels: list[int] = []
    for item in items:
        if isinstance(item, str) and re.fullmatch(r"\s*\d+\s*-\s*\d+\s*", item):
            # The ends are checked before anything is allocated: "1-50000000" built 50 million levels, and
            # "1-99999999999999999999" overflowed range() with a traceback, before "outside 1-5" was said.
            ends = [x.strip().lstrip("0") or "0" for x in item.split("-")]
            start, stop = (int(x) if len(x) <= 3 else high + 1 for x in ends)
            if start > stop:
                raise Invalid(f"range {item.strip()!r} runs backwards")
            if start < low or stop > high:
                first = start if start < low else max(start, high + 1)  # the first level outside
                raise Invalid(f"severity {first} is outside {low}-{high}")
            levels.extend(range(start, stop + 1))
            continue
        try:
            levels.append(_to_int(item))
        except Invalid:
            raise Invalid(f"severity {item!r} is not an integer or a range like 1-5") from None
    if not levels:
        raise Invalid("needs at least one severity")
    bad = [lv for lv in levels if not low <= lv <= high]
    if bad:
        raise Invalid(f"severity {bad[0]} is outside {low}-{high}")
    return tuple(sorted(set(levels)))


def name_values(raw: Any, what: str) -> Mapping[str, Any] | None:
    """A mapping given as a mapping (YAML), as ``name=value[,name=value]`` text (command line, environment,
    ini), or as the ``{'name': value}`` text pytest makes of a TOML inline table in pyproject.toml; None
    for anything else (a plain value)."""
    if isinstance(raw, Mapping):
        return raw
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    if text.startswith("{"):

        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            parsed = None
        if not isinstance(parsed, dict):
            raise Invalid(f"{text!r} is not a table of {what}")
        return parsed
    if "=" not in text:
        return None
    pairs: dict[str, Any] = {}
    for part in _split_list(text):
        name, sep, value = part.partition("=")
        if not sep:
            raise Invalid(f"{part!r}: mix of plain and name=value {what}")
        pairs[name.strip()] = value
    return pairs


def metric_names(raw: Mapping[str, Any], names: tuple[str, ...] = METRICS, *, user: bool = False) -> None:
    """Refuse a name that is not a metric's. ``user``: a name that can be a user metric's passes here (which
    metrics a test has is known once its conftests registered them: the engine checks it then)."""
    unknown = [k for k in raw if k not in names and not (user and user_metric_name(k))]
    if unknown:
        raise Invalid(f"unknown metric {unknown[0]!r}{suggest(str(unknown[0]), names)} "
                       f"(metrics: {', '.join(names)})")


def parse_weights(raw: Any) -> tuple[float, ...]:
    """Weights from ``"a,b,c,d"``, ``"semantic=a,keyword=b,..."`` (``embedding=e`` too), a list or a dict;
    checked by the one definition, :func:`pytest_robustexplain.metrics.check_weights`."""
    named = name_values(raw, "weights")
    if named is not None:
        raw = named
    if isinstance(raw, Mapping):
        metric_names(raw, ALL_METRICS)  # did-you-mean for a misspelt name
    else:
        raw = _split_list(raw)
    try:
        return check_weights(raw)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


THRESHOLD = float_parser(0.0, 1.0)


def parse_min_metric_setting(raw: Any) -> float | Mapping[str, float]:
    """One threshold for every metric, or ``semantic=0.5,keyword=0.4`` (a mapping in YAML or
    pyproject.toml): the metrics named get their own threshold, the others the default 0.35."""
    named = name_values(raw, "metric thresholds")
    if named is None:
        return THRESHOLD(raw)
    metric_names(named, user=True)
    full = dict.fromkeys(METRICS, DEFAULT_MIN_METRIC)
    for metric, value in named.items():
        try:
            full[metric] = THRESHOLD(value)
        except Invalid as exc:
            raise Invalid(f"{metric}: {exc}") from None
    return MappingProxyType(full)


def parse_check_limits(raw: Any) -> Mapping[str, float]:
    """The limits of the checks that declare one (the user's own) by name, ``no_price=0.05`` (a mapping in
    YAML, pyproject.toml and the marker), each in [0, 1]. Which names exist is known only once the checks
    are registered; the engine says so when a test's gate names one that is not."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return MappingProxyType({})
    named = name_values(raw, "check limits")
    if named is None:
        raise Invalid(f"expected CHECK=LIMIT pairs (e.g. no_price=0.05), got {raw!r:.60}")
    limits = {}
    for name, value in named.items():
        if not isinstance(name, str) or not KIND_NAME.match(name):
            raise Invalid(f"{name!r} is not a check name (lower-case letters, digits and underscores)")
        try:
            limits[name] = THRESHOLD(value)
        except Invalid as exc:
            raise Invalid(f"{name}: {exc}") from None
    return MappingProxyType(limits)


def parse_per_kind_setting(raw: Any) -> Mapping[str, Mapping[str, Any]]:
    """Per-kind thresholds: a mapping kind -> {min_combined, min_metric} (YAML, pyproject.toml), or
    ``category_drift.min_combined=0.4,noise.min_metric=0.3,noise.min_metric.semantic=0.5`` as text.
    Kinds and values are checked with the run's settings in :func:`resolve_settings`."""
    if isinstance(raw, str) and not raw.strip().startswith("{"):
        out: dict[str, dict[str, Any]] = {}
        for part in _split_list(raw):
            path, sep, value = part.partition("=")
            keys = [k.strip() for k in path.split(".")]
            if not sep or len(keys) not in (2, 3) or keys[1] not in PER_KIND_KEYS or (
                    len(keys) == 3 and keys[1] != "min_metric"):
                raise Invalid(f"{part!r}: expected KIND.min_combined=X, KIND.min_metric=X, "
                               "KIND.min_metric.METRIC=X or KIND.min_relative=X")
            entry = out.setdefault(keys[0], {})
            if len(keys) == 3:
                current = entry.get("min_metric")
                entry["min_metric"] = {**(current if isinstance(current, dict) else {}), keys[2]: value}
            else:
                entry[keys[1]] = value
        return out
    named = name_values(raw, "per-kind thresholds")
    if named is None:
        raise Invalid("expected a mapping kind -> {min_combined: X, min_metric: Y}")
    return named


def parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    word = parse_text(raw).lower() if isinstance(raw, str) else None
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise Invalid("must be true or false (1/0, yes/no, on/off)")


def parse_path(raw: Any) -> Path:
    # Relative paths are made absolute by the resolver, which knows which directory they are relative to.
    return Path(parse_text(raw)).expanduser()


MAX_PRICE = 1_000_000.0  # per million tokens: far above any API's, far below what overflows a sum


def parse_price(raw: Any) -> Mapping[str, tuple[float, float]]:
    """Prices per million tokens, input/output: ``0.15/0.60`` for every model, or per model
    ``gpt-4o-mini=0.15/0.60,llama3.1:8b=0/0`` (a mapping in YAML, whose values may also be
    ``{input: 0.15, output: 0.60}`` or ``[0.15, 0.60]``)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return MappingProxyType({})
    if isinstance(raw, Mapping) and set(raw) <= {"input", "output"}:
        return MappingProxyType({ANY_MODEL: _one_price(raw)})
    named = name_values(raw, "prices")
    if named is None:
        return MappingProxyType({ANY_MODEL: _one_price(raw)})
    prices = {}
    for model, value in named.items():
        if not isinstance(model, str) or not model.strip() or not model.isprintable():
            raise Invalid(f"{model!r} is not a model name")
        try:
            prices[model.strip()] = _one_price(value)
        except Invalid as exc:
            raise Invalid(f"{model.strip()}: {exc}") from None
    return MappingProxyType(prices)


def parse_columns(raw: Any) -> Mapping[str, str]:
    """CSV column names by field, ``user_id=userId,item_id=movieId`` (a mapping in YAML); which fields a
    file may rename is checked against its header when the data is read."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return MappingProxyType({})
    named = name_values(raw, "columns")
    if named is None:
        raise Invalid("expected FIELD=COLUMN pairs separated by commas (e.g. user_id=userId,item_id=movieId)")
    columns = {}
    for field, column in named.items():
        if not (isinstance(field, str) and field.strip() and isinstance(column, str) and column.strip()):
            raise Invalid(f"{field!r}={column!r}: give a field name and a column name")
        columns[field.strip()] = column.strip()
    return MappingProxyType(columns)


def _one_price(raw: Any) -> tuple[float, float]:
    if isinstance(raw, Mapping):
        if set(raw) != {"input", "output"}:
            raise Invalid("a price is {input: X, output: Y} per million tokens, got keys "
                          f"{sorted(map(str, raw))}")
        parts: list[Any] = [raw["input"], raw["output"]]
    elif isinstance(raw, str) and raw.count("/") == 1:
        parts = [p.strip() for p in raw.split("/")]
    elif isinstance(raw, (list, tuple)) and len(raw) == 2:  # [input, output], as a report records it
        parts = list(raw)
    else:
        raise Invalid(f"a price is INPUT/OUTPUT per million tokens (e.g. 0.15/0.60), got {raw!r:.60}")
    low_high = float_parser(0.0, MAX_PRICE)
    return low_high(parts[0]), low_high(parts[1])


def parse_history(raw: Any) -> str | Path:
    # YAML reads a bare ``off`` as false.
    if raw is False or (isinstance(raw, str) and raw.strip().lower() == "off"):
        return "off"
    return parse_path(raw)


def parse_dataset(raw: Any) -> str | Path:
    if isinstance(raw, str) and raw.strip().lower() == "synthetic":
        return "synthetic"
    return parse_path(raw)


def parse_host(raw: Any) -> str:
    """One base URL, or several (comma-separated, a YAML list) to spread the calls over; kept as one
    comma-separated string (:attr:`Settings.hosts` splits it)."""
    hosts = [_one_host(h) for h in _split_list(raw)]
    if not hosts:
        raise Invalid("empty value")
    twice = next((h for i, h in enumerate(hosts) if h in hosts[:i]), None)
    if twice is not None:
        raise Invalid(f"host {twice!r} is listed twice")
    return ",".join(hosts)


def _one_host(raw: Any) -> str:
    host = parse_text(raw)
    if any(ch.isspace() for ch in host):
        raise Invalid("must not contain spaces")
    scheme, sep, _ = host.partition("://")
    if sep and scheme.lower() not in ("http", "https"):
        raise Invalid(f"unsupported scheme {scheme!r} (use http:// or https://)")

    try:  # a bracket left open, a port that is no number or out of range: said here, with the source
        port = urlsplit(host if sep else f"http://{host}").port
    except ValueError as exc:
        raise Invalid(f"not a URL ({exc}); e.g. http://127.0.0.1:11434 or http://[::1]:8080/v1") from None
    if port == 0:
        raise Invalid("port 0 is not a port a server listens on")
    if "?" in host or "#" in host:
        # The clients append their API paths to the host and drop a query (a gateway's api_key=…): it
        # never reached the server, but the reports wrote it. The message shows it redacted (layers._shown).
        raise Invalid("a host cannot carry a query string or a fragment: the clients add their API paths to "
                      "it and drop them, so they never reach the server; give a key with api-key-env "
                      "(--robustexplain-api-key-env) or as the URL's user:password@")
    return host


def parse_env_name(raw: Any) -> str:
    name = parse_text(raw)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        # The commonest mistake is pasting the key itself (the spec sets echo=False so it is not shown).
        raise Invalid("must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                       "not the key itself")
    return name
