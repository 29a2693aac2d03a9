"""The README's "Your first gate", run as written (issue 43, item 1): its commands against the fake server in
each mode of its table, with the outcome and the overall ρ the table prints, then your own explainer on a
MovieLens-style directory. CI runs the README's two Quick start commands; this holds the walk-through."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gaming import write_movielens

from pytest_robustexplain.testing import FakeOllamaServer

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
# What each "the gate" cell of the table says, and the words of the output that show it.
REASONS = {
    "ρ below 0.5": "is below its threshold 0.5",
    "INSENSITIVE": "robustness gate INSENSITIVE for overall",
    "copies its prompt back": "copy their prompt back",
}


def _modes() -> list[tuple[str, str, str]]:
    """(mode, overall ρ, the gate) of each row of the README's table of fake-server modes."""
    table = README.split("<!-- walkthrough-modes -->", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([a-z-]+)` \| [^|]+ \| ([0-9.]+) \| ([^|]+) \|$", table, flags=re.MULTILINE)
    assert len(rows) == 5, table
    return [(mode, rho, gate.strip()) for mode, rho, gate in rows]


def _command(prefix: str) -> list[str]:
    """The README's command that starts with ``prefix`` (a line of a code block), as pytest's arguments."""
    [line] = [line for line in README.splitlines() if line.startswith(prefix)]
    words = shlex.split(line.split("  #", 1)[0])
    assert words[0] == ".venv/bin/pytest", line
    return words[1:]


def _run(tmp_path: Path, args: list[str], host: str) -> str:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ROBUSTEXPLAIN_", "GITHUB_")) and k != "OLLAMA_HOST"}
    env.update(OLLAMA_HOST=host, COLUMNS="200")
    done = subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    return done.stdout + done.stderr


def test_the_table_has_every_mode_of_the_fake_server() -> None:
    from pytest_robustexplain.testing.replies import MODES

    assert {mode for mode, _, _ in _modes()} <= set(MODES)
    assert all(gate == "6 passed" or gate.split(": ", 1)[1] in REASONS for _, _, gate in _modes())


@pytest.mark.parametrize(("mode", "rho", "gate"), _modes(), ids=[m for m, _, _ in _modes()])
def test_each_mode_of_the_walkthrough_says_what_the_readme_says(tmp_path: Path, mode: str, rho: str,
                                                                 gate: str) -> None:
    with FakeOllamaServer(mode=mode) as fake:
        out = _run(tmp_path, _command(".venv/bin/pytest examples/test_explanations.py"), fake.url)
        assert fake.chat_calls == 541  # the warm-up, then the README's 540 calls
    counted, _, reason = gate.partition(": ")
    assert "model calls: 540 made" in out, out[-3000:]  # 20 users, 27 calls each
    assert re.search(rf"=+ {counted} in ", out), out[-3000:]
    assert re.search(rf"^Overall robustness ρ +{re.escape(rho)} ", out, flags=re.MULTILINE), out[-3000:]
    if reason:
        assert REASONS[reason] in out, out[-3000:]
    if mode == "borderline":  # the failed item's message that "5. Reading the result" shows, word for word
        shown = README.split("### 5. Reading the result", 1)[1].split("```\n", 2)[1].splitlines()
        assert shown and all(any(line.startswith(s) for line in out.splitlines()) for s in shown), shown


def test_your_own_explainer_on_movielens_as_the_readme_runs_it(tmp_path: Path) -> None:
    """Step 3: the custom agent on a MovieLens-format directory (made up here: ml-latest-small's layout,
    never its data) — no model, no server; the report file it names is written."""
    args = _command(".venv/bin/pytest examples/custom_agent --robustexplain-dataset=")
    dataset = next(a.split("=", 1)[1] for a in args if a.startswith("--robustexplain-dataset="))
    write_movielens(tmp_path / dataset)
    out = _run(tmp_path, args, "http://127.0.0.1:9")  # a closed port: nothing may be asked of a server
    assert re.search(r"=+ 6 passed in ", out), out[-3000:]
    assert "model recommendation_agent" in out or "recommendation_agent" in out
    html = next(a.split("=", 1)[1] for a in args if a.startswith("--robustexplain-html="))
    assert (tmp_path / html).stat().st_size > 10_000


def test_every_report_format_the_readme_names_is_one_the_command_writes(tmp_path: Path) -> None:
    """Issue 62: the README named `--format … junit|tables`, which the command refused."""
    from pytest_robustexplain.cli import main

    said = re.search(r"robustexplain report\s+run\.json --format ([a-z|-]+)`, `--tables (\w+)`", README)
    assert said is not None, "the README's report command moved: keep this test on it"
    sample = ROOT / "tests" / "data_samples" / "report_sample.json"
    for fmt in said.group(1).split("|"):
        assert main(["report", str(sample), "--format", fmt, "-o", str(tmp_path / f"r.{fmt}")]) == 0, fmt
    assert main(["report", str(sample), "--tables", said.group(2), "-o", str(tmp_path / "t.txt")]) == 0


def test_the_examples_readme_lists_every_example() -> None:
    """Issue 62: it left out ``custom_metric/`` and ``guide_ci/``."""
    listed = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    examples = [p.name + ("/" if p.is_dir() else "") for p in (ROOT / "examples").iterdir()
                if p.name != "README.md" and not p.name.startswith((".", "__"))]
    assert examples and all(f"`{name}`" in listed for name in examples), examples


def test_the_first_days_history_and_trend_as_the_readme_says(tmp_path: Path) -> None:
    """Issue 62: the README's first gate run three times as a newcomer reruns it, then the history command it
    names — compact, the test, model and dataset named, the "too few runs" note once, JSON on request — and
    the HTML report of the last run, which draws the item's trend with its words."""
    from pytest_robustexplain.cli import main

    assert "`robustexplain history` prints each test item's last runs" in README
    args = [*_command(".venv/bin/pytest examples/test_explanations.py"), "--robustexplain-html=r.html"]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ROBUSTEXPLAIN_", "GITHUB_")) and k != "OLLAMA_HOST"}
    with FakeOllamaServer() as fake:
        env.update(OLLAMA_HOST=fake.url, COLUMNS="200")
        for _ in range(3):
            done = subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"],
                                  cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout[-3000:]
    history = tmp_path / ".robustexplain-cache" / "history.jsonl"
    out = tmp_path / "history.txt"
    assert main(["history", "--file", str(history), "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("3 runs in ") and text.count("too few to test for a change") == 1
    assert re.search(r"^test examples/test_explanations\.py::test_explanations_are_robust · model fake-model"
                     r" · dataset \S+ · signature [0-9a-f]{8}$", text, flags=re.MULTILINE), text
    lines = [line for line in text.splitlines() if line.startswith("  [")]
    assert len(lines) == 6 and all("runs 1–3 PASS×3, last PASS · ρ 0." in line for line in lines), text
    assert main(["history", "--file", str(history), "--format", "json", "-o", str(out)]) == 0
    assert {len(item["outcomes"]) for item in json.loads(out.read_text())["items"]} == {3}
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert page.count('<figure class="trend">') == 6 and "ρ, runs 1–3: " in page
