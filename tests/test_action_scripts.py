"""The reusable Action's scripts, run offline (issue 27): the Ollama asset for each release layout and
machine, a download checked against the release's checksums, the names and cache keys one step computes for
the others, the gate's command line (quoted extra arguments kept whole, nothing globbed), and the
pull-request comment found by its author as well as its marker, under node against a fake GitHub API."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "action"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="the Action's scripts are bash")


def _bash(script: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
          ) -> subprocess.CompletedProcess[str]:
    assert BASH is not None
    return subprocess.run([BASH, str(SCRIPTS / script), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, check=False, timeout=60)


@pytest.mark.parametrize(("version", "machine", "asset"), [
    ("0.12.6", "x86_64", "ollama-linux-amd64.tgz"),
    ("0.13.5", "aarch64", "ollama-linux-arm64.tgz"),
    ("0.14.0", "x86_64", "ollama-linux-amd64.tar.zst"),  # .tar.zst since 0.14.0 (ollama/ollama#13651)
    ("v0.14.1", "arm64", "ollama-linux-arm64.tar.zst"),
    ("0.22.1", "aarch64", "ollama-linux-arm64.tar.zst"),
])
def test_the_asset_fits_the_release_layout_and_the_machine(version: str, machine: str, asset: str) -> None:
    done = _bash("ollama.sh", "asset", version, machine)
    assert done.returncode == 0 and done.stdout.strip() == asset


def test_a_machine_without_a_release_is_said() -> None:
    done = _bash("ollama.sh", "asset", "0.22.1", "riscv64")
    assert done.returncode == 1 and "no Ollama release for machine 'riscv64'" in done.stderr


def test_the_default_version_is_a_current_layout() -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    default = action["inputs"]["ollama-version"]["default"]
    assert _bash("ollama.sh", "asset", default, "x86_64").stdout.strip().endswith(".tar.zst")


@pytest.fixture
def release(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A local release server: ``v0.22.1/`` with the amd64 asset (a ``bin/ollama`` script, zstd-packed) and
    its ``sha256sum.txt`` in the release's own format (``<sha256>  ./<asset>``)."""
    if shutil.which("zstd") is None:
        pytest.skip("zstd is not installed (the .tar.zst layout needs it)")
    root = tmp_path / "releases" / "v0.22.1"
    root.mkdir(parents=True)
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        body = b"#!/bin/sh\necho fake ollama \"$@\"\n"
        info = tarfile.TarInfo("bin/ollama")
        info.size, info.mode = len(body), 0o755
        tar.addfile(info, io.BytesIO(body))
    asset = root / "ollama-linux-amd64.tar.zst"
    subprocess.run(["zstd", "-q", "-o", str(asset)], input=packed.getvalue(), check=True)
    digest = hashlib.sha256(asset.read_bytes()).hexdigest()
    (root / "sha256sum.txt").write_text(f"{'0' * 64}  ./ollama-linux-arm64.tar.zst\n"
                                        f"{digest}  ./ollama-linux-amd64.tar.zst\n", encoding="utf-8")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = lambda *a, **k: Quiet(*a, directory=str(tmp_path / "releases"), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "amd64"), reason="the fake release is amd64")
def test_the_download_is_checked_against_the_releases_checksums(release: tuple[str, Path],
                                                                tmp_path: Path) -> None:
    base, root = release
    env = {"HOME": str(tmp_path / "home"), "OLLAMA_VERSION": "0.22.1", "OLLAMA_RELEASE_BASE": base}
    done = _bash("ollama.sh", "install", env=env)
    assert done.returncode == 0, done.stderr
    assert "checksum verified" in done.stdout
    binary = _bash("ollama.sh", "bin", env=env).stdout.strip()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    assert version == "fake ollama --version\n"
    assert "already in" in _bash("ollama.sh", "install", env=env).stdout  # from the cache: no download

    # A tampered asset (or a truncated download) is refused, and nothing is unpacked.
    asset = root / "ollama-linux-amd64.tar.zst"
    asset.write_bytes(asset.read_bytes() + b"x")
    env["HOME"] = str(tmp_path / "other-home")
    done = _bash("ollama.sh", "install", env=env)
    assert done.returncode == 1 and "does not match the release's sha256sum.txt" in done.stderr
    assert not Path(_bash("ollama.sh", "bin", env=env).stdout.strip()).exists()


