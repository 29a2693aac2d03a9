"""docs/architecture.md's worked example holds: a built-in check with a setting of its own is its module and
one registration line (and its test) — nothing else. The test builds a copy of the package with the two
blocks the document shows, and runs pytest and ``robustexplain run`` on it in a child process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_robustexplain

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
SECTION = "### Adding a check: a worked example"

GATES = """
import pytest

@pytest.fixture
def explainer():
    return lambda history, item: "A good pick for you."

ROBUST = dict(perturbations=["noise_injection"], severities=[1], guard="off", min_metric=0.0,
              min_combined=0.0)

@pytest.mark.robustness(**ROBUST)
def test_default(robustness):
    pass

@pytest.mark.robustness(**ROBUST, min_words=3)
def test_three_words(robustness):
    pass
"""


def _blocks() -> dict[str, str]:
    """The section's Python blocks, by the path their first line names."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return {block.split("\n", 1)[0].removeprefix("# ").split(" ")[0]: block for block in blocks
            if block.startswith("# ")}


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package with the worked example's module and registration line, and nothing else."""
    root = tmp_path_factory.mktemp("worked")
    source = Path(pytest_robustexplain.__file__).resolve().parent
    shutil.copytree(source, root / "pytest_robustexplain", ignore=shutil.ignore_patterns("__pycache__"))
    blocks = _blocks()
    module = blocks["pytest_robustexplain/checks/too_short.py"]
    (root / "pytest_robustexplain/checks/too_short.py").write_text(module, encoding="utf-8")
    line = blocks["pytest_robustexplain/checks/registry.py"].splitlines()[1]
    assert line.startswith("BUILTIN = (Stability(), ...") and line.endswith(", TooShort())")
    registry = root / "pytest_robustexplain/checks/registry.py"
    text = registry.read_text(encoding="utf-8")
    listed = re.search(r"BUILTIN: tuple\[Check, \.\.\.\] = \((.*?)\)\n", text, flags=re.S)
    assert listed is not None
    text = text[:listed.end(1)] + ", TooShort()" + text[listed.end(1):]
    stability = "from .stability import Stability\n"
    text = text.replace(stability, stability + "from .too_short import TooShort\n")
    registry.write_text(text, encoding="utf-8")
    return root


def _run(package: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None,
         module: str = "pytest") -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ROBUSTEXPLAIN_", "PYTEST_"))}
    environ.update(env or {}, PYTHONPATH=str(package), PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300)


def _outcomes(package: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    (tmp_path / "test_gates.py").write_text(GATES, encoding="utf-8")
    done = _run(package, tmp_path, "-p", "no:cacheprovider", "--robustexplain-backend=callable",
                "--robustexplain-users=6", "--robustexplain-cache=off", "--robustexplain-json=r.json", *args,
                env=env)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    (tmp_path / "out.txt").write_text(done.stdout, encoding="utf-8")  # the terminal report, for a test
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    return {g["nodeid"].split("::")[1].split("[")[0]: g["verdict"]["findings"]["too_short"]["outcome"]
            for g in report["gates"]}


def test_the_copy_differs_from_the_package_by_the_module_and_the_registration_line(package: Path) -> None:
    source = Path(pytest_robustexplain.__file__).resolve().parent
    copy = package / "pytest_robustexplain"
    originals = {p: source / p.relative_to(copy) for p in copy.rglob("*.py")}
    changed = sorted(str(p.relative_to(package)) for p, was in originals.items()
                     if not was.is_file() or was.read_bytes() != p.read_bytes())
    assert changed == ["pytest_robustexplain/checks/registry.py", "pytest_robustexplain/checks/too_short.py"]


def test_the_checks_own_setting_is_a_marker_keyword_with_its_default(package: Path, tmp_path: Path) -> None:
    assert _outcomes(package, tmp_path, "--robustexplain-html=r.html", "--robustexplain-markdown=r.md",
                     "--junitxml=j.xml") == {"test_default": "FAIL", "test_three_words": "PASS"}
    # The new check is in every writer with no line of theirs: its row, and the failed item's headline.
    terminal = (tmp_path / "out.txt").read_text(encoding="utf-8")
    assert "Check too_short FAIL: 6 of 6 explanations are shorter than min_words" in terminal
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    markdown = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "too_short" in html and "too\\_short" in markdown
    assert "6 of 6 explanations are shorter than min_words" in html + markdown
    junit = (tmp_path / "j.xml").read_text(encoding="utf-8")
    assert 'name="robustexplain_check_too_short" value="FAIL"' in junit
    assert 'name="robustexplain_check_too_short" value="PASS"' in junit
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    failed = next(g for g in report["gates"] if "test_default" in g["nodeid"])
    assert failed["verdict"]["message"].startswith("Check too_short FAIL: 6 of 6 explanations")
    comment = _run(package, tmp_path, "report", "r.json", "--format", "pr-comment",
                   module="pytest_robustexplain").stdout
    assert "Check too\\_short FAIL: 6 of 6 explanations are shorter than min\\_words" in comment


@pytest.mark.parametrize("given", ["flag", "flag-xdist", "env", "yaml"])
def test_the_checks_own_setting_comes_from_every_layer(package: Path, tmp_path: Path, given: str) -> None:
    args, env = (["--robustexplain-min-words=3"], None) if given.startswith("flag") else ([], None)
    if given == "flag-xdist":  # each worker resolves it the same way
        args += ["-n", "2"]
    if given == "env":
        env = {"ROBUSTEXPLAIN_MIN_WORDS": "3"}
    if given == "yaml":
        (tmp_path / "robustexplain.yaml").write_text("min_words: 3\n", encoding="utf-8")
    passed = {"test_default": "PASS", "test_three_words": "PASS"}
    assert _outcomes(package, tmp_path, *args, env=env) == passed
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    origin = {"flag": "--robustexplain-min-words", "flag-xdist": "--robustexplain-min-words",
              "env": "ROBUSTEXPLAIN_MIN_WORDS", "yaml": "robustexplain.yaml"}
    assert origin[given] in report["settings"]["sources"]["min_words"]


def test_a_bad_value_or_a_typo_names_its_origin_and_the_setting_meant(package: Path, tmp_path: Path) -> None:
    (tmp_path / "test_gates.py").write_text(GATES.replace("min_words=3", "min_wrds=3"), encoding="utf-8")
    done = _run(package, tmp_path, "-p", "no:cacheprovider", "--robustexplain-backend=callable")
    assert "unknown keyword 'min_wrds' in @pytest.mark.robustness; did you mean 'min_words'?" in done.stdout
    done = _run(package, tmp_path, "-p", "no:cacheprovider", "--robustexplain-backend=callable",
                env={"ROBUSTEXPLAIN_MIN_WORDS": "x"})
    assert "ROBUSTEXPLAIN_MIN_WORDS=x: not an integer" in done.stdout + done.stderr


def test_both_doors_offer_the_setting(package: Path, tmp_path: Path) -> None:
    assert "--robustexplain-min-words=N" in _run(package, tmp_path, "--help").stdout
    command = _run(package, tmp_path, "run", "--help", module="pytest_robustexplain").stdout
    assert "other checks:" in command and "--min-words N" in command
