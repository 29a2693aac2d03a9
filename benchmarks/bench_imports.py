"""What each import a run may pay costs: every step in a fresh interpreter, after the modules it needs.

Each row imports its prerequisites first, then times the import itself (wall and CPU of this process),
median of ``--runs`` fresh interpreters, so a row is the cost added by that import alone. CPU time is the
steadier figure on a shared machine. Which rows a run pays:

- every run: ``pytest``, the plugin's start-up import (``pytest_robustexplain.plugin``);
- a session with marked tests: ``numpy`` and the plugin's own modules (``scipy.special``, the row below, is
  imported where the gate first needs a bound);
- a run that scores a pair (a cold run, or one whose pairs are not in the score cache): ``nltk`` with the
  ``scipy.stats`` it imports, TextBlob, sacrebleu;
- a report that shows the paper's kind analyses (full terminal report, Markdown, HTML, JSON):
  ``scipy.stats``;
- a run that calls a model (every backend's client is httpx; the Ollama preflight, the official ``ollama``
  client, with pydantic and the default client it builds at import).

For where a single import spends its time: ``python -X importtime -c "import nltk"``. Bytecode matters:
run with ``PYTHONDONTWRITEBYTECODE`` unset (and a warm ``PYTHONPYCACHEPREFIX``, as the first run here
does) to measure what an installed system pays.

    .venv/bin/python benchmarks/bench_imports.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

STEPS: list[tuple[str, list[str], list[str]]] = [  # (row, imported first, timed)
    ("pytest", [], ["pytest"]),
    ("pytest_robustexplain.plugin (start-up, over pytest)", ["pytest"], ["pytest_robustexplain.plugin"]),
    ("numpy", ["pytest", "pytest_robustexplain.plugin"], ["numpy"]),
    ("the plugin's run modules (engine, sweep, stats, reports, explainers)",
     ["pytest", "pytest_robustexplain.plugin", "numpy"],
     ["pytest_robustexplain.engine", "pytest_robustexplain.sweep", "pytest_robustexplain.stats",
      "pytest_robustexplain.report.terminal", "pytest_robustexplain.score_cache",
      "pytest_robustexplain.explainers.ollama", "pytest_robustexplain.explainers.cache",
      "pytest_robustexplain.perturbations"]),
    ("scipy.special", ["numpy"], ["scipy.special"]),
    ("scipy.stats (over scipy.special)", ["numpy", "scipy.special"], ["scipy.stats"]),
    ("nltk (over scipy.stats)", ["numpy", "scipy.stats"], ["nltk"]),
    ("nltk, scipy.stats included (over scipy.special)", ["numpy", "scipy.special"], ["nltk"]),
    ("textblob.en (over nltk)", ["numpy", "nltk"], ["textblob.en"]),
    ("sacrebleu.metrics", ["numpy"], ["sacrebleu.metrics"]),
    ("ollama (httpx, pydantic, its default client)", ["pytest"], ["ollama"]),
    ("httpx alone", ["pytest"], ["httpx"]),
]

CODE = """
import importlib, time
for name in {first!r}:
    importlib.import_module(name)
wall, cpu = time.perf_counter(), time.process_time()
for name in {timed!r}:
    importlib.import_module(name)
print(time.perf_counter() - wall, time.process_time() - cpu)
"""


def measure(first: list[str], timed: list[str], env: dict[str, str]) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", CODE.format(first=first, timed=timed)], capture_output=True,
                         text=True, check=True, env=env).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per row (median reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-imports-") as pycache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = pycache
        for _, first, timed in STEPS:  # one run each to fill the bytecode cache
            measure(first, timed, env)
        print(f"incremental import costs, median of {args.runs} fresh interpreters (bytecode cached):")
        print("| import | wall | CPU |\n|---|---|---|")
        for row, first, timed in STEPS:
            walls, cpus = zip(*(measure(first, timed, env) for _ in range(args.runs)), strict=True)
            wall, cpu = 1000 * statistics.median(walls), 1000 * statistics.median(cpus)
            print(f"| {row} | {wall:.0f} ms | {cpu:.0f} ms |")


if __name__ == "__main__":
    main()
