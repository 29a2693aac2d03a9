"""Tests for pytest_robustexplain.settings: option table, five-layer resolution, validation, marker."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain.errors import ConfigError
from pytest_robustexplain.results import METRICS
from pytest_robustexplain.settings import (
    DEFAULT_PERTURBATIONS,
    MARKER_DOC,
    MARKER_KEYWORDS,
    OPTIONS,
    GateSettings,
    Settings,
    apply_marker,
    load_yaml,
    option,
    register_options,
    resolve_settings,
    settings_from_pytest,
)

pytest_plugins = ["pytester"]

_ALIASES = {"noise": "noise_injection", "shuffle": "temporal_shuffle", "dilution": "behavior_dilution",
            "dilute": "behavior_dilution", "drift": "category_drift", "missing": "missing_values"}


def canon(name: str) -> str:
    """Stand-in for perturbations.canonical_kind (same contract: canonical name or ConfigError)."""
    key = name.strip().lower()
    if key in DEFAULT_PERTURBATIONS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    raise ConfigError(f"unknown perturbation {name!r}")


def resolve(tmp_path: Path, *, cli: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
            ini: Mapping[str, Any] | None = None, yaml_text: str | None = None,
            invocation_dir: Path | None = None, yaml_path: Path | None = None) -> Settings:
    """Resolve in tmp_path (rootdir, invocation dir, pytest.ini) with an optional robustexplain.yaml."""
    if yaml_text is not None:
        (tmp_path / "robustexplain.yaml").write_text(yaml_text, encoding="utf-8")
    return resolve_settings(cli=cli or {}, env=env or {}, ini=ini or {}, yaml_path=yaml_path,
                            rootdir=tmp_path, invocation_dir=invocation_dir or tmp_path,
                            ini_path=tmp_path / "pytest.ini", canonical_kind=canon)


def config_error(tmp_path: Path, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        resolve(tmp_path, **kwargs)
    return str(info.value)


# --- the option table -------------------------------------------------------------------------------

def test_option_table_is_the_settings_fields_in_order() -> None:
    from pytest_robustexplain.checks import BUILTIN

    settings_fields = [f.name for f in dataclasses.fields(Settings) if f.name not in ("sources", "declared")]
    declared = [spec.field for check in BUILTIN for spec in check.options]
    assert [spec.field for spec in OPTIONS if spec.field not in declared] == settings_fields
    # The checks' own settings are the table's too, each read like a field, in the record's JSON in order.
    defaults = Settings.defaults()
    assert list(defaults.declared) == declared and declared
    assert [getattr(defaults, name) for name in declared] == [option(name).default for name in declared]
    assert list(defaults.to_dict()) == [spec.field for spec in OPTIONS] + ["sources"]


def test_a_checks_own_setting_is_constructed_read_replaced_and_compared_like_a_field() -> None:
    defaults = Settings.defaults()
    flat = {**defaults.by_name(), "max_copy_rate": 0.3}
    built = Settings(**flat, sources=defaults.sources)
    assert built.max_copy_rate == 0.3 == dataclasses.replace(defaults, max_copy_rate=0.3).max_copy_rate
    assert built == dataclasses.replace(defaults, max_copy_rate=0.3) != defaults
    assert dataclasses.replace(built, cache="off").max_copy_rate == 0.3  # replacing a field keeps the others
    with pytest.raises(TypeError, match="takes no setting 'max_copy_rat'"):
        Settings(**flat, max_copy_rat=0.1)
    with pytest.raises(TypeError, match="misses setting 'max_copy_rate'"):
        Settings(**{k: v for k, v in flat.items() if k != "max_copy_rate"})
    with pytest.raises(AttributeError, match="no attribute 'max_copy_rat'"):
        defaults.max_copy_rat  # noqa: B018
    gate = apply_marker(defaults, {"max_copy_rate": 0.2}, nodeid="t.py::t")
    assert gate.max_copy_rate == 0.2 and gate.sources["max_copy_rate"] == "@pytest.mark.robustness on t.py::t"
    assert gate.to_dict()["max_copy_rate"] == 0.2 and gate.to_dict()["sources"]["max_copy_rate"]


def test_option_names_derive_from_one_name() -> None:
    spec = option("min-combined")
    assert option("min_combined") is spec
    assert (spec.cli, spec.dest, spec.ini, spec.env) == (
        "--robustexplain-min-combined", "robustexplain_min_combined", "robustexplain_min_combined",
        "ROBUSTEXPLAIN_MIN_COMBINED")
    with pytest.raises(KeyError, match="min_combind"):
        option("min_combind")


def test_every_option_has_a_help_sentence_and_a_flag_is_a_switch_that_is_off_unless_given() -> None:
    for spec in OPTIONS:
        assert spec.help.strip().endswith("."), spec.name
        if spec.flag:  # a flag takes no value on the command line: it can only turn something on
            assert spec.default is False and spec.parse("true") is True and spec.parse("false") is False


def test_every_option_and_ini_key_is_registered_with_pytest_with_one_help(
        pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig()
    for spec in OPTIONS:  # registered (pytest refuses an unknown ini key), and "not given" stays detectable
        assert config.getoption(spec.dest) is None and config.getini(spec.ini) is None, spec.name
    out = " ".join(pytester.runpytest("--help").stdout.str().split())  # help lines unwrapped
    assert "robustness of LLM recommendation explanations:" in out  # the option group
    for spec in OPTIONS:
        assert spec.cli in out and spec.ini in out, spec.name
        assert " ".join(spec.help.split()[:6]) in out, spec.name  # one help text, for flag and ini key
    flags = pytester.parseconfig("--robustexplain-require-model", "--robustexplain-dry-run")
    assert flags.getoption("robustexplain_require_model") is True and flags.getoption("robustexplain_dry_run")


def test_registered_options_parse_with_a_real_pytest_parser() -> None:
    parser = pytest.Parser(_ispytest=True)
    register_options(parser)
    ns = parser.parse_known_args(["--robustexplain-seed=7", "--robustexplain-require-model"])
    assert ns.robustexplain_seed == "7"
    assert ns.robustexplain_require_model is True
    assert ns.robustexplain_model is None  # not given stays detectable


# --- defaults and precedence ------------------------------------------------------------------------

def test_defaults(tmp_path: Path) -> None:
    settings = resolve(tmp_path)
    assert settings == Settings.defaults()
    assert set(settings.sources.values()) == {"default"}
    assert settings.model == ()
    assert settings.backend == "ollama"
    assert settings.perturbations == DEFAULT_PERTURBATIONS
    assert settings.severities == (1, 2, 3, 4, 5)
    assert settings.users == 20 and settings.repeats == 1 and settings.seed == 42
    assert (settings.temperature, settings.num_predict, settings.num_ctx) == (0.0, 256, 4096)
    assert (settings.concurrency, settings.connect_timeout, settings.timeout) == (4, 5, 120)
    assert settings.retries == 4
    assert settings.cache == "read-write" and settings.cache_dir is None
    assert (settings.min_combined, settings.min_metric) == (0.5, 0.35)
    assert settings.weights == (0.25, 0.25, 0.25, 0.25)
    assert (settings.decision, settings.alpha, settings.inconclusive) == ("mean", 0.05, "fail")
    assert (settings.noise_floor, settings.progress, settings.max_regression) == ("auto", "auto", 0.02)
    assert settings.api_key_env == "OPENAI_API_KEY"
    assert settings.dataset == "synthetic" and settings.config is None
    assert settings.effective_host == "http://127.0.0.1:11434"


_ALL_LAYERS = {
    "cli": {"robustexplain_seed": "1"},
    "env": {"ROBUSTEXPLAIN_SEED": "2"},
    "ini": {"robustexplain_seed": "3"},
    "yaml_text": "seed: 4\n",
}


@pytest.mark.parametrize(("dropped", "value", "source"), [
    ((), 1, "--robustexplain-seed"),
    (("cli",), 2, "ROBUSTEXPLAIN_SEED"),
    (("cli", "env"), 3, "ini robustexplain_seed in pytest.ini"),
    (("cli", "env", "ini"), 4, "robustexplain.yaml:1 key seed"),
    (("cli", "env", "ini", "yaml_text"), 42, "default"),
])
def test_precedence_cli_env_ini_yaml_default(tmp_path: Path, dropped: tuple[str, ...], value: int,
                                             source: str) -> None:
    layers: dict[str, Any] = {k: v for k, v in _ALL_LAYERS.items() if k not in dropped}
    settings = resolve(tmp_path, **layers)
    assert settings.seed == value
    assert settings.sources["seed"] == source


def test_one_option_at_each_layer(tmp_path: Path) -> None:
    settings = resolve(
        tmp_path,
        cli={"robustexplain_model": "llama3.1:8b, qwen2.5:7b"},
        env={"ROBUSTEXPLAIN_REPEATS": "3"},
        ini={"robustexplain_concurrency": "8"},
        yaml_text="# settings\nmin_combined: 0.45\n",
    )
    assert settings.model == ("llama3.1:8b", "qwen2.5:7b")
    assert settings.repeats == 3 and settings.concurrency == 8 and settings.min_combined == 0.45
    assert settings.retries == 4
    assert dict(settings.sources) == {**{s.field: "default" for s in OPTIONS},
                                           "model": "--robustexplain-model",
                                           "repeats": "ROBUSTEXPLAIN_REPEATS",
                                           "concurrency": "ini robustexplain_concurrency in pytest.ini",
                                           "min_combined": "robustexplain.yaml:2 key min_combined",
                                           "config": "found robustexplain.yaml in rootdir"}
    assert settings.config == tmp_path / "robustexplain.yaml"


def test_cli_reads_dests_only_and_flags(tmp_path: Path) -> None:
    # vars(config.option) holds other plugins' dests too (pytest-timeout: "timeout"); they are not ours.
    settings = resolve(tmp_path, cli={"timeout": "1", "seed": "5", "robustexplain_require_model": True})
    assert settings.timeout == 120 and settings.seed == 42 and settings.require_model is True
    assert settings.sources["require_model"] == "--robustexplain-require-model"
    # argparse's "flag absent" (None, or False from other front ends) falls through to lower layers.
    settings = resolve(tmp_path, cli={"robustexplain_require_model": False},
                       env={"ROBUSTEXPLAIN_REQUIRE_MODEL": "yes"})
    assert settings.require_model is True
    assert settings.sources["require_model"] == "ROBUSTEXPLAIN_REQUIRE_MODEL"
    assert resolve(tmp_path, ini={"robustexplain_require_model": "false"}).require_model is False


def test_blank_env_and_ini_values_count_as_not_given(tmp_path: Path) -> None:
    # pytest < 9 returns "" or [] for absent ini keys; CI exports empty variables for missing secrets.
    settings = resolve(tmp_path, env={"ROBUSTEXPLAIN_MODEL": ""},
                       ini={"robustexplain_model": [], "robustexplain_seed": ""}, yaml_text="seed:\n")
    assert settings.model == () and settings.seed == 42
    assert settings.sources["seed"] == "default"


def test_ollama_host_is_a_fallback_for_ollama_only(tmp_path: Path) -> None:
    env = {"OLLAMA_HOST": "http://gpu-box:11434"}
    settings = resolve(tmp_path, env=env)
    assert settings.host == "http://gpu-box:11434" and settings.sources["host"] == "OLLAMA_HOST"
    assert resolve(tmp_path, env={**env, "ROBUSTEXPLAIN_HOST": "http://a:1"}).host == "http://a:1"
    assert resolve(tmp_path, env=env, ini={"robustexplain_host": "http://b:2"}).host == "http://b:2"
    openai = resolve(tmp_path, env=env, cli={"robustexplain_backend": "openai"})
    assert openai.host is None and openai.effective_host == "http://127.0.0.1:8080/v1"


def test_to_dict_is_json_ready(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    settings = resolve(tmp_path, cli={"robustexplain_json": "out/report.json"})
    data = json.loads(json.dumps(settings.to_dict()))
    assert data["json"] == str(tmp_path / "out" / "report.json")
    assert data["perturbations"] == list(DEFAULT_PERTURBATIONS)
    assert data["sources"]["json"] == "--robustexplain-json"


# --- paths ------------------------------------------------------------------------------------------

def test_relative_paths_are_relative_to_whoever_named_them(tmp_path: Path) -> None:
    here, conf = tmp_path / "here", tmp_path / "conf"
    for folder in (here, conf, tmp_path / "data"):
        folder.mkdir()
    (here / "h.jsonl").write_text("{}\n")
    (conf / "items.jsonl").write_text("{}\n")
    (tmp_path / "data" / "cases.jsonl").write_text("{}\n")
    (conf / "ci.yaml").write_text("catalog: items.jsonl\nhtml: ../reports/r.html\n")
    settings = resolve(tmp_path, invocation_dir=here,
                       cli={"robustexplain_histories": "h.jsonl", "robustexplain_config": "../conf/ci.yaml"},
                       ini={"robustexplain_cases": "data/cases.jsonl"})
    assert settings.histories == here / "h.jsonl"
    assert settings.catalog == conf / "items.jsonl"
    assert settings.cases == tmp_path / "data" / "cases.jsonl"
    assert settings.html == tmp_path / "reports" / "r.html"
    assert settings.config == conf / "ci.yaml"
    assert settings.sources["config"] == "--robustexplain-config"
    assert settings.sources["catalog"] == "conf/ci.yaml:1 key catalog"


def test_missing_data_file_names_the_file_and_the_option(tmp_path: Path) -> None:
    message = config_error(tmp_path, cli={"robustexplain_histories": "nope.jsonl"})
    assert message == f"--robustexplain-histories=nope.jsonl: file not found: {tmp_path / 'nope.jsonl'}"
    message = config_error(tmp_path, ini={"robustexplain_catalog": "items.csv"})
    assert message.startswith("ini robustexplain_catalog=items.csv in pytest.ini: file not found: ")
    assert str(tmp_path / "items.csv") in message
    message = config_error(tmp_path, yaml_text="prompt: p.txt\n")
    assert message.startswith("robustexplain.yaml:1 key prompt=p.txt: file not found")
    message = config_error(tmp_path, env={"ROBUSTEXPLAIN_BASELINE": str(tmp_path)})
    assert "ROBUSTEXPLAIN_BASELINE=" in message and "is a directory, not a file" in message


def test_dataset_directory_checks(tmp_path: Path) -> None:
    (tmp_path / "ml").mkdir()
    settings = resolve(tmp_path, cli={"robustexplain_dataset": "ml"})
    assert settings.dataset == tmp_path / "ml"
    assert resolve(tmp_path, env={"ROBUSTEXPLAIN_DATASET": "Synthetic"}).dataset == "synthetic"
    assert "directory not found" in config_error(tmp_path, cli={"robustexplain_dataset": "ml-25m"})
    (tmp_path / "h.jsonl").write_text("{}\n")
    message = config_error(tmp_path, cli={"robustexplain_dataset": "ml"},
                           ini={"robustexplain_histories": "h.jsonl"})
    assert message.startswith("--robustexplain-dataset=ml and ini robustexplain_histories=h.jsonl")
    assert "not both" in message


def test_report_path_must_not_be_a_directory(tmp_path: Path) -> None:
    message = config_error(tmp_path, cli={"robustexplain_markdown": "."})
    assert message.startswith("--robustexplain-markdown=.: is a directory")
    (tmp_path / "file").write_text("")
    assert "is a file, not a directory" in config_error(tmp_path, cli={"robustexplain_cache_dir": "file"})


# --- YAML -------------------------------------------------------------------------------------------

def test_yaml_keys_with_dashes_or_underscores_and_native_types(tmp_path: Path) -> None:
    settings = resolve(tmp_path, yaml_text=(
        "min-combined: 0.4\nmin_metric: 0.3\nmodel: [a, b]\nseverities: [1, 3]\n"
        "weights: {semantic: 0.4, keyword: 0.2, structural: 0.2, length: 0.2}\n"
        "noise_floor: off\nprogress: on\ncache: off\nrequire_model: true\nusers: 10\n"))
    assert (settings.min_combined, settings.min_metric) == (0.4, 0.3)
    assert settings.model == ("a", "b") and settings.severities == (1, 3)
    assert settings.weights == (0.4, 0.2, 0.2, 0.2)
    # YAML 1.1 reads bare off/on as booleans; they still mean "off"/"on".
    assert (settings.noise_floor, settings.progress, settings.cache) == ("off", "on", "off")
    assert settings.require_model is True and settings.users == 10
    assert settings.sources["min_combined"] == "robustexplain.yaml:1 key min-combined"


def test_yaml_unknown_key_names_file_line_key_and_valid_keys(tmp_path: Path) -> None:
    message = config_error(tmp_path, yaml_text="seed: 1\nmin_combind: 0.4\n")
    assert message.startswith("robustexplain.yaml:2: unknown key 'min_combind'; did you mean 'min_combined'? "
                              "Valid: model, backend, host,")
    assert "max_regression" in message and "config" not in message
    message = config_error(tmp_path, yaml_text="zzz: 1\n")
    assert message.startswith("robustexplain.yaml:1: unknown key 'zzz'. Valid: model,")


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    message = config_error(tmp_path, yaml_text="seed: 1\nmodel: [a, b\nusers: 3\n")
    assert re.match(r"robustexplain\.yaml:\d+: YAML syntax error: ", message), message
    line = int(message.split(":")[1])
    assert line in (3, 4)


@pytest.mark.parametrize(("text", "expected"), [
    ("- seed\n", "robustexplain.yaml:1: expected a mapping of settings"),
    ("seed: 1\nseed: 2\n", "robustexplain.yaml:2: key 'seed' repeats line 1"),
    ("min_combined: 1\nmin-combined: 1\n", "robustexplain.yaml:2: key 'min-combined' repeats line 1"),
    ("config: other.yaml\n", "robustexplain.yaml:1: key 'config' cannot be set inside the settings file"),
    ("1: 2\n", "robustexplain.yaml:1: setting names must be text"),
    ("seed: 1\n---\nseed: 2\n", "robustexplain.yaml:"),
])
def test_yaml_structure_errors(tmp_path: Path, text: str, expected: str) -> None:
    assert config_error(tmp_path, yaml_text=text).startswith(expected)


def test_yaml_empty_file_and_explicit_paths(tmp_path: Path) -> None:
    empty = resolve(tmp_path, yaml_text="# nothing yet\n")
    assert empty == dataclasses.replace(Settings.defaults(), config=tmp_path / "robustexplain.yaml")
    (tmp_path / "robustexplain.yaml").unlink()
    other = tmp_path / "other.yaml"
    other.write_text("seed: 9\n")
    settings = resolve(tmp_path, yaml_path=other)
    assert settings.seed == 9 and settings.sources["seed"] == "other.yaml:1 key seed"
    assert settings.sources["config"] == "yaml_path argument"
    assert "file not found" in config_error(tmp_path, yaml_path=tmp_path / "gone.yaml")
    message = config_error(tmp_path, env={"ROBUSTEXPLAIN_CONFIG": "gone.yaml"})
    assert message.startswith("ROBUSTEXPLAIN_CONFIG=gone.yaml: file not found")
    assert load_yaml(other) == {"seed": load_yaml(other)["seed"]}


# --- validation -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "value", "problem"), [
    ("min-combined", "1.5", "must be between 0 and 1"),
    ("min-metric", "-0.1", "must be between 0 and 1"),
    ("max-regression", "2", "must be between 0 and 1"),
    ("alpha", "1", "must be between 1e-06 and 0.5"),
    ("alpha", "1e-20", "must be between 1e-06 and 0.5"),
    ("alpha", "0.6", "must be between 1e-06 and 0.5"),
    ("min-combined", "high", "not a number"),
    ("temperature", "nan", "must be a finite number"),
    ("temperature", "-1", "must be at least 0"),
    ("timeout", "0", "must be greater than 0"),
    ("seed", "abc", "not an integer"),
    ("seed", "-1", "must be an integer ≥ 0"),
    ("retries", "1.5", "not an integer"),
    ("concurrency", "0", "must be a positive integer"),
    ("repeats", "-2", "must be a positive integer"),
    ("users", "0", "must be a positive integer (or 'all')"),
    ("max-users", "0", "must be a positive integer"),
    ("backend", "olama", "must be one of ollama, openai, template, callable; did you mean 'ollama'?"),
    ("decision", "median", "must be one of mean, confident, sequential"),
    ("inconclusive", "skip", "must be one of fail, pass, warn"),
    ("cache", "rw", "must be one of off, read, write, read-write, replay-only"),
    ("noise-floor", "maybe", "must be one of auto, on, off"),
    ("progress", "yes", "must be one of auto, on, off"),
    ("perturbations", "noise,wobble", "unknown perturbation 'wobble'"),
    ("perturbations", "noise,,drift", "empty entry in comma-separated list"),
    ("severities", "0", "severity 0 is outside 1-5"),
    ("severities", "1-6", "severity 6 is outside 1-5"),
    ("severities", "2.5", "severity '2.5' is not an integer or a range like 1-5"),
    ("severities", "5-1", "range '5-1' runs backwards"),
    # Checked before anything is allocated (issue 41): a traceback (OverflowError) and 50 million levels.
    ("severities", "1-99999999999999999999", "severity 6 is outside 1-5"),
    ("severities", "1-50000000", "severity 6 is outside 1-5"),
    ("severities", "0-3", "severity 0 is outside 1-5"),
    # The one check of weights (metrics.check_weights), whichever door they come through.
    ("weights", "0.5,0.5,0.5,0.5", "weights must sum to 1 (within 1e-06), got 2 (semantic=0.5, "),
    ("weights", "-0.5,0.5,0.5,0.5", "weight for 'semantic' must be a finite number ≥ 0, got '-0.5'"),
    ("weights", "0.5,0.5", "expected 4 weights (semantic, keyword, structural, length), got 2"),
    ("weights", "0.5,x,0.25,0.25", "weight for 'keyword' must be a number, got 'x'"),
    ("weights", "semantic=0.5,keyword=0.5", "missing weight(s) for structural, length"),
    ("weights", "0.2,0.2,0.2,0.2,0.2", "gives 'embedding' a share of ρ, but no embedding model is set"),
    ("host", "http://a,http://a", "host 'http://a' is listed twice"),
    # A judge twice would agree with itself: κ perfect by construction (issue 61).
    ("judge-model", "judge:1b, judge:1b", "judge model 'judge:1b' is listed twice; give each judge once"),
    ("weights", "semantc=0.25,keyword=0.25,structural=0.25,length=0.25",
     "unknown metric 'semantc'; did you mean 'semantic'?"),
    ("weights", "semantic=0.5,0.5,0,0", "'0.5': mix of plain and name=value weights"),
    ("host", "ftp://box", "unsupported scheme 'ftp'"),
    ("model", "a,,b", "empty entry in comma-separated list"),
])
def test_cli_validation_messages(tmp_path: Path, name: str, value: str, problem: str) -> None:
    message = config_error(tmp_path, cli={option(name).dest: value})
    assert message.startswith(f"--robustexplain-{name}={value}: {problem}")


def test_validation_messages_name_env_ini_and_yaml_origins(tmp_path: Path) -> None:
    assert config_error(tmp_path, env={"ROBUSTEXPLAIN_MIN_COMBINED": "1.5"}) == (
        "ROBUSTEXPLAIN_MIN_COMBINED=1.5: must be between 0 and 1")
    assert config_error(tmp_path, ini={"robustexplain_severities": "0-3"}) == (
        "ini robustexplain_severities=0-3 in pytest.ini: severity 0 is outside 1-5")
    assert config_error(tmp_path, env={"ROBUSTEXPLAIN_REQUIRE_MODEL": "maybe"}) == (
        "ROBUSTEXPLAIN_REQUIRE_MODEL=maybe: must be true or false (1/0, yes/no, on/off)")
    assert config_error(tmp_path, yaml_text="seed: 1\nmin_combined: 1.5\n") == (
        "robustexplain.yaml:2 key min_combined=1.5: must be between 0 and 1")
    assert config_error(tmp_path, yaml_text="repeats: true\n") == (
        "robustexplain.yaml:1 key repeats=True: not an integer (got bool)")


def test_api_key_env_error_never_repeats_the_value(tmp_path: Path) -> None:
    secret = "sk-proj-abcdef0123456789"
    message = config_error(tmp_path, env={"ROBUSTEXPLAIN_API_KEY_ENV": secret})
    assert message.startswith("ROBUSTEXPLAIN_API_KEY_ENV: must be the NAME of an environment variable")
    assert secret not in message
    assert resolve(tmp_path, cli={"robustexplain_api_key_env": "GROQ_KEY"}).api_key_env == "GROQ_KEY"


@pytest.mark.parametrize(("name", "meant"), [
    ("ROBUSTEXPLAIN_MIN_COMBIND", "ROBUSTEXPLAIN_MIN_COMBINED"),  # a typo would leave the gate at 0.5
    ("ROBUSTEXPLAIN_MODELS", "ROBUSTEXPLAIN_MODEL"),
    ("ROBUSTEXPLAIN_SEVERITY", "ROBUSTEXPLAIN_SEVERITIES"),
    ("ROBUSTEXPLAIN_REQUIRE_MODELS", "ROBUSTEXPLAIN_REQUIRE_MODEL"),
])
def test_a_near_miss_of_a_setting_in_the_environment_is_an_error_with_the_name_meant(
        tmp_path: Path, name: str, meant: str) -> None:
    message = config_error(tmp_path, env={name: "sk-secret-0123"})
    assert message == f"{name}: not a robustexplain setting; did you mean {meant}?"  # never the value


def test_other_variables_under_the_prefix_stay_ignored(tmp_path: Path) -> None:
    env = {"ROBUSTEXPLAIN_REAL_LLM_URL": "http://127.0.0.1:8088",  # a test suite's own variable
           "ROBUSTEXPLAIN_MODELS": "",  # blank: CI exports empty variables for missing secrets
           "ROBUSTEXPLAIN_API_KEY": "sk-0123",  # the variable api-key-env names is the user's to choose
           "ROBUSTEXPLAIN_USERS": "3"}
    settings = resolve(tmp_path, env=env, cli={"robustexplain_api_key_env": "ROBUSTEXPLAIN_API_KEY"})
    assert settings.users == 3 and settings.api_key_env == "ROBUSTEXPLAIN_API_KEY"
    assert "ROBUSTEXPLAIN_API_KEY" in config_error(tmp_path, env=env)  # without the exemption: a near miss


# --- value forms ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "levels"), [
    ("1-5", (1, 2, 3, 4, 5)), ("1,3,5", (1, 3, 5)), ("2-4, 1", (1, 2, 3, 4)), (" 5 ", (5,)),
    ("3-3", (3,)), ("1 - 2,2", (1, 2)),
])
def test_severity_syntax(tmp_path: Path, raw: str, levels: tuple[int, ...]) -> None:
    assert resolve(tmp_path, cli={"robustexplain_severities": raw}).severities == levels


def test_severity_yaml_forms(tmp_path: Path) -> None:
    assert resolve(tmp_path, yaml_text="severities: 4\n").severities == (4,)
    assert resolve(tmp_path, yaml_text="severities: [5, 1]\n").severities == (1, 5)
    assert resolve(tmp_path, yaml_text="severities: '1-2'\n").severities == (1, 2)


@pytest.mark.parametrize(("raw", "weights"), [
    ("0.4,0.2,0.2,0.2", (0.4, 0.2, 0.2, 0.2)),
    ("semantic=0.1, keyword=0.2, structural=0.3, length=0.4", (0.1, 0.2, 0.3, 0.4)),
    ("length=0.4,structural=0.3,keyword=0.2,semantic=0.1", (0.1, 0.2, 0.3, 0.4)),
    ("1,0,0,0", (1.0, 0.0, 0.0, 0.0)),
])
def test_weight_forms(tmp_path: Path, raw: str, weights: tuple[float, ...]) -> None:
    settings = resolve(tmp_path, cli={"robustexplain_weights": raw})
    assert settings.weights == weights
    assert settings.weight_map == dict(zip(METRICS, weights, strict=True))


def test_perturbation_aliases_are_canonicalised_and_deduplicated(tmp_path: Path) -> None:
    settings = resolve(tmp_path, cli={"robustexplain_perturbations": "drift, noise,noise_injection,dilute"})
    assert settings.perturbations == ("category_drift", "noise_injection", "behavior_dilution")
    assert resolve(tmp_path, yaml_text="perturbations: [shuffle, missing]\n").perturbations == (
        "temporal_shuffle", "missing_values")


def test_perturbations_use_the_registry_by_default(tmp_path: Path) -> None:
    from pytest_robustexplain import perturbations  # the real registry, with its aliases
    settings = resolve_settings(cli={"robustexplain_perturbations": "noise,shuffle"}, env={}, ini={},
                                yaml_path=None, rootdir=tmp_path)
    assert settings.perturbations == tuple(perturbations.canonical_kind(k) for k in ("noise", "shuffle"))
    with pytest.raises(ConfigError, match=r"^--robustexplain-perturbations=noise,wobble: "):
        resolve_settings(cli={"robustexplain_perturbations": "noise,wobble"}, env={}, ini={},
                         yaml_path=None, rootdir=tmp_path)


def test_users_all_and_models_deduplicated(tmp_path: Path) -> None:
    assert resolve(tmp_path, cli={"robustexplain_users": "all"}).users is None
    assert resolve(tmp_path, cli={"robustexplain_users": "5"}).users == 5
    assert resolve(tmp_path, cli={"robustexplain_model": "a, b,a"}).model == ("a", "b")


def test_settings_from_pytest_reads_options_and_ini(pytester: pytest.Pytester) -> None:
    (pytester.path / "tox.ini").write_text("[pytest]\nrobustexplain_repeats = 2\n", encoding="utf-8")
    config = pytester.parseconfig("--robustexplain-seed=11")
    settings = settings_from_pytest(config, env={"ROBUSTEXPLAIN_USERS": "3"}, canonical_kind=canon)
    assert (settings.seed, settings.repeats, settings.users) == (11, 2, 3)
    assert settings.sources["repeats"] == "ini robustexplain_repeats in tox.ini"
    assert settings.sources["users"] == "ROBUSTEXPLAIN_USERS"


# --- the marker -------------------------------------------------------------------------------------

NODE = "test_x.py::test_y"


def gate(settings: Settings | None = None, *, args: tuple[Any, ...] = (), **kwargs: Any) -> GateSettings:
    return apply_marker(settings or Settings.defaults(), kwargs, nodeid=NODE, args=args, canonical_kind=canon)


def marker_error(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        gate(**kwargs)
    return str(info.value)


def test_marker_without_keywords_copies_the_settings(tmp_path: Path) -> None:
    settings = resolve(tmp_path, cli={"robustexplain_min_combined": "0.6", "robustexplain_repeats": "2"})
    g = gate(settings)
    assert (g.min_combined, g.min_metric, g.repeats) == (0.6, 0.35, 2)
    assert g.perturbations == DEFAULT_PERTURBATIONS and g.per_kind == {}
    assert g.sources["min_combined"] == "--robustexplain-min-combined"
    assert g.sources["alpha"] == "default"
    assert g.thresholds() == {"combined": 0.6, "semantic": 0.35, "keyword": 0.35, "structural": 0.35,
                              "length": 0.35}


def test_marker_overrides_settings() -> None:
    g = gate(min_combined=0.45, min_metric=None, perturbations=["noise", "drift"], severities="1-3",
             users=10, repeats=2,
             weights=(0.4, 0.2, 0.2, 0.2), decision="sequential", alpha=0.01, inconclusive="warn",
             max_users=50, noise_floor="on")
    assert g.min_combined == 0.45 and g.min_metric == 0.35
    assert g.sources["min_metric"] == "default"
    assert g.perturbations == ("noise_injection", "category_drift")
    assert g.severities == (1, 2, 3)
    assert (g.users, g.repeats, g.max_users) == (10, 2, 50)
    assert g.weights == (0.4, 0.2, 0.2, 0.2)
    assert (g.decision, g.alpha, g.inconclusive, g.noise_floor) == ("sequential", 0.01, "warn", "on")
    assert g.sources["min_combined"] == f"@pytest.mark.robustness on {NODE}"
    assert json.loads(json.dumps(g.to_dict()))["perturbations"] == ["noise_injection", "category_drift"]


def test_marker_per_metric_and_per_kind_thresholds() -> None:
    g = gate(min_metric={"structural": 0.25}, min_combined=0.5,
             per_kind={"drift": {"min_combined": 0.4, "min_metric": {"keyword": 0.3}},
                       "noise_injection": {"min_metric": 0.2}})
    assert g.metric_threshold("structural") == 0.25 and g.metric_threshold("semantic") == 0.35
    assert g.combined_threshold("category_drift") == 0.4
    assert g.metric_threshold("keyword", "category_drift") == 0.3
    assert g.metric_threshold("structural", "category_drift") == 0.25  # inherits the test-level mapping
    assert g.metric_threshold("length", "noise_injection") == 0.2
    assert g.combined_threshold("noise_injection") == 0.5
    assert g.combined_threshold("temporal_shuffle") == 0.5 and g.combined_threshold() == 0.5
    with pytest.raises(KeyError):
        g.metric_threshold("bleu")


def test_marker_unknown_keyword_suggests_and_lists() -> None:
    message = marker_error(min_combind=0.4)
    assert message == (f"{NODE}: unknown keyword 'min_combind' in @pytest.mark.robustness; did you mean "
                       f"'min_combined'? Valid: {', '.join(MARKER_KEYWORDS)}")
    message = marker_error(foo=1)
    assert message.startswith(f"{NODE}: unknown keyword 'foo' in @pytest.mark.robustness. Valid: ")
    message = marker_error(seed=3)
    assert message.startswith(f"{NODE}: 'seed' in @pytest.mark.robustness is a run-wide setting")
    assert "--robustexplain-seed" in message


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"args": (0.5,)}, f"{NODE}: @pytest.mark.robustness takes keywords only, got positional [0.5]"),
    ({"min_combined": 1.5}, f"{NODE}: @pytest.mark.robustness(min_combined=1.5): must be between 0 and 1"),
    ({"severities": [0, 1]}, "@pytest.mark.robustness(severities=[0, 1]): severity 0 is outside 1-5"),
    ({"severities": "6"}, "severity 6 is outside 1-5"),
    ({"perturbations": "wobble"}, f"{NODE}: @pytest.mark.robustness(perturbations='wobble'): unknown "
                                  "perturbation 'wobble'"),
    ({"weights": [0.5, 0.5, 0.5]}, "expected 4 weights"),
    ({"weights": {"semantic": 0.2, "keyword": 0.2, "structural": 0.2, "length": 0.2, "embedding": 0.2}},
     "gives 'embedding' a share of ρ, but no embedding model is set"),
    ({"decision": "vote"}, "must be one of mean, confident, sequential"),
    ({"users": 0}, "must be a positive integer"),
    ({"min_metric": {"structurel": 0.3}}, "unknown metric 'structurel'; did you mean 'structural'?"),
    ({"min_metric": {"keyword": 2}}, "must be between 0 and 1"),
    ({"per_kind": {"wobble": {"min_combined": 0.4}}}, "unknown perturbation 'wobble'"),
    ({"per_kind": {"drift": {"min_combind": 0.4}}}, "unknown key 'min_combind' for 'drift'; did you mean "
                                                     "'min_combined'? Valid: min_combined, min_metric"),
    ({"per_kind": {"drift": 0.4}}, "the value for 'drift' must be a dict"),
    ({"per_kind": [0.4]}, "per_kind=[0.4]): must be a dict kind -> "),
    ({"per_kind": {"drift": {"min_combined": 0.4}}, "perturbations": ["noise"]},
     "per_kind names 'category_drift', which is not among this test's perturbations (noise_injection)"),
])
def test_marker_errors_name_the_test(kwargs: dict[str, Any], expected: str) -> None:
    message = marker_error(**kwargs)
    assert message.startswith(f"{NODE}: ")
    assert expected in message


def test_marker_doc_shows_every_keyword() -> None:
    signature = MARKER_DOC.split(":")[0]
    assert signature.startswith("robustness(") and signature.endswith(")")
    for keyword in MARKER_KEYWORDS:
        assert f"{keyword}=" in signature
    assert set(MARKER_KEYWORDS) - {"per_kind"} <= {spec.field for spec in OPTIONS}


def test_the_marker_keywords_and_the_gate_fields_are_the_option_tables_per_test_settings() -> None:
    from pytest_robustexplain.settings import GateSettings

    per_test = [spec.field for spec in OPTIONS if spec.marker]
    assert list(MARKER_KEYWORDS) == per_test and len(per_test) == 29
    assert set(GateSettings(**dict.fromkeys(per_test)).by_name()) == set(per_test)
    # A setting of the whole run is no keyword: the marker refuses it, naming the test.
    assert not any(spec.marker for spec in OPTIONS if spec.field in ("model", "host", "cache", "json"))


# ------------------------------------------------------------------ thresholds from every source
SEMANTIC_HALF = {"semantic": 0.5, "keyword": 0.35, "structural": 0.35, "length": 0.35}


@pytest.mark.parametrize("source", [
    {"cli": {"robustexplain_min_metric": "semantic=0.5"}},
    {"env": {"ROBUSTEXPLAIN_MIN_METRIC": "semantic = 0.5"}},
    {"ini": {"robustexplain_min_metric": "semantic=0.5"}},
    {"ini": {"robustexplain_min_metric": "{'semantic': 0.5}"}},  # pytest's text of a pyproject inline table
    {"yaml_text": "min_metric:\n  semantic: 0.5\n"},
], ids=["cli", "env", "ini", "pyproject", "yaml"])
def test_per_metric_thresholds_from_every_source(tmp_path: Path, source: dict[str, Any]) -> None:
    settings = resolve(tmp_path, **source)
    assert dict(settings.min_metric) == SEMANTIC_HALF  # type: ignore[arg-type]
    gate = apply_marker(settings, {}, nodeid="t")
    assert gate.metric_threshold("semantic") == 0.5 and gate.metric_threshold("length") == 0.35
    partial = apply_marker(settings, {"min_metric": {"keyword": 0.4}}, nodeid="t")
    assert partial.metric_threshold("semantic") == 0.5 and partial.metric_threshold("keyword") == 0.4


@pytest.mark.parametrize("source", [
    {"cli": {"robustexplain_per_kind": "drift.min_combined=0.6,noise.min_metric.semantic=0.7"}},
    {"env": {"ROBUSTEXPLAIN_PER_KIND": "drift.min_combined=0.6, noise.min_metric.semantic=0.7"}},
    {"ini": {"robustexplain_per_kind": "{'drift': {'min_combined': 0.6}, 'noise': {'min_metric': "
                                       "{'semantic': 0.7}}}"}},
    {"yaml_text": "per_kind:\n  drift:\n    min_combined: 0.6\n"
                  "  noise:\n    min_metric:\n      semantic: 0.7\n"},
], ids=["cli", "env", "pyproject", "yaml"])
def test_per_kind_thresholds_from_every_source(tmp_path: Path, source: dict[str, Any]) -> None:
    settings = resolve(tmp_path, **source)
    gate = apply_marker(settings, {}, nodeid="t")
    assert gate.combined_threshold("category_drift") == 0.6
    assert gate.combined_threshold("noise_injection") == 0.5
    assert gate.metric_threshold("semantic", "noise_injection") == 0.7
    assert gate.metric_threshold("keyword", "noise_injection") == 0.35
    marker = apply_marker(settings, {"per_kind": {"noise": {"min_combined": 0.8}}}, nodeid="t")
    assert marker.combined_threshold("noise_injection") == 0.8  # the marker's kinds replace the run's
    assert marker.combined_threshold("category_drift") == 0.6  # the run's other kinds stay


@pytest.mark.parametrize(("source", "message"), [
    ({"cli": {"robustexplain_min_metric": "semantc=0.5"}},
     "--robustexplain-min-metric=semantc=0.5: unknown metric 'semantc'; did you mean 'semantic'?"),
    ({"env": {"ROBUSTEXPLAIN_MIN_METRIC": "semantic=1.5"}}, "semantic: must be between 0 and 1"),
    ({"yaml_text": "min_metric:\n  lenght: 0.3\n"}, "unknown metric 'lenght'; did you mean 'length'?"),
    ({"cli": {"robustexplain_per_kind": "drif.min_combined=0.5"}},
     "per-kind=drif.min_combined=0.5: unknown perturbation 'drif'"),
    ({"cli": {"robustexplain_per_kind": "drift.min_combo=0.5"}}, "expected KIND.min_combined=X"),
    ({"ini": {"robustexplain_per_kind": "{'drift': {'min_combined': 2}}"}}, "must be between 0 and 1"),
])
def test_bad_thresholds_name_their_source(tmp_path: Path, source: dict[str, Any], message: str) -> None:
    assert message in config_error(tmp_path, **source)


@pytest.mark.parametrize(("cli", "message"), [
    ({"robustexplain_cases": "c.json"}, "--robustexplain-cases=c.json: needs the user histories too"),
    ({"robustexplain_catalog": "c.json"}, "--robustexplain-catalog=c.json: needs the user histories too"),
    ({"robustexplain_dataset": ".", "robustexplain_cases": "c.json"}, "give either a dataset directory"),
], ids=["cases-alone", "catalog-alone", "dataset-and-cases"])
def test_data_that_would_be_ignored_is_a_usage_error(tmp_path: Path, cli: dict[str, str],
                                                     message: str) -> None:
    (tmp_path / "c.json").write_text("[]", encoding="utf-8")
    assert message in config_error(tmp_path, cli=cli)


def test_two_spellings_of_one_model_are_refused(tmp_path: Path) -> None:
    message = config_error(tmp_path, cli={"robustexplain_model": "fake-model,fake-model:latest"})
    assert "'fake-model' and 'fake-model:latest' name the same model; give it once" in message
    assert resolve(tmp_path, cli={"robustexplain_model": "a:7b,a:14b"}).model == ("a:7b", "a:14b")
