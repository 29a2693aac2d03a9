"""Scaling: time and peak memory per pair of a whole ``pytest`` run from 20 to 1,000 users.

Each size is a generated synthetic dataset (:func:`~pytest_robustexplain.data.generate_synthetic` with as
many users and cases as the size, saved as a dataset directory) and one ``@pytest.mark.robustness`` test
with the paper's 5 kinds × 5 severities, run as ``python -m pytest`` against a zero-latency
:class:`FakeOllamaServer` with the response cache off, so the model costs nothing. Per size it prints
the wall time, the peak RSS of the pytest process, and per pair: the wall time, the CPU time (user +
system of the pytest process, steadier than wall time on a shared machine) and the memory above a trivial
pytest run (its fixed cost taken out, so a flat column means linear growth).

The benchmark fails (exit 1) if the largest size costs more CPU or memory than ``--max-growth`` times per
pair what
the second smallest does (20 users is mostly fixed cost, so its per-pair figures are not the reference).

    .venv/bin/python benchmarks/bench_scaling.py [--users 20,100,400,1000] [--max-growth 1.5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from bench_overhead import PLAIN_TEST, PytestRun, check, pytest_command, run_pytest, write_project

from pytest_robustexplain.data import generate_synthetic, save_dataset
from pytest_robustexplain.testing import FakeOllamaServer

MARKER = "min_combined=0.5, min_metric=0.35, users={users}, severities=[1, 2, 3, 4, 5]"
PAIRS_PER_USER = 25  # 5 kinds × 5 severities; a few trivial perturbations are filtered (counted below)


def dataset_dir(root: Path, users: int) -> Path:
    """A saved synthetic dataset with ``users`` users, each with one case."""
    out = root / f"data-{users}"
    save_dataset(generate_synthetic(n_users=users, n_cases=users, n_items=max(200, users // 2)), out)
    return out


def plain_project(root: Path) -> Path:
    out = root / "plain"
    out.mkdir()
    (out / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (out / "test_plain.py").write_text(PLAIN_TEST, encoding="utf-8")
    return out


def run_size(root: Path, url: str, users: int) -> PytestRun:
    project = root / f"users-{users}"
    write_project(project, MARKER.format(users=users), timing=False)
    cmd = pytest_command(url, f"--robustexplain-dataset={dataset_dir(root, users)}", "-p", "no:xdist")
    run = run_pytest(cmd, project)
    check(run, f"{users} users")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", default="20,100,400,1000", help="comma-separated sizes")
    parser.add_argument("--max-growth", type=float, default=1.5,
                        help="largest allowed ratio of per-pair cost, largest size over second smallest")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.users.split(","))

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp, \
            FakeOllamaServer(latency=0.0) as server:
        root = Path(tmp)
        plain = plain_project(root)
        for users in sizes:
            # The trivial run just before each size, so both see the same machine load.
            base = run_pytest(pytest_command(server.url), plain)
            check(base, "plain pytest")
            server.reset_stats()
            run = run_size(root, server.url, users)
            pairs = server.chat_calls - 1 - users  # minus the warm-up and one original per user
            # A child's peak RSS counts its parent's pages until it execs, so the trivial run's RSS grows
            # with this process; the smallest one (taken first) is the trivial run's own.
            base.maxrss_mb = min([base.maxrss_mb, *(r[3].maxrss_mb for r in rows)])
            step = ""
            if rows:  # memory per pair added since the previous size: the slope, without the fixed part
                prev_pairs, prev_run = rows[-1][1], rows[-1][2]
                added = 1024 * (run.maxrss_mb - prev_run.maxrss_mb) / (pairs - prev_pairs)
                step = f"  +{added:5.1f} KB/added pair"
            rows.append((users, pairs, run, base))
            print(f"{users:>6} users {pairs:>7} pairs  {run.wall_s:7.2f} s  {run.maxrss_mb:6.0f} MB  "
                  f"{1000 * (run.wall_s - base.wall_s) / pairs:6.2f} ms/pair  "
                  f"{1000 * (run.cpu_s - base.cpu_s) / pairs:6.2f} CPU ms/pair  "
                  f"{1024 * (run.maxrss_mb - base.maxrss_mb) / pairs:6.1f} KB/pair{step}  "
                  f"(trivial run {base.wall_s:.2f} s, {base.maxrss_mb:.0f} MB)", flush=True)

    if len(rows) < 2:
        return
    ref, last = rows[1] if len(rows) > 2 else rows[0], rows[-1]

    def per_pair(row: tuple[int, int, PytestRun, PytestRun]) -> tuple[float, float]:
        _, pairs, run, base = row
        return (run.cpu_s - base.cpu_s) / pairs, (run.maxrss_mb - base.maxrss_mb) / pairs

    (t_ref, m_ref), (t_last, m_last) = per_pair(ref), per_pair(last)
    growth_t, growth_m = t_last / t_ref, m_last / m_ref
    ok = growth_t <= args.max_growth and growth_m <= args.max_growth
    print(f"per-pair growth {ref[0]} -> {last[0]} users: CPU x{growth_t:.2f}, memory x{growth_m:.2f} "
          f"(limit x{args.max_growth}); median trivial run "
          f"{statistics.median(r[3].wall_s for r in rows):.2f} s; {'OK' if ok else 'SUPERLINEAR'}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
