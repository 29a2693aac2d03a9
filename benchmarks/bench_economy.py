"""Model calls saved by the response cache and by sequential stopping, counted at the fake server.

Every number is ``FakeOllamaServer.chat_calls`` (requests that reached the model, warm-up included)
for one whole ``pytest`` run (subprocess) of a generated project with one marked test on the paper
protocol (20 users × 5 kinds × 5 severities), the fake model in stable mode:

1. cold run, empty response cache (``decision="mean"``, the fixed protocol): every call is made;
2. warm rerun on the same cache: must make 0 calls (and still give the same verdicts);
3. sequential mode (``decision="sequential"``) on the same clear case (thresholds 0.5/0.35; the stable
   fake scores ρ ≈ 0.93), cold cache: the anytime-valid gate stops adding users once every slice has
   decided and the queued calls are cancelled. Printed as a share of the fixed protocol's calls, with
   the users each slice used. (An early target of ≤ 35 % of the calls is out of reach by construction,
   see docs/performance.md; the target is on users: ≤ 1.25× the fewest any valid bet could use, which
   ``bench_calibration.py`` measures.)

The fake server answers with ``--latency`` seconds per call and ``--capacity`` slots (a model server
is never instant; with zero latency the cancellation would race the whole queue).

    .venv/bin/python benchmarks/bench_economy.py [--latency 0.02] [--capacity 4]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench_overhead import PAPER_MARKER, PytestRun, check, pytest_command, run_pytest, write_project

from pytest_robustexplain.testing import FakeOllamaServer


def outcomes(report: Path) -> dict[str, str]:
    """slice → verdict (and users used by a sequential gate) from a JSON report."""
    doc = json.loads(report.read_text(encoding="utf-8"))
    out = {}
    for gate in doc["gates"]:
        verdict = gate["verdict"]
        users = {c["interval"]["n_clusters"] for c in verdict["details"]["stability"]}
        out[gate["slice"]] = f"{verdict['outcome']} ({verdict['mode']}, users {'/'.join(map(str, users))})"
    return out


def counted_run(server: FakeOllamaServer, project: Path, cache_dir: Path,
                report: Path) -> tuple[int, PytestRun]:
    """One pytest run on ``project`` with the response cache in ``cache_dir``; (chat calls, run)."""
    server.reset_stats()
    cmd = pytest_command(server.url, f"--robustexplain-cache-dir={cache_dir}",
                         f"--robustexplain-json={report}", cache="read-write")
    run = run_pytest(cmd, project)
    check(run, str(project.name))
    return server.chat_calls, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.02, help="fake model seconds per call")
    parser.add_argument("--capacity", type=int, default=4, help="fake model slots (OLLAMA_NUM_PARALLEL)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-economy-") as tmp, \
            FakeOllamaServer(latency=args.latency, capacity=args.capacity) as server:
        root = Path(tmp)
        fixed = root / "fixed"
        write_project(fixed, timing=False)
        sequential = root / "sequential"
        write_project(sequential, PAPER_MARKER + ', decision="sequential"', timing=False)

        cold, cold_run = counted_run(server, fixed, root / "cache-fixed", root / "cold.json")
        warm, warm_run = counted_run(server, fixed, root / "cache-fixed", root / "warm.json")
        seq, seq_run = counted_run(server, sequential, root / "cache-seq", root / "seq.json")

        same = outcomes(root / "cold.json") == outcomes(root / "warm.json")
        print(f"fake model: stable, latency {args.latency:.3f} s, capacity {args.capacity}; paper protocol "
              "(20 users x 5 kinds x 5 severities); calls counted at the server, warm-up included")
        print(f"cold run (fixed protocol, empty cache): {cold} calls in {cold_run.wall_s:.2f} s")
        print(f"warm rerun (same cache): {warm} calls in {warm_run.wall_s:.2f} s "
              f"{'OK' if warm == 0 else 'MISSED (must be 0)'}; same verdicts: {same}")
        share = seq / cold if cold else float("nan")
        print(f"sequential (decision=\"sequential\", thresholds 0.5/0.35, empty cache): {seq} calls in "
              f"{seq_run.wall_s:.2f} s = {share:.1%} of the fixed protocol's {cold} (users per slice below; "
              "their target, <= 1.25x the fewest a valid bet could use: bench_calibration.py)")
        for name, outcome in outcomes(root / "seq.json").items():
            print(f"  {name:<18} {outcome}")
        for name, outcome in outcomes(root / "cold.json").items():
            print(f"  fixed {name:<12} {outcome}")


if __name__ == "__main__":
    main()
