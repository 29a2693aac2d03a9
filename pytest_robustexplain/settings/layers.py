"""The layers a setting is resolved from: command line > environment > ini file > ``robustexplain.yaml`` >
default, and the reader of that YAML file.

:func:`resolve_settings` takes each option's highest-precedence raw value, parses it, makes a path absolute
against what named it (the invocation directory, the ini file's or the YAML file's directory), checks the
combinations and records every value's origin in ``Settings.sources``; every bad value raises ConfigError
naming that origin. PyYAML is imported only when a YAML file is actually read.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..options.parsers import Invalid, hint, parse_host, suggest
from ..results import price_for
from ..sanitize import redact_url, spelled_out
from .checks import (
    CanonicalKind,
    canonical_kinds,
    check_embedding_weight,
    check_judge,
    default_canonical_kind,
    parse_per_kind,
)
from .record import Settings
from .table import BATCH_PRICE, DOORS, OPTIONS, YAML_NAME, OptionSpec, option

if TYPE_CHECKING:
    import pytest


@dataclass(frozen=True)
class _Given:
    """A raw value found in one layer, with what to call it and what relative paths are relative to."""

    raw: Any
    label: str  # for Settings.sources
    where: str  # for error messages: label and value
    base: Path


def _show(raw: Any) -> str:
    """A raw value as a message repeats it: shown, never obeyed — no line break, no "::", and a format
    character (zero-width, bidi) spelled out, since it is what the message is about."""
    return spelled_out(raw) if isinstance(raw, str) else repr(raw)


def _shown(spec: OptionSpec, raw: Any) -> str:
    """A raw value as a message may repeat it: a host URL without the password of its ``user:password@``
    (the message goes to a CI log; the value, unparsed, may be a list or malformed)."""
    if spec.parse is not parse_host:
        return _show(raw)
    hosts = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
    return ",".join(redact_url(str(h)) for h in hosts)


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
    import yaml  # lazy: only runs that have a YAML file pay for PyYAML

    shown = _display(path, rootdir) if rootdir else str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{shown}: cannot read settings file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown}: not UTF-8 text (bad byte at offset {exc.start})") from None
    from ..yaml_limits import YamlTooLarge, check_expansion  # lazy: kept off the plugin's import

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}
        check_expansion(node)
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
    except YamlTooLarge as exc:
        raise ConfigError(f"{shown}: not a settings file: {exc}") from None
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
            raise ConfigError(f"{shown}:{line}: unknown key {key!r}{hint(name, valid)}")
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
    if isinstance(raw, str) and not raw.strip():
        # Typed on the command line, unlike an empty environment variable: "--json ''" wrote no report and
        # "--severities ''" ran the default, silently.
        raise ConfigError(f"{spec.cli}: empty value; give one, or leave the option out for its default")
    if not _blank(raw) and raw is not False:  # store_true flags are None or True; False is "not given"
        where = spec.cli if raw is True else f"{spec.cli}={_shown(spec, raw)}"
        return _Given(raw, spec.cli, where, layers.invocation_dir)
    raw = layers.env.get(spec.env)
    if not _blank(raw):
        return _Given(raw, spec.env, f"{spec.env}={_shown(spec, raw)}", layers.invocation_dir)
    raw = layers.ini.get(spec.ini)
    if not _blank(raw):
        label = f"ini {spec.ini}{layers.ini_label}"
        return _Given(raw, label, f"ini {spec.ini}={_shown(spec, raw)}{layers.ini_label}", layers.ini_base)
    entry = layers.yaml.get(spec.field)
    if entry is not None and entry.value is not None:
        label = f"{layers.yaml_label}:{entry.line} key {entry.key}"
        return _Given(entry.value, label, f"{label}={_shown(spec, entry.value)}", layers.yaml_base)
    for name in spec.env_fallbacks if fallbacks else ():
        raw = layers.env.get(name)
        if not _blank(raw):
            return _Given(raw, name, f"{name}={_shown(spec, raw)}", layers.invocation_dir)
    return None


def _parse_given(spec: OptionSpec, given: _Given) -> Any:
    try:
        value = spec.parse(given.raw)
    except Invalid as exc:
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


def resolve_settings(*, cli: Mapping[str, Any], env: Mapping[str, str], ini: Mapping[str, Any],
                     yaml_path: str | Path | None, rootdir: Path, invocation_dir: Path | None = None,
                     ini_path: Path | None = None, canonical_kind: CanonicalKind | None = None,
                     door: str = "pytest") -> Settings:
    """Resolve every option: CLI > environment > ini > YAML > default, then validate.

    ``cli`` is keyed by dest (``robustexplain_seed``; ``vars(config.option)`` works), ``ini`` by ini
    key (``robustexplain_seed``), ``env`` by variable name. ``yaml_path`` None means:
    the ``config`` option if set, else ``<rootdir>/robustexplain.yaml`` if it exists, else no file.
    Relative paths are taken against ``invocation_dir`` (CLI, environment; default: the current
    directory), the ini file's directory (ini) or the YAML file's directory (YAML) — the file that
    names a path is what it is relative to, as pytest does for ini ``paths``. ``canonical_kind`` maps a
    perturbation name or alias to its kind (default: ``perturbations.canonical_kind``, which also knows
    kinds registered through the hook). ``door`` is the one resolving (:data:`DOORS`): a setting that
    door does not honour keeps its default, and its source says what was ignored
    (:func:`ignored_settings`). Raises ConfigError naming the origin of any bad value.
    """
    if door not in DOORS:
        raise ValueError(f"unknown door {door!r}; one of {', '.join(DOORS)}")
    rootdir = Path(os.path.abspath(rootdir))
    invocation_dir = Path(os.path.abspath(invocation_dir or Path.cwd()))
    ini_label = f" in {_display(Path(ini_path), rootdir)}" if ini_path else ""
    ini_base = Path(os.path.abspath(Path(ini_path).parent)) if ini_path else rootdir
    layers = _Layers(cli, env, ini, ini_label, ini_base, {}, "", rootdir, invocation_dir)
    yaml_file, yaml_source = _locate_yaml(yaml_path, layers, rootdir)
    if yaml_file is not None:
        layers = replace(layers, yaml=load_yaml(yaml_file, rootdir=rootdir),
                         yaml_label=_display(yaml_file, rootdir), yaml_base=yaml_file.parent)

    values, sources, wheres = _resolve_values(layers, door)
    values["config"], sources["config"], wheres["config"] = yaml_file, yaml_source, yaml_source
    if sources["perturbations"] != "default":
        # The default is already canonical; skipping it keeps numpy (perturbations) out of plain runs.
        values["perturbations"] = canonical_kinds(values["perturbations"],
                                                   canonical_kind or default_canonical_kind,
                                                   wheres["perturbations"])
    if values["per_kind"]:
        # Checked as the marker's per_kind is, against the run's min_metric and known kinds.
        values["per_kind"] = parse_per_kind(values["per_kind"], values, wheres["per_kind"],
                                             canonical_kind or default_canonical_kind)
    _cross_check(values, wheres)
    check_env_names(env, exempt=values["api_key_env"])
    if values["batch"] and values["price"]:  # the models' calls go through the batch, at its price
        values["price"], sources["price"] = batch_prices(values["price"], values["model"]), (
            f"{sources['price']} × {BATCH_PRICE:g} for {', '.join(values['model'])} (batch)")
    return Settings(**values, sources=sources)


def batch_prices(prices: Mapping[str, tuple[float, float]], models: Iterable[str]
                 ) -> Mapping[str, tuple[float, float]]:
    """``prices`` with each tested model's own entry at the batch price (the judge keeps its own)."""
    halved = {model: (found[0] * BATCH_PRICE, found[1] * BATCH_PRICE) for model in models
              if (found := price_for(prices, model)) is not None}
    return MappingProxyType({**prices, **halved})