def _plan(**env: str) -> dict[str, str]:
    done = _bash("plan.sh", env={"OLLAMA_VERSION": "0.22.1", "RUN_ATTEMPT": "1", "JOB": "gate", **env})
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def test_names_and_keys_are_unique_per_model_and_tests_and_end_with_a_separator() -> None:
    a = _plan(MODEL="qwen2.5", TESTS="tests/robust", RUNNER_ARCH="X64")
    b = _plan(MODEL="qwen2.5-instruct", TESTS="tests/robust", RUNNER_ARCH="X64")
    c = _plan(MODEL="qwen2.5", TESTS="tests/other", RUNNER_ARCH="ARM64")
    for key in ("baseline-prefix", "responses-prefix"):
        assert a[key].endswith("|") and not b[key].startswith(a[key]) and a[key] != c[key]
    assert len({a["artifact"], b["artifact"], c["artifact"]}) == 3  # matrix legs upload side by side
    assert re.fullmatch(r"[A-Za-z0-9._-]+", a["artifact"])  # upload-artifact refuses / : * and more
    assert (a["arch"], c["arch"]) == ("amd64", "arm64") and "arm64" in c["ollama-key"]


def test_an_input_cannot_add_an_output_line_or_a_comma_to_a_key() -> None:
    planned = _plan(MODEL="m,n\nartifact=evil", TESTS="t", RUNNER_ARCH="X64")
    assert planned["artifact"] == "robustness-gate-m_n_artifact_evil-t-1"
    assert "," not in planned["baseline-prefix"] and len(planned) == 5


