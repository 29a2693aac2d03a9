"""What a model's calls took and cost in a run: the tokens the server counted (by kind, and per history
line), the time spent, and the money at a price — in all, for the originals, by kind and per verdict."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from ...results import GateResult, PairResult, is_control, tokens_cost
from .gates import ordered_kinds


def token_cost(pairs: Sequence[PairResult]) -> dict[str, Any]:
    """Tokens the server counted: each original once, each pair's other reply by kind (controls as their
    kind), and the prompt's tokens per history line — the slope of the originals' prompt tokens over
    their history lengths, the intercept being the rest of the prompt (instructions, the item)."""
    counted = [p for p in pairs if p.tokens]
    if not counted:
        return {}
    originals: dict[tuple[str, str], tuple[int, int, int]] = {}
    by_kind: dict[str, list[int]] = {}
    for p in counted:
        originals.setdefault((p.key.user_id, p.key.item_id), (p.tokens[0], p.tokens[1], p.history_length))
        entry = by_kind.setdefault(p.key.kind, [0, 0, 0])
        entry[0] += p.tokens[2]
        entry[1] += p.tokens[3]
        entry[2] += 1
    first = list(originals.values())
    kinds = ordered_kinds(by_kind)
    out: dict[str, Any] = {
        "prompt": sum(o[0] for o in first) + sum(k[0] for k in by_kind.values()),
        "completion": sum(o[1] for o in first) + sum(k[1] for k in by_kind.values()),
        "originals": [sum(o[0] for o in first), sum(o[1] for o in first), len(first)],
        # The method's kinds in their order, then the controls (noise floor, cross-user) by their names.
        "by_kind": {k: by_kind[k] for k in [*kinds, *sorted(set(by_kind) - set(kinds))]}}
    points = [(o[2], o[0]) for o in first if o[0] > 0 and o[2] > 0]
    if len({x for x, _ in points}) >= 2:
        mean_x = statistics.fmean(x for x, _ in points)
        mean_y = statistics.fmean(y for _, y in points)
        slope = (sum((x - mean_x) * (y - mean_y) for x, y in points)
                 / sum((x - mean_x) ** 2 for x, _ in points))
        out["per_line"], out["fixed"] = round(slope, 1), round(mean_y - slope * mean_x)
    return out


def model_time(pairs: Sequence[PairResult], gates: Sequence[GateResult]) -> dict[str, Any]:
    """Seconds the model spent on the replies these pairs compare — each original once, each pair's other
    reply — their count and median, and per verdict: the calls of each gate's users and pairs (mean and
    most, over the gates). Cache hits count the time of the call that made them: what a run without the
    cache costs."""
    originals: dict[tuple[str, str], float] = {}
    for p in pairs:
        if p.original_latency_s > 0:
            originals.setdefault((p.key.user_id, p.key.item_id), p.original_latency_s)
    times = [*originals.values(), *(p.latency_s for p in pairs if p.latency_s > 0)]
    if not times:
        return {}
    out: dict[str, Any] = {"seconds": round(sum(times), 1), "calls": len(times),
                           "median": round(statistics.median(times), 2)}
    per_verdict = [verdict_total(mine, lambda p: p.original_latency_s, lambda p: p.latency_s)
                   for mine in (verdict_pairs(gate, pairs) for gate in gates) if mine]
    if per_verdict:
        out["per_verdict"] = [round(statistics.fmean(per_verdict), 1), round(max(per_verdict), 1),
                              len(per_verdict)]
    return out


def verdict_pairs(gate: GateResult, pairs: Sequence[PairResult]) -> list[PairResult]:
    """The pairs one verdict read: its slice's, and the controls of its users."""
    users = set(gate.scope.get("users", ()))
    return [p for p in pairs if gate.covers(p) or (is_control(p.key.kind) and p.key.user_id in users)]


def verdict_total(pairs: Sequence[PairResult], original: Callable[[PairResult], float],
                  other: Callable[[PairResult], float]) -> float:
    """A quantity summed over the replies ``pairs`` compare: each original once (by user and item), each
    pair's other reply — what a verdict's replies took (time) or cost (money)."""
    firsts = {(p.key.user_id, p.key.item_id): original(p) for p in pairs}
    return sum(firsts.values()) + sum(other(p) for p in pairs)


def model_money(pairs: Sequence[PairResult], gates: Sequence[GateResult], price: tuple[float, float] | None
                ) -> dict[str, Any]:
    """What the replies these pairs compare cost at ``price`` — each original once, each pair's other reply,
    as the server counted their tokens — in all, for the originals, by kind, per verdict (mean, most, how
    many), and what this run spent (cache hits cost nothing now). Empty without a price or counted tokens."""
    if price is None:
        return {}
    counted = [p for p in pairs if p.tokens]
    if not counted:
        return {}
    originals: dict[tuple[str, str], tuple[float, bool]] = {}
    by_kind: dict[str, float] = {}
    spent = 0.0
    for p in counted:
        first = tokens_cost(p.tokens[0], p.tokens[1], price)
        originals.setdefault((p.key.user_id, p.key.item_id), (first, p.cached_original))
        other = tokens_cost(p.tokens[2], p.tokens[3], price)
        by_kind[p.key.kind] = by_kind.get(p.key.kind, 0.0) + other
        spent += 0.0 if p.cached_perturbed else other
    spent += sum(cost for cost, cached in originals.values() if not cached)
    out: dict[str, Any] = {
        "price": list(price), "total": sum(c for c, _ in originals.values()) + sum(by_kind.values()),
        "originals": sum(c for c, _ in originals.values()), "spent": spent,
        "by_kind": {k: by_kind[k] for k in [*ordered_kinds(by_kind), *sorted(set(by_kind) - set(
            ordered_kinds(by_kind)))]}}
    per_verdict = [verdict_total(mine, lambda p: tokens_cost(p.tokens[0], p.tokens[1], price),
                                 lambda p: tokens_cost(p.tokens[2], p.tokens[3], price))
                   for mine in (verdict_pairs(gate, counted) for gate in gates) if mine]
    if per_verdict:
        out["per_verdict"] = [statistics.fmean(per_verdict), max(per_verdict), len(per_verdict)]
    return out