def resolve_recorded(entries: Mapping[str, YamlEntry]) -> Settings:
    """Settings from the values a report recorded (``robustexplain merge``), each parsed and cross-checked
    by the option table as a settings file's value is; the rest at their defaults."""
    here = Path.cwd()
    layers = _Layers({}, {}, {}, "", here, entries, "the shards' recorded settings", here, here)
    values, sources, wheres = _resolve_values(layers, "pytest")
    values["config"], sources["config"] = None, "default"
    if values["per_kind"]:
        values["per_kind"] = parse_per_kind(values["per_kind"], values, wheres["per_kind"],
                                             default_canonical_kind)
    _cross_check(values, wheres)
    return Settings(**values, sources=sources)


ENV_PREFIX = "ROBUSTEXPLAIN_"


INI_PREFIX = "robustexplain_"


def check_ini_names(keys: Iterable[str], ini_path: Path | None, rootdir: Path) -> None:
    """ConfigError for an ini key under ``robustexplain_`` that names no setting
    (``robustexplain_min_combind``): pytest only warns of an unknown key, and the gate would run at the
    default — a threshold nobody chose — on a green build. The prefix is the plugin's, so every unknown key
    under it is a typo, as an unknown YAML key or marker keyword is — spelt with dashes as the flag is
    (``robustexplain-min-combined``) too."""
    known = [spec.ini for spec in OPTIONS]
    for key in sorted(keys):
        if key.replace("-", "_").startswith(INI_PREFIX) and key not in known:
            where = _display(Path(ini_path), rootdir) if ini_path else "the ini file"
            near = suggest(key.replace("-", "_"), known)
            raise ConfigError(f"{where}: {key} is not a robustexplain setting{near} (pytest "
                              "only warns of an unknown ini key; under robustexplain_ it is an error)")


