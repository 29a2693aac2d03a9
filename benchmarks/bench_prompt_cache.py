"""What a server's prompt cache can skip of a run's prompts (issue 64, item 5), and what it does skip.

Without a server: the share of each perturbed prompt that its original's prompt begins with — all a prompt
cache can reuse within a run, whatever the order or slot — by kind, on the synthetic set's first ``--users``
users at severities 1–5.

With ``--host`` (an OpenAI-compatible server that reports ``timings.cache_n`` or ``cached_tokens``, e.g.
``../shared/tools/real-llm-server``): each user's original, then its 25 perturbed prompts one at a time, in
the plan's order or longest-shared-prefix first (``--order``), optionally pinned to one slot a user
(``--pin``: llama.cpp's ``id_slot``); prints the prompt tokens, those the server reused and the wall time.
Restart the server before each order: it keeps earlier prompts in memory, so a second pass reuses nearly all.

    .venv/bin/python benchmarks/bench_prompt_cache.py [--users 20]
    .venv/bin/python benchmarks/bench_prompt_cache.py --host http://127.0.0.1:8088 --users 3 --order plan
"""

from __future__ import annotations

import argparse
import os
import time

import httpx

from pytest_robustexplain.data import EvalCase, default_dataset
from pytest_robustexplain.explainers.prompt import PromptTemplate
from pytest_robustexplain.perturbations import apply_perturbation

KINDS = ("noise_injection", "temporal_shuffle", "category_drift", "missing_values", "behavior_dilution")
TEMPLATE = PromptTemplate()


def shared_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))  # noqa: RUF071 - characters, not paths, are what is wanted


def prompts(case: EvalCase, catalog: object) -> tuple[str, list[tuple[str, str]]]:
    """The case's original prompt and its (kind, perturbed prompt) at every kind and severity."""
    original = TEMPLATE.render(case.history, case.item)
    perturbed = [(kind, TEMPLATE.render(apply_perturbation(case.history, kind, severity, catalog=catalog,
                                                           seed=1, item_id=case.item.item_id).perturbed,
                                        case.item))
                 for kind in KINDS for severity in range(1, 6)]
    return original, perturbed


def shares(users: int) -> None:
    data = default_dataset()
    by_kind: dict[str, list[int]] = {}
    for case in list(data.cases)[:users]:
        original, perturbed = prompts(case, data.catalog)
        for kind, text in perturbed:
            counts = by_kind.setdefault(kind, [0, 0])
            counts[0] += shared_prefix(original, text)
            counts[1] += len(text)
    total = [sum(c[i] for c in by_kind.values()) for i in (0, 1)]
    print(f"share of a perturbed prompt its original begins with ({users} users, severities 1-5): "
          f"{100 * total[0] / total[1]:.0f} % overall")
    for kind, (common, length) in by_kind.items():
        print(f"  {kind:<18} {100 * common / length:.0f} %")


def served(host: str, users: int, order: str, pin: bool) -> None:
    data = default_dataset()
    said = {"prompt": 0, "reused": 0}
    started = time.perf_counter()
    with httpx.Client(base_url=host.rstrip("/"), timeout=600) as client:
        for number, case in enumerate(list(data.cases)[:users]):
            original, perturbed = prompts(case, data.catalog)
            texts = [t for _, t in perturbed]
            if order == "prefix":
                texts.sort(key=lambda t: -shared_prefix(original, t))
            for seed, text in enumerate([original, *texts]):
                body = {"model": "any", "messages": [{"role": "user", "content": text}], "max_tokens": 8,
                        "temperature": 0, "seed": seed, **({"id_slot": number % 4} if pin else {})}
                reply = client.post("/v1/chat/completions", json=body).json()
                said["prompt"] += reply["usage"]["prompt_tokens"]
                said["reused"] += reply.get("timings", {}).get("cache_n") or (
                    reply["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    wall = time.perf_counter() - started
    print(f"order {order}{', pinned' if pin else ''}: {said['prompt']:,} prompt tokens, the server reused "
          f"{said['reused']:,} ({100 * said['reused'] / max(said['prompt'], 1):.0f} %), "
          f"evaluated {said['prompt'] - said['reused']:,}, {wall:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--host", help="an OpenAI-compatible server's root (without /v1)")
    parser.add_argument("--order", choices=("plan", "prefix"), default="plan")
    parser.add_argument("--pin", action="store_true", help="a user's calls to one slot (llama.cpp id_slot)")
    args = parser.parse_args()
    if args.host:
        served(args.host, args.users, args.order, args.pin)
    else:
        shares(args.users)


if __name__ == "__main__":
    main()