def _gate(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {"MODEL": "m", "TESTS": "tests", "GUARD": "fail", "BASELINE": "true", "MAX_REGRESSION": "0.02",
            "EVENT": "pull_request", "REF_NAME": "feature", "DEFAULT_BRANCH": "main", "GATE_DRY_RUN": "1",
            "MIN_COMBINED": "", "MIN_METRIC": "", "HOST": "", "EXTRA_ARGS": ""}
    return _bash("gate.sh", env={**base, **env}, cwd=tmp_path)


def test_extra_arguments_are_split_as_a_shell_splits_them_and_never_globbed(tmp_path: Path) -> None:
    (tmp_path / "a_file_a_glob_would_find.py").write_text("", encoding="utf-8")
    done = _gate(tmp_path, EXTRA_ARGS="--robustexplain-users=10 -k 'not slow and fast' *",
                 HOST="http://gpu-box:11434")
    words = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert words[-3:] == ["-k", "not slow and fast", "*"]
    assert "--robustexplain-host=http://gpu-box:11434" in words
    assert not any(w.startswith("--robustexplain-baseline=") for w in words)  # no baseline restored here
    (tmp_path / "robustexplain-baseline").mkdir()
    (tmp_path / "robustexplain-baseline" / "robustness.json").write_text("{}", encoding="utf-8")
    assert "--robustexplain-baseline=robustexplain-baseline/robustness.json" in _gate(tmp_path).stdout
    saved = _gate(tmp_path, EVENT="push", REF_NAME="main").stdout
    assert "--robustexplain-save-baseline=robustexplain-baseline/robustness.json" in saved


def test_a_shard_is_measured_and_kept_under_its_own_names_and_never_saves_a_baseline(tmp_path: Path) -> None:
    whole, one, two = _plan(MODEL="m", TESTS="t"), _plan(MODEL="m", TESTS="t", SHARD="1/4"), _plan(
        MODEL="m", TESTS="t", SHARD="2/4")
    assert one["responses-prefix"].startswith(whole["responses-prefix"])
    assert one["responses-prefix"].endswith("|")
    assert len({whole["responses-prefix"], one["responses-prefix"], two["responses-prefix"]}) == 3
    assert len({whole["artifact"], one["artifact"], two["artifact"]}) == 3  # the matrix legs' uploads
    assert re.fullmatch(r"[A-Za-z0-9._-]+", one["artifact"])
    words = _gate(tmp_path, SHARD="2/4", EVENT="push", REF_NAME="main").stdout.splitlines()
    assert "--robustexplain-shard=2/4" in words
    assert not any(w.startswith("--robustexplain-save-baseline") for w in words)


def test_the_sharded_workflow_runs_end_to_end_and_its_rerun_makes_no_model_call(tmp_path: Path) -> None:
    """The example workflow's jobs as processes: four shard jobs through the Action's gate script, each in a
    directory of its own whose response cache stays between the runs (actions/cache), then the merge."""
    from pytest_robustexplain.cli.entry import main
    from pytest_robustexplain.testing import FakeOllamaServer

    test = "import pytest\n\n@pytest.mark.robustness(users=8, perturbations=['noise'], severities=[1, 3])\n" \
           "def test_gate(robustness):\n    pass\n"
    env = {"MODEL": "fake-model", "TESTS": "test_gate.py", "GUARD": "fail", "BASELINE": "true",
           "MAX_REGRESSION": "0.02", "EVENT": "pull_request", "REF_NAME": "feature", "DEFAULT_BRANCH": "main",
           "MIN_COMBINED": "", "MIN_METRIC": "", "EXTRA_ARGS": "-p no:cacheprovider",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with FakeOllamaServer() as server:
        for attempt in (1, 2):
            reports = []
            for index in range(1, 5):
                job = tmp_path / f"shard{index}"
                job.mkdir(exist_ok=True)
                (job / "test_gate.py").write_text(test, encoding="utf-8")
                done = _bash("gate.sh", env={**env, "HOST": server.url, "SHARD": f"{index}/4"}, cwd=job)
                assert done.returncode == 0, done.stdout + done.stderr
                report = json.loads((job / "robustness.json").read_text(encoding="utf-8"))
                assert (report["calls"]["made"] > 0) == (attempt == 1), report["calls"]
                reports.append(str(job / "robustness.json"))
            assert main(["merge", *reports, "--json", str(tmp_path / "merged.json")]) == 0
            merged = json.loads((tmp_path / "merged.json").read_text(encoding="utf-8"))
            assert {g["verdict"]["outcome"] for g in merged["gates"]} == {"PASS"}
            assert merged["calls"]["made"] == (0 if attempt == 2 else sum(
                json.loads(Path(r).read_text(encoding="utf-8"))["calls"]["made"] for r in reports))


def test_an_unclosed_quote_in_the_extra_arguments_stops_the_step_saying_so(tmp_path: Path) -> None:
    done = _gate(tmp_path, EXTRA_ARGS="-k 'unclosed")
    assert done.returncode != 0 and "cannot split" in done.stderr and "No closing quotation" in done.stderr


# ------------------------------------------------------------------------------------- the comment
COMMENT_DRIVER = r"""
const post = require(process.argv[2]);
const scenario = JSON.parse(process.argv[3]);
const calls = [];
const denied = () => {
  const e = new Error("Resource not accessible by integration");
  e.status = 403;
  throw e;
};
const me = async () => (scenario.login ? { data: { login: scenario.login } } : denied());
const create = async (a) => {
  if (scenario.readOnly) { denied(); }
  calls.push(["create", a.issue_number]);
  return { data: { id: 99 } };
};
const github = {
  paginate: async (fn, args) => { calls.push(["list", args.issue_number]); return scenario.comments; },
  rest: {
    users: { getAuthenticated: me },
    issues: {
      listComments: "listComments",
      updateComment: async (a) => { calls.push(["update", a.comment_id]); return {}; },
      createComment: create,
    },
  },
};
const warnings = [];
const core = { warning: (m) => warnings.push(m) };
const context = { repo: { owner: "o", repo: "r" }, issue: { number: 7 } };
post({ github, context, core, body: scenario.body }).then((result) => {
  process.stdout.write(JSON.stringify({ result, calls, warnings }));
}, (error) => { process.stdout.write(JSON.stringify({ error: error.message })); });
"""

MARKER = "<!-- robustexplain:pr-comment -->"


def _post(tmp_path: Path, **scenario: Any) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (actions/github-script runs the comment under node)")
    driver = tmp_path / "driver.js"
    driver.write_text(COMMENT_DRIVER, encoding="utf-8")
    scenario.setdefault("body", f"{MARKER}\nbody")
    done = subprocess.run([node, str(driver), str(SCRIPTS / "comment.js"), json.dumps(scenario)],
                          capture_output=True, text=True, check=True, timeout=60)
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _comment(cid: int, login: str, body: str = f"{MARKER}\nold") -> dict[str, Any]:
    return {"id": cid, "user": {"login": login}, "body": body}


def test_the_comment_updated_is_the_one_this_token_wrote(tmp_path: Path) -> None:
    comments = [_comment(1, "mallory"), _comment(2, "github-actions[bot]", "unrelated"),
                _comment(3, "github-actions[bot]")]
    out = _post(tmp_path, comments=comments)
    assert out["result"] == {"action": "updated", "id": 3} and ["update", 3] in out["calls"]
    out = _post(tmp_path, comments=comments, login="release-bot")  # a personal token: its own user
    assert out["result"]["action"] == "created" and not any(c[0] == "update" for c in out["calls"])
    out = _post(tmp_path, comments=[_comment(1, "mallory")])  # another user's marker: never edited
    assert out["result"] == {"action": "created", "id": 99}


def test_a_token_that_may_not_comment_is_a_warning_not_a_red_job(tmp_path: Path) -> None:
    out = _post(tmp_path, comments=[], readOnly=True)
    assert out["result"]["action"] == "skipped"
    assert len(out["warnings"]) == 1 and "was not posted (403" in out["warnings"][0]


def test_a_body_without_the_marker_is_refused(tmp_path: Path) -> None:
    assert "does not start with the marker" in _post(tmp_path, comments=[], body="no marker")["error"]


# ------------------------------------------------------------------------------------- the Action
def _action() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    return doc


def _step(name: str) -> dict[str, Any]:
    [step] = [s for s in _action()["runs"]["steps"] if s.get("name", "").startswith(name)]
    return step


def test_every_action_used_is_pinned_by_commit() -> None:
    paths = [REPO / "action.yml", *sorted((REPO / ".github" / "workflows").glob("*.yml"))]
    for path in paths:
        for uses in re.findall(r"^\s*(?:- )?uses:\s*(\S+)", path.read_text(encoding="utf-8"), re.M):
            assert uses == "./" or re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", uses), f"{path}: {uses}"


def test_inputs_reach_the_shell_only_through_the_environment() -> None:
    for step in _action()["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step["name"]


def test_the_model_cache_is_saved_only_after_a_complete_pull_and_ollama_skipped_for_another_host() -> None:
    save = _step("Save Ollama and the model")["if"]
    assert "steps.pull.outcome == 'success'" in save and "inputs.host == ''" in save
    for name in ("Restore Ollama", "Install and start Ollama", "Pull "):
        assert _step(name)["if"] == "inputs.host == ''"


def test_a_forks_pull_request_gets_no_comment_and_the_summary_says_why() -> None:
    same_repo = "github.event.pull_request.head.repo.full_name == github.repository"
    assert same_repo in _step("Render the pull-request comment")["if"]
    assert same_repo in _step("Create or update the pull-request comment")["if"]
    fork = _step("Say why a fork's pull request gets no comment")
    assert same_repo.replace("==", "!=") in fork["if"] and "GITHUB_STEP_SUMMARY" in fork["run"]