def check_env_names(env: Mapping[str, str], *, exempt: str | None = None) -> None:
    """ConfigError for a ``ROBUSTEXPLAIN_*`` variable that is a near miss of a setting's
    (``ROBUSTEXPLAIN_MIN_COMBIND``): ignored, it would leave the gate at its default and the build green
    on a threshold nobody chose. Other names under the prefix may be the project's own (a test suite's
    ``ROBUSTEXPLAIN_REAL_LLM_URL``, the variable ``api-key-env`` names) and stay ignored, as do blank
    ones (CI exports empty variables for missing secrets)."""
    known = {spec.env[len(ENV_PREFIX):] for spec in OPTIONS}
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name == exempt or _blank(env[name]):
            continue
        suffix = name[len(ENV_PREFIX):]
        if suffix in known:
            continue
        # A stricter cut-off than the did-you-mean of a value: this one turns a variable into an error.
        close = difflib.get_close_matches(suffix, sorted(known), n=1, cutoff=0.75)
        if close:
            raise ConfigError(f"{name}: not a robustexplain "
                              f"setting; did you mean {ENV_PREFIX}{close[0]}?")


def _resolve_values(layers: _Layers, door: str) -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
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
        if given is None or door not in spec.doors:
            values[spec.field], sources[spec.field] = spec.default, "default"
            wheres[spec.field] = f"default {spec.field}={_show(spec.default)}"
            if given is not None:
                sources[spec.field] = f"default{_IGNORED}{given.label} ({' and '.join(spec.doors)} only)"
        else:
            values[spec.field], sources[spec.field] = _parse_given(spec, given), given.label
            wheres[spec.field] = given.where
    return values, sources, wheres


# The report files a run writes; two on one path would silently overwrite each other. (save-baseline is the
# JSON report under another name: it may share the json path.)
REPORT_OUTPUTS: tuple[str, ...] = ("json", "html", "markdown")


def check_report_paths(outputs: Mapping[str, tuple[Path | None, str]]) -> None:
    """ConfigError when two reports of different formats would be written to one file."""
    seen: dict[Path, str] = {}
    for path, where in outputs.values():
        if path is None:
            continue
        key = Path(os.path.realpath(path))
        if key in seen:
            raise ConfigError(f"{seen[key]} and {where}: two reports would be written to the same file "
                              f"{path}, the second overwriting the first; give each its own path")
        seen[key] = where


_IGNORED = "; ignored: "


def ignored_settings(settings: Settings) -> dict[str, str]:
    """The settings given in some layer but ignored by the resolving door, with what was ignored."""
    return {name: source.split(_IGNORED, 1)[1] for name, source in settings.sources.items()
            if _IGNORED in source}


def _cross_check(values: Mapping[str, Any], wheres: Mapping[str, str]) -> None:
    """Combinations that are each valid alone but contradict each other."""
    check_embedding_weight(values["weights"], values["embed_model"], wheres["weights"])
    check_report_paths({name: (values[name], wheres[name]) for name in REPORT_OUTPUTS})
    check_judge(values["min_faithful_rate"], values["judge_model"], wheres["min_faithful_rate"])
    if values["min_judge_agreement"] is not None and values["judge_labels"] is None:
        raise ConfigError(f"{wheres['min_judge_agreement']}: needs people's verdicts to agree with "
                          "(judge-labels: --robustexplain-judge-labels=FILE)")
    for name in ("judge_backend", "judge_host", "judge_criteria", "judge_labels"):
        if values["judge_model"] is None and wheres[name] != "default" and values[name] not in (None, "auto"):
            raise ConfigError(f"{wheres[name]}: configures the faithfulness judge, but no judge-model is "
                              "set (judge-model=MODEL turns the judge on)")
    if values["batch"] and values["backend"] != "openai":
        raise ConfigError(f"{wheres['batch']}: provider batches are the OpenAI-compatible API's "
                          f"(/v1/batches); this run's backend is {values['backend']} (backend=openai)")
    if values["batch"] and values["cache"] not in ("write", "read-write"):
        raise ConfigError(f"{wheres['batch']}: a batch keeps its answers (and a batch still pending) in the "
                          f"response cache, which cache={values['cache']} does not write (cache=read-write)")
    if values["max_cost"] is not None and not values["price"]:
        raise ConfigError(f"{wheres['max_cost']}: needs the price of the model's tokens (price: "
                          "--robustexplain-price=IN/OUT per million tokens) to know what a call costs")
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


def unknown_ini_keys(config: pytest.Config) -> tuple[str, ...]:
    """The ini keys pytest does not know (it warns of them): pytest has no public list, so this asks the
    method its own check uses (``Config._get_unknown_ini_keys``, pytest 6 on); none where it is missing."""
    found = getattr(config, "_get_unknown_ini_keys", None)
    return tuple(found()) if callable(found) else ()


def settings_from_pytest(config: pytest.Config, *, env: Mapping[str, str] | None = None,
                         canonical_kind: CanonicalKind | None = None) -> Settings:
    """:func:`resolve_settings` fed from a pytest config (options and ini keys from register_options)."""
    cli = {spec.dest: config.getoption(spec.dest, default=None) for spec in OPTIONS}
    ini = {spec.ini: config.getini(spec.ini) for spec in OPTIONS}
    check_ini_names(unknown_ini_keys(config), config.inipath, config.rootpath)
    return resolve_settings(cli=cli, env=os.environ if env is None else env, ini=ini, yaml_path=None,
                            rootdir=config.rootpath, invocation_dir=config.invocation_params.dir,
                            ini_path=config.inipath, canonical_kind=canonical_kind)
