"""What pytest itself would read from the project's files, for a door that is not pytest.

``robustexplain run`` must resolve the settings ``pytest`` resolves: the same ini file
(``pytest.ini``, ``.pytest.ini``, ``[tool.pytest.ini_options]`` / ``[tool.pytest]`` in pyproject.toml,
``tox.ini``, ``setup.cfg`` — whichever pytest picks), the same rootdir (where ``robustexplain.yaml`` is
looked for) and the options that ``addopts`` / ``$PYTEST_ADDOPTS`` add. Re-implementing pytest's search
would drift from it across pytest versions, so pytest does the reading: :func:`read_pytest_files` starts
``pytest.main`` with a hook that copies what pytest resolved and stops before conftest files are imported,
tests are collected or anything is written (``--noconftest``, no cache plugin).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .layers import check_ini_names, resolve_settings, unknown_ini_keys
from .record import Settings
from .table import OPTIONS, PLUGIN_NAME


@dataclass(frozen=True)
class PytestFiles:
    """What pytest resolved from the project's files, keyed as :func:`resolve_settings` takes them."""

    ini: Mapping[str, Any]  # ini key -> raw value (as ``config.getini`` returns it)
    ini_path: Path | None
    rootdir: Path
    addopts: Mapping[str, Any]  # option dest -> raw value given through addopts / $PYTEST_ADDOPTS
    unknown_ini: tuple[str, ...] = ()  # ini keys pytest does not know (robustexplain_ ones are errors)


def read_pytest_files(invocation_dir: Path) -> PytestFiles:
    """The ini values, ini file, rootdir and addopts options pytest would use when started in
    ``invocation_dir`` with no arguments. Raises ConfigError with pytest's own message when pytest
    cannot read its configuration (a malformed pyproject.toml, an addopts it rejects)."""
    import pytest  # lazy: the command's other subcommands never need it

    class Reader:
        """A plugin whose ``pytest_cmdline_main`` copies the resolved configuration and ends the run."""

        files: PytestFiles | None = None

        # Before any other plugin's pytest_cmdline_main: pytest's own would start a session.
        @pytest.hookimpl(tryfirst=True)
        def pytest_cmdline_main(self, config: pytest.Config) -> int:
            self.files = PytestFiles(
                ini={spec.ini: config.getini(spec.ini) for spec in OPTIONS},
                ini_path=config.inipath, rootdir=Path(config.rootpath),
                addopts={spec.dest: value for spec in OPTIONS
                         if (value := config.getoption(spec.dest, default=None)) is not None},
                unknown_ini=unknown_ini_keys(config))
            return 0

    reader = Reader()
    # ``-p robustexplain`` registers the ini keys even under PYTEST_DISABLE_PLUGIN_AUTOLOAD; pytest's
    # config-time warnings (unknown ini keys of plugins not installed) are pytest's business, not ours.
    args = ["--noconftest", "-p", PLUGIN_NAME, "-p", "no:cacheprovider", "--assert=plain"]
    err = io.StringIO()
    with _in_directory(invocation_dir), warnings.catch_warnings(), contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(err):
        warnings.simplefilter("ignore")
        code = pytest.main(args, plugins=[reader])
    if reader.files is None:
        shown = " ".join(line.strip() for line in err.getvalue().splitlines() if line.strip())
        raise ConfigError(f"pytest could not read the project's configuration (exit {int(code)}): "
                          f"{shown or 'no message'}")
    return reader.files


def settings_from_project(*, cli: Mapping[str, Any], env: Mapping[str, str], invocation_dir: Path,
                          door: str = "run") -> Settings:
    """:func:`resolve_settings` for a door other than pytest, from the layers pytest reads: ``cli`` (the
    door's own options, keyed by dest; None is "not given") over pytest's addopts options, then the
    environment, the ini file pytest picks and the ``robustexplain.yaml`` in pytest's rootdir."""
    files = read_pytest_files(invocation_dir)
    check_ini_names(files.unknown_ini, files.ini_path, files.rootdir)
    given = {dest: value for dest, value in cli.items() if value is not None}
    settings = resolve_settings(cli={**files.addopts, **given}, env=env, ini=files.ini, yaml_path=None,
                                rootdir=files.rootdir, invocation_dir=invocation_dir,
                                ini_path=files.ini_path, door=door)
    sources = dict(settings.sources)
    for spec in OPTIONS:
        if spec.dest in files.addopts and spec.dest not in given:
            sources[spec.field] = sources[spec.field].replace(spec.cli, f"{spec.cli} (pytest addopts)", 1)
    return replace(settings, sources=sources)


@contextlib.contextmanager
def _in_directory(path: Path) -> Iterator[None]:
    # pytest.main finds the ini file from the working directory, as a `pytest` started there would
    # (contextlib.chdir is Python 3.11+).
    before = os.getcwd()
    if Path(before) == path:
        yield
        return
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)
