"""``pytest`` and ``robustexplain run`` resolve the same settings from the same files: every ini file pytest
reads, its addopts, the ``robustexplain.yaml`` in its rootdir and the environment, with the same sources.
A setting only one door has is ignored by the other, and that door says so."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from pytest_robustexplain import cli
from pytest_robustexplain.errors import ConfigError
from pytest_robustexplain.settings import (
    OPTIONS,
    Settings,
    ignored_settings,
    read_pytest_files,
    settings_from_pytest,
)

pytest_plugins = ["pytester"]

README = Path(__file__).resolve().parent.parent / "README.md"
PYTEST_ONLY = frozenset(spec.field for spec in OPTIONS if "run" not in spec.doors)


def _readme_block(language: str) -> str:
    section = README.read_text(encoding="utf-8").split("### Settings to copy", 1)[1]
    return section.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def _ini_lines(toml_block: str) -> str:
    """The README's ``[tool.pytest.ini_options]`` block as the lines of an ini section."""
    lines = toml_block.split("\n", 1)[1].strip().splitlines()
    return "\n".join(line.replace(' = "', " = ", 1).rstrip('"') for line in lines) + "\n"


def _both_doors(pytester: pytest.Pytester, *argv: str) -> tuple[Settings, Settings]:
    """The settings the plugin resolves (from a real pytest config) and those ``robustexplain run`` does."""
    config = pytester.parseconfig(*argv)
    by_pytest = settings_from_pytest(config)
    args: argparse.Namespace = cli.build_parser().parse_args(["run"])
    by_run, _ = cli.resolve_run_settings(args, cwd=pytester.path)
    return by_pytest, by_run


def _shared(settings: Settings) -> dict[str, Any]:
    out = settings.to_dict()
    out["sources"] = {k: v for k, v in out["sources"].items() if k not in PYTEST_ONLY}
    return {k: v for k, v in out.items() if k not in PYTEST_ONLY}


README_FILES = {
    "pyproject.toml": lambda: _readme_block("toml"),
    "pytest.ini": lambda: "[pytest]\n" + _ini_lines(_readme_block("toml")),
    "tox.ini": lambda: "[pytest]\n" + _ini_lines(_readme_block("toml")),
    "setup.cfg": lambda: "[tool:pytest]\n" + _ini_lines(_readme_block("toml")),
}


@pytest.mark.parametrize("name", sorted(README_FILES))
@pytest.mark.parametrize("with_yaml", [False, True], ids=["ini", "ini+yaml"])
def test_every_readme_block_resolves_the_same_through_both_doors(pytester: pytest.Pytester, name: str,
                                                                 with_yaml: bool) -> None:
    pytester.path.joinpath(name).write_text(README_FILES[name](), encoding="utf-8")
    if with_yaml:
        pytester.path.joinpath("robustexplain.yaml").write_text(_readme_block("yaml"), encoding="utf-8")
    by_pytest, by_run = _both_doors(pytester)
    assert _shared(by_run) == _shared(by_pytest)
    # Not vacuous: the file was read (ini > YAML), and the YAML too where there is one.
    assert by_run.model == ("qwen2.5:7b",) and by_run.sources["model"] == f"ini robustexplain_model in {name}"
    assert by_run.perturbations == ("noise_injection", "temporal_shuffle", "category_drift")
    assert by_run.embed_model == ("nomic-embed-text" if with_yaml else None)


def test_the_yaml_block_alone_resolves_the_same_through_both_doors(pytester: pytest.Pytester) -> None:
    pytester.path.joinpath("robustexplain.yaml").write_text(_readme_block("yaml"), encoding="utf-8")
    by_pytest, by_run = _both_doors(pytester)
    assert _shared(by_run) == _shared(by_pytest)
    assert by_run.model == ("qwen2.5:7b", "llama3.1:8b") and by_run.per_kind["category_drift"]


