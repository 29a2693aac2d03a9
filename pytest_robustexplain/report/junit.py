"""JUnit XML for ``robustexplain run --junitxml``: the file pytest's ``--junitxml`` writes for marked tests.

One ``<testcase>`` per gated item, a ``<failure>`` (message = the verdict's reason) for each that failed
under the inconclusive policy, and the same ``robustexplain_*`` properties the plugin attaches to a pytest
item (:func:`gate_properties`, used by both). Model text reaches the file through the verdict messages and
guard examples, so every string goes through :func:`~pytest_robustexplain.sanitize.visible` (no control or
bidi character, no workflow command) and characters XML 1.0 cannot hold are shown as ``\\uXXXX``.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from ..checks import SECTIONED
from ..checks.controls import guard_properties
from ..results import (
    OVERALL,
    FaithfulnessResult,
    Finding,
    GateResult,
    GuardResult,
    Interval,
    PairResult,
    RunResult,
    metrics_of,
    price_for,
)
from ..sanitize import visible
from .summary.spend import model_money, verdict_pairs

# What XML 1.0 cannot carry even escaped (``visible`` already shows C0/C1 controls): U+FFFE, U+FFFF.
_NOT_XML = re.compile("[\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """One sanitised line that any XML parser reads back."""
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", visible(text))


def gate_properties(model: str, slice_name: str, outcome: str, n_pairs: int,
                    intervals: Mapping[str, Interval], guard: GuardResult | None,
                    faithfulness: FaithfulnessResult | None = None,
                    findings: Mapping[str, Finding] | None = None, cost: float | None = None
                    ) -> list[tuple[str, str]]:
    """Scores as JUnit XML properties, so CI dashboards can chart them per test item; the user's own
    checks and any other without properties of its own as ``robustexplain_check_<name>`` and its value;
    ``cost``: what the item's replies cost at the model's price (``price``)."""
    props = [("robustexplain_model", model), ("robustexplain_slice", slice_name),
             ("robustexplain_outcome", outcome), ("robustexplain_pairs", str(n_pairs))]
    for quantity, interval in intervals.items():
        props.append((f"robustexplain_{quantity}", f"{interval.mean:.4f}"))
        props.append((f"robustexplain_{quantity}_interval", f"[{interval.low:.4f}, {interval.high:.4f}]"))
    if guard is not None:

        props.extend((f"robustexplain_{name}", value) for name, value in guard_properties(guard))
    if faithfulness is not None:
        f = faithfulness
        props += [("robustexplain_faithful_rate", f"{f.rate:.4f}" if f.judged else "nan"),
                  ("robustexplain_faithful", f"{f.faithful}/{f.judged}"),
                  ("robustexplain_faithful_interval", f"[{f.low:.4f}, {f.high:.4f}]"),
                  ("robustexplain_judge_failures", str(f.failures)),
                  ("robustexplain_judge_agreement", f"{f.agreed}/{f.compared}")]
        if f.outcome is not None:
            props.append(("robustexplain_faithfulness", f.outcome))
        for name, found in (("judges_kappa", f.judges), ("people_kappa", f.people)):
            if found and found["kappa"][0] is not None:
                props.append((f"robustexplain_{name}", f"{found['kappa'][0]:.4f}"))
    if cost is not None:
        props.append(("robustexplain_cost", f"{cost:.6f}"))
    return props + _check_properties(findings or {})


def item_cost(pairs: Sequence[PairResult], price: tuple[float, float] | None) -> float | None:
    """What an item's replies cost at ``price`` (each original once), None without a price or tokens."""
    found = model_money(pairs, (), price)
    return found["total"] if found else None


def _check_properties(findings: Mapping[str, Finding]) -> list[tuple[str, str]]:
    props = []
    for name, f in findings.items():
        if name in SECTIONED:  # charted through their own properties above
            continue
        props.append((f"robustexplain_check_{name}", f.outcome or "reported"))
        if f.value is not None:
            props += [(f"robustexplain_check_{name}_value", f"{f.value.mean:.4f}"),
                      (f"robustexplain_check_{name}_interval", f"[{f.value.low:.4f}, {f.value.high:.4f}]")]
    return props


def _gate_pairs(result: RunResult, gate: GateResult) -> list[PairResult]:
    pairs = result.model_pairs(gate.model)
    return pairs if gate.slice == OVERALL else [p for p in pairs if p.key.kind == gate.slice]


def _intervals(gate: GateResult, pairs: Sequence[PairResult], confidence: float) -> dict[str, Interval]:
    """The gated quantities' intervals, then ρ and each metric from the pairs (as the plugin reports)."""
    from ..stats import cluster_interval  # lazy: loads numpy

    intervals = {c.quantity: c.interval for c in gate.verdict.checks}
    users = [p.key.user_id for p in pairs]
    for quantity in ("combined", *metrics_of(pairs)):
        if quantity not in intervals:
            intervals[quantity] = cluster_interval([p.metric(quantity) for p in pairs], users,
                                                   confidence=confidence)
    return intervals


def _failure_text(gate: GateResult) -> str:
    lines = [gate.verdict.message]
    lines += [f"{c.quantity} {c.interval.fmt()} below {c.threshold:g}" for c in gate.verdict.failed_checks]
    return "\n".join(_xml_text(line) for line in lines if line)


def _testcase(suite: ET.Element, result: RunResult, gate: GateResult, failed: bool,
              confidence: float) -> None:
    classname, _, name = gate.nodeid.rpartition(" ")
    case = ET.SubElement(suite, "testcase", classname=_xml_text(classname or gate.nodeid),
                         name=_xml_text(name or gate.nodeid))
    pairs = _gate_pairs(result, gate)

    every = verdict_pairs(gate, [p for p in result.pairs if p.key.model == gate.model])
    props = gate_properties(gate.model, gate.slice, gate.verdict.outcome, len(pairs),
                            _intervals(gate, pairs, confidence), gate.verdict.guard,
                            gate.verdict.faithfulness, gate.verdict.findings,
                            cost=item_cost(every, price_for(result.settings.get("price"), gate.model)))
    properties = ET.SubElement(case, "properties")
    for key, value in props:
        ET.SubElement(properties, "property", name=_xml_text(key), value=_xml_text(value))
    if failed:
        failure = ET.SubElement(case, "failure", message=_xml_text(gate.verdict.message))
        failure.text = _failure_text(gate)


def junit_xml(result: RunResult, failed: Collection[str], *, suite_name: str = "robustexplain",
              confidence: float = 0.95) -> str:
    """The JUnit document of a run; ``failed`` holds the node ids of the gates that failed."""
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=suite_name, errors="0", failures=str(len(failed)),
                          skipped="0", tests=str(len(result.gates)),
                          time=f"{result.timings.get('wall_s', 0.0):.3f}", timestamp=result.started_at,
                          hostname=socket.gethostname())
    for gate in result.gates:
        _testcase(suite, result, gate, gate.nodeid in failed, confidence)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def write_junit(result: RunResult, path: Path, failed: Collection[str], *, confidence: float = 0.95) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(result, failed, confidence=confidence) + "\n", encoding="utf-8")
