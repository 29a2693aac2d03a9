r"""Outside text in linear time: every function that reads a model's reply, a title or an id, timed on
pathological 100,000-character inputs against a plain linear pass over the same text.

A regex with an unbounded repeat next to another (``\s*\(\s*\d{4}\s*\)\s*$`` on 60,000 spaces: 25 s)
or a lazy scan from every unclosed tag (``<think>.*?</think>`` on 15,000 ``<think>``: seconds, hours on a long
reply) is quadratic on such input: its ratio grows with the length. Each row prints the ratio of the
function's time to ``sum(1 for _ in text)`` (one Python step per character) at 25,000 and 100,000
characters, and their growth: linear code keeps the two ratios about equal (growth ≈ 1), quadratic code
quadruples its ratio from 25,000 to 100,000 characters (growth ≈ 4).

    .venv/bin/python benchmarks/bench_text.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_robustexplain import sanitize
from pytest_robustexplain.explainers.reply import finish_reply, refusal_reason, strip_think
from pytest_robustexplain.metrics.copies import copied_share
from pytest_robustexplain.metrics.mentions import _title_forms, words
from pytest_robustexplain.metrics.text import all_tokens

TARGET = 1.5  # most growth of the ratio from 25,000 to 100,000 characters (quadratic code: about 4)
INPUTS: dict[str, Callable[[int], str]] = {
    "spaces": lambda n: " " * n,
    "unclosed <think>": lambda n: "<think>" * (n // 7),
    "commas and spaces": lambda n: ", " * (n // 2) + "the",
    "open brackets": lambda n: "(" * n,
    "one long word": lambda n: "a" * n,
    "escapes and bidi": lambda n: "\x1b[31m\u202e" * (n // 6),
}
FUNCTIONS: dict[str, Callable[[str], object]] = {
    "strip_think": strip_think,
    "refusal_reason": refusal_reason,
    "finish_reply": lambda t: finish_reply(t, model="m", latency_s=0.0),
    "title forms": _title_forms,
    "grounding words": words,
    "sanitize.visible": sanitize.visible,
    "sanitize.markdown_inert": sanitize.markdown_inert,
    "copied_share": lambda t: copied_share(t, t[: len(t) // 2]),
    "metric tokens": all_tokens,
}


def _time(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    worst = 0.0
    print(f"{'function':24} {'input':20} {'25k ratio':>10} {'100k ratio':>11} {'growth':>7}")
    for fname, fn in FUNCTIONS.items():
        for iname, make in INPUTS.items():
            ratios = []
            for n in (25_000, 100_000):
                text = make(n)
                base = _time(lambda text=text: sum(1 for _ in text))
                ratios.append(_time(lambda text=text, fn=fn: fn(text)) / base)
            growth = ratios[1] / max(ratios[0], 1e-9)
            if ratios[1] >= 0.5:  # below that the function's time is its constant cost, not the text's
                worst = max(worst, growth)
            print(f"{fname:24} {iname:20} {ratios[0]:>10.2f} {ratios[1]:>11.2f} {growth:>7.2f}", flush=True)
    print(f"\nlargest growth {worst:.2f} (target ≤ {TARGET:g}: {'OK' if worst <= TARGET else 'MISSED'})")


if __name__ == "__main__":
    main()