def test_ini_beats_yaml_in_both_doors_as_the_issue_measured(pytester: pytest.Pytester,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # Before: pytest planned 5 users and `robustexplain run` 4 (it read no ini file).
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nrobustexplain_users = "5"\n')
    pytester.path.joinpath("robustexplain.yaml").write_text("users: 4\nseverities: 1\n", encoding="utf-8")
    by_pytest, by_run = _both_doors(pytester)
    assert by_pytest.users == by_run.users == 5 and by_run.severities == (1,)
    assert cli.main(["run", "--backend", "template", "--dry-run"]) == 0
    assert "5 users × 5 kinds × 1 severity × 1 repeat = 25 pairs per model" in capsys.readouterr().out


def test_addopts_and_the_environment_reach_both_doors(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\naddopts = --robustexplain-users=7 --robustexplain-seed=11\n"
                     "robustexplain_users = 3\n")
    monkeypatch.setenv("ROBUSTEXPLAIN_REPEATS", "2")
    monkeypatch.setenv("PYTEST_ADDOPTS", "--robustexplain-max-history=9")
    by_pytest, by_run = _both_doors(pytester)
    assert (by_run.users, by_run.seed, by_run.max_history, by_run.repeats) == (7, 11, 9, 2)
    assert (by_pytest.users, by_pytest.seed, by_pytest.max_history, by_pytest.repeats) == (7, 11, 9, 2)
    assert by_run.sources["users"] == "--robustexplain-users (pytest addopts)"
    assert by_run.sources["repeats"] == "ROBUSTEXPLAIN_REPEATS"
    # The command's own flags win over addopts and are named as the command spells them.
    by_flag, _ = cli.resolve_run_settings(cli.build_parser().parse_args(["run", "--users", "4"]),
                                          cwd=pytester.path)
    assert by_flag.users == 4 and by_flag.sources["users"] == "--users"


def test_a_pytest_only_setting_is_ignored_by_run_and_said(pytester: pytest.Pytester,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytester.path.joinpath("base.json").write_text("{}", encoding="utf-8")
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nrobustexplain_baseline = "base.json"\n'
                               'robustexplain_max_regression = "0.05"\nrobustexplain_users = "5"\n')
    by_pytest, by_run = _both_doors(pytester)
    assert by_pytest.baseline == pytester.path / "base.json" and by_pytest.max_regression == 0.05
    assert by_run.baseline is None and by_run.max_regression == 0.02
    assert ignored_settings(by_run) == {
        "baseline": "ini robustexplain_baseline in pyproject.toml (pytest only)",
        "max_regression": "ini robustexplain_max_regression in pyproject.toml (pytest only)"}
    assert ignored_settings(by_pytest) == {}
    assert cli.main(["run", "--backend", "template", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "note: ignoring ini robustexplain_baseline in pyproject.toml (pytest only)" in err
    assert "save-baseline" not in err  # the command has no such flag to suggest


def test_a_config_pytest_rejects_is_one_error_naming_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml("[tool.pytest.ini_options\nrobustexplain_users = 5\n")
    with pytest.raises(ConfigError, match="pytest could not read the project's configuration"):
        read_pytest_files(pytester.path)


def test_reading_the_files_imports_no_conftest_and_writes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("raise SystemExit('a conftest must not be imported by robustexplain run')\n")
    pytester.makeini("[pytest]\nrobustexplain_users = 6\n")
    before = sorted(p.name for p in pytester.path.iterdir())
    files = read_pytest_files(pytester.path)
    assert files.ini["robustexplain_users"] == "6" and files.ini_path == pytester.path / "tox.ini"
    assert files.rootdir == pytester.path
    assert sorted(p.name for p in pytester.path.iterdir()) == before  # no .pytest_cache, nothing


def test_the_command_offers_exactly_the_settings_that_are_not_pytest_only() -> None:
    # dry-run is the command's own --dry-run flag (and ROBUSTEXPLAIN_DRY_RUN), not a mirrored option.
    assert cli.RUN_OPTIONS | {"dry-run"} == {spec.name for spec in OPTIONS if "run" in spec.doors}


@pytest.mark.parametrize("flags", [("--json", "r.out", "--html", "r.out"),
                                   ("--json", "r.out", "--markdown", "./r.out"),
                                   ("--markdown", "r.md", "--junitxml", "r.md")])
def test_two_reports_on_one_path_are_refused_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str],
                                                            flags: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--backend", "template", *flags]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "two reports would be written to the same file" in err and "--robustexplain-" not in err
    assert not (tmp_path / flags[1]).exists()  # refused before anything ran or was written


def test_two_reports_on_one_path_are_a_usage_error_under_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.robustness\ndef test_gate(robustness):\n    pass\n")
    result = pytester.runpytest("--robustexplain-backend=template", "--robustexplain-json=r.out",
                                "--robustexplain-markdown=r.out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--robustexplain-json=r.out and --robustexplain-markdown=r.out: two reports" in result.stderr.str()
    # The JSON report and the saved baseline are one document: they may share a path.
    shared = settings_from_pytest(pytester.parseconfig("--robustexplain-json=r.json",
                                                       "--robustexplain-save-baseline=r.json"))
    assert shared.json == shared.save_baseline == pytester.path / "r.json"
