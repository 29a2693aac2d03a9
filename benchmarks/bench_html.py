"""The HTML report at 1,000 users: its size, how long it takes to write, and how quickly it opens.

A synthetic run of ``--users`` users × 5 kinds × 5 severities (25,000 pairs at the default 1,000), each pair
with an original and a perturbed explanation of 60–130 words (a real model's length; generated from a
seeded random draw of sentences, the perturbed one sharing most of its sentences with the original), its
scores, and the change record the perturbation kind writes; an overall gate and one per kind.
``--json`` reads a recorded JSON report instead.

Prints the time ``render_html`` takes, the file's size split into the pairs' JSON block, the charts and the
rest, then opens it in headless Chromium (``/usr/bin/chromium`` or ``--chromium``) inside a harness page
whose script reads the report's navigation timing: response end, DOMContentLoaded (every inline script —
the pairs table's first page included — has run by then) and the load event, first contentful paint, the
rows drawn, and the time of one sort (a header click), one text search and one kind filter, each a
synchronous handler timed around its event. Last, the wall time of a whole ``chromium --dump-dom`` of a page
framing the report over that of the same page framing a one-line page (median of ``--runs``): a ratio, so a
loaded machine slows both alike (the frame keeps the report's 17 MB out of the dumped DOM).

    .venv/bin/python benchmarks/bench_html.py [--users 1000] [--runs 3] [--json report.json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_robustexplain.report.html import render_html
from pytest_robustexplain.report.json_report import read_json
from pytest_robustexplain.results import (
    FAIL,
    METRICS,
    OVERALL,
    PASS,
    GateCheck,
    GateResult,
    PairKey,
    PairResult,
    RunResult,
    Verdict,
)
from pytest_robustexplain.stats import cluster_interval

KINDS = ("noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values")
CATEGORIES = ("Electronics", "Fashion", "Home", "Beauty", "Sports", "Books", "Toys", "Garden", "Music")
WORDS = ("quality", "price", "durable", "comfortable", "popular", "recent", "similar", "favourite", "style",
         "reviews", "practical", "brand", "everyday", "gift", "premium", "compact", "reliable", "value")
SENTENCES = (
    "Because you often buy {cat} products, {title} is a natural next pick.",
    "You rated {liked} highly, and this item shares its {w1} and {w2}.",
    "Items like {liked} appear often in your history, which suggests a taste for {w1} {cat} goods.",
    "Its {w1} and {w2} match what you usually choose.",
    "Several recent purchases point to {w1}, well-reviewed products in this range.",
    "Buyers with a similar history rate it well for its {w2}.",
    "It is also popular with people who browse {cat} and {cat2}.",
    "Your last few orders were {w1} rather than {w2}, and {title} fits that pattern.",
    "The {w1} of {title} is close to the {liked} you kept coming back to.",
    "Given how much {cat} you explored this year, it rounds out the collection.",
)
THRESHOLDS = {"combined": 0.5, **dict.fromkeys(METRICS, 0.35)}


def _sentence(rng: random.Random, user: dict[str, str]) -> str:
    return rng.choice(SENTENCES).format(w1=rng.choice(WORDS), w2=rng.choice(WORDS), **user)


def _explanation(rng: random.Random, user: dict[str, str]) -> list[str]:
    sentences: list[str] = []
    while sum(len(s.split()) for s in sentences) < rng.randint(60, 130):
        sentences.append(_sentence(rng, user))
    return sentences


def _changes(rng: random.Random, kind: str, severity: int) -> dict[str, object]:
    count = max(1, 2 * severity)
    positions = sorted(rng.sample(range(40), count))
    if kind in ("noise_injection", "behavior_dilution"):
        return {"inserted": [{"position": p, "item_id": f"X{rng.randrange(900):03d}",
                              "category": rng.choice(CATEGORIES)} for p in positions]}
    if kind == "temporal_shuffle":
        return {"moved": [[p, positions[i - 1]] for i, p in enumerate(positions)]}
    if kind == "category_drift":
        return {"replaced": [{"position": p, "old_item_id": f"X{rng.randrange(900):03d}",
                              "item_id": f"X{rng.randrange(900):03d}", "category": CATEGORIES[0]}
                             for p in positions], "categories": [CATEGORIES[0]]}
    return {"blanked": [{"position": p, "field": rng.choice(("rating", "timestamp", "category"))}
                        for p in positions]}


def synthetic_run(users: int, seed: int = 7) -> RunResult:
    """``users`` users × 5 kinds × 5 severities, one model, with an overall gate and one per kind."""
    rng = random.Random(seed)
    model = "llama3.1:8b"
    pairs = []
    for u in range(users):
        cat, cat2 = rng.sample(CATEGORIES, 2)
        user = {"cat": cat.lower(), "cat2": cat2.lower(), "title": f"Item {rng.randrange(10_000)}",
                "liked": f"Item {rng.randrange(10_000)}"}
        original = _explanation(rng, user)
        level = rng.uniform(0.35, 0.75)
        for kind in KINDS:
            for severity in range(1, 6):
                kept = [s if rng.random() < level + 0.2 - 0.04 * severity else _sentence(rng, user)
                        for s in original]
                scores = {m: round(min(1.0, max(0.0, level + rng.gauss(0, 0.12) - 0.02 * severity)), 4)
                          for m in METRICS}
                pairs.append(PairResult(
                    PairKey(model, f"u{u:05d}", f"I{rng.randrange(10_000):05d}", kind, severity, 0), **scores,
                    combined=round(sum(scores.values()) / 4, 4), original=" ".join(original),
                    perturbed=" ".join(kept), changes=_changes(rng, kind, severity),
                    latency_s=round(rng.uniform(1, 5), 3), history_length=rng.randint(8, 40)))
    gates = []
    for slice_ in (OVERALL, *KINDS):
        judged = [p for p in pairs if slice_ in (OVERALL, p.key.kind)]
        quantities = ["combined", *METRICS] if slice_ == OVERALL else ["combined"]
        checks = []
        for quantity in quantities:
            interval = cluster_interval([p.metric(quantity) for p in judged], [p.key.user_id for p in judged])
            threshold = THRESHOLDS[quantity]
            outcome = FAIL if interval.mean < threshold else PASS
            checks.append(GateCheck(quantity, threshold, interval, outcome,
                                    fragile=interval.low < threshold < interval.high))
        failed = [c for c in checks if c.outcome == FAIL]
        message = "; ".join(f"{c.quantity} {c.interval.mean:.3f} < {c.threshold:.2f}" for c in failed)
        gates.append(GateResult(f"test_robust.py::test_robust[{slice_}]", slice_, model,
                                Verdict(FAIL if failed else PASS, tuple(checks), message=message),
                                dict(THRESHOLDS)))
    return RunResult(signature="tok:words|tag:textblob|bleu:4,exp|w:.25/.25/.25/.25|v:bench", seed=seed,
                     models=[{"name": model, "backend": "ollama", "is_llm": True}],
                     settings={"users": users, "kinds": list(KINDS), "severities": [1, 2, 3, 4, 5]},
                     pairs=pairs, gates=gates, calls={"made": len(pairs) + users},
                     started_at="2025-01-01T00:00:00Z", finished_at="2025-01-01T01:00:00Z",
                     package_version="bench")


HARNESS = """<!DOCTYPE html><html><body><pre id="result">waiting</pre>
<iframe id="report" src="{src}" style="width:1400px;height:900px"></iframe>
<script>
document.getElementById("report").addEventListener("load", () => {{
  const w = document.getElementById("report").contentWindow;
  const d = w.document;
  const nav = w.performance.getEntriesByType("navigation")[0];
  const paint = w.performance.getEntriesByType("paint").find((p) => p.name === "first-contentful-paint");
  const timed = (act) => {{ const t = w.performance.now(); act(); return w.performance.now() - t; }};
  const out = {{
    response_end: nav.responseEnd, dom_content_loaded: nav.domContentLoadedEventEnd,
    load: nav.loadEventEnd || w.performance.now(), first_contentful_paint: paint ? paint.startTime : null,
    rows: d.querySelectorAll("#pairs-app tbody tr").length,
    status: (d.querySelector(".pairs-status") || {{}}).textContent,
  }};
  out.sort_ms = timed(() => d.querySelector('th[data-field="combined"] button').click());
  const box = d.querySelector("#pairs-app input[type=search]");
  out.search_ms = timed(() => {{ box.value = "favourite"; box.dispatchEvent(new w.Event("input")); }});
  out.search_status = d.querySelector(".pairs-status").textContent;
  const kind = d.querySelector('#pairs-app select[data-field="kind"]');
  out.filter_ms = timed(() => {{ kind.value = "1"; kind.dispatchEvent(new w.Event("change")); }});
  out.filter_status = d.querySelector(".pairs-status").textContent;
  document.getElementById("result").textContent = JSON.stringify(out);
}});
</script></body></html>
"""


def chromium_command(browser: str, *args: str) -> list[str]:
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files", *args]


def measure_in_browser(browser: str, report: Path) -> dict[str, object]:
    harness = report.with_name("harness.html")
    harness.write_text(HARNESS.format(src=report.name), encoding="utf-8")
    dom = subprocess.run(chromium_command(browser, "--dump-dom", harness.as_uri()), capture_output=True,
                         text=True, timeout=600).stdout
    found = re.search(r'<pre id="result">(\{.*?\})</pre>', dom)
    if not found:
        sys.exit(f"the harness page reported nothing: {dom[:400]!r}")
    result: dict[str, object] = json.loads(found.group(1).replace("&amp;", "&"))
    return result


def process_wall(browser: str, page: Path) -> float:
    frame = page.with_name(f"frame-{page.name}")
    frame.write_text(f'<!DOCTYPE html><iframe src="{page.name}"></iframe>', encoding="utf-8")
    start = time.perf_counter()
    subprocess.run(chromium_command(browser, "--dump-dom", frame.as_uri()), capture_output=True, timeout=600,
                   check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3, help="whole-browser runs for the wall-time ratio")
    parser.add_argument("--json", type=Path, help="measure the HTML of this JSON report instead")
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    parser.add_argument("--keep", type=Path, help="write the report (and harness) into this directory")
    args = parser.parse_args()

    start = time.perf_counter()
    run = read_json(args.json) if args.json else synthetic_run(args.users)
    print(f"run: {len(run.pairs):,} pairs, {len({p.key.user_id for p in run.pairs}):,} users "
          f"({time.perf_counter() - start:.1f} s to {'read' if args.json else 'build'})")
    start = time.perf_counter()
    page = render_html(run)
    render_s = time.perf_counter() - start
    data = page.encode("utf-8")
    block = re.search(r'<script type="application/json" id="pairs-data">(.*?)</script>', page, re.DOTALL)
    charts = sum(len(m) for m in re.findall(r'src="data:image/svg\+xml;base64,[^"]*"', page))
    json_bytes = len(block.group(1).encode("utf-8")) if block else 0
    print(f"render_html: {render_s:.1f} s")
    print(f"file size: {len(data) / 1e6:.2f} MB ({len(data) / max(1, len(run.pairs)):,.0f} bytes per pair): "
          f"pairs JSON {json_bytes / 1e6:.2f} MB, charts {charts / 1e6:.2f} MB, "
          f"the rest {(len(data) - json_bytes - charts) / 1e6:.2f} MB")

    if not args.chromium:
        print("chromium not found: no load time (pass --chromium PATH)")
        return
    with tempfile.TemporaryDirectory(prefix="bench-html-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        report = root / "report.html"
        report.write_bytes(data)
        timing = measure_in_browser(args.chromium, report)
        print("in headless Chromium (ms from the report's navigation start): "
              f"response end {timing['response_end']:.0f}, DOMContentLoaded (first page of the table drawn) "
              f"{timing['dom_content_loaded']:.0f}, load {timing['load']:.0f}, first contentful paint "
              f"{timing['first_contentful_paint'] or float('nan'):.0f}")
        print(f"  table: {timing['rows']} rows drawn, '{timing['status']}'")
        print(f"  sort by ρ {timing['sort_ms']:.0f} ms · search 'favourite' {timing['search_ms']:.0f} ms "
              f"('{timing['search_status']}') · kind filter {timing['filter_ms']:.0f} ms "
              f"('{timing['filter_status']}')")
        blank = root / "blank.html"
        blank.write_text("<!DOCTYPE html><title>blank</title><p>blank</p>", encoding="utf-8")
        walls = []
        for _ in range(args.runs):  # interleaved, so both see the same load
            walls.append((process_wall(args.chromium, blank), process_wall(args.chromium, report)))
        base = statistics.median(b for b, _ in walls)
        full = statistics.median(r for _, r in walls)
        print(f"whole chromium --dump-dom: report {full:.2f} s, one-line page {base:.2f} s "
              f"(×{full / base:.2f}; +{full - base:.2f} s for the report), median of {args.runs}")


if __name__ == "__main__":
    main()
