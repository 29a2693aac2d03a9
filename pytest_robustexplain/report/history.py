"""The run history: one compact line per run, appended at its end, read back as trends per test and model.

A team gates every pull request; each report covers one run. The history keeps what a trend needs — when,
which commit, which model (and digest), which dataset and signature, each item's outcome and main numbers
(ρ and each check's value), the calls and tokens — so ``robustexplain history`` and the reports can say
whether a test's ρ is sliding over merges or jumped with a prompt change. It lives in the cache directory
by default (``history.jsonl``; CI caches restore it) or where the ``history`` setting puts it.

Writing is safe for runs that end together (xdist's controller, parallel CI jobs on one cache): each append
holds an exclusive lock on ``<file>.lock`` and writes one line; the file keeps the last :data:`HISTORY_CAP`
runs (older ones dropped under the same lock, the file replaced atomically). Reading skips a line that is not
a run record (a line cut by a killed job, a hand edit, anything that does not validate: types, numbers,
nesting, size) with one warning naming the file and the lines, and a record of a newer schema as such; the
file keeps at most :data:`HISTORY_MAX_BYTES` (the oldest records dropped when it is rewritten), so whatever
it holds, the run's own reports are written. Trends never mix runs of
different signatures: they would not measure the same thing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..results import is_number, judge_money, price_for
from ..safe_files import NO_FOLLOW, open_inside, write_atomic
from ..sanitize import visible
from .summary.spend import model_money, token_cost

if TYPE_CHECKING:
    from ..results import RunResult
    from ..stats.trend import Change

HISTORY_FILE = "history.jsonl"
HISTORY_CAP = 1000  # runs kept; about 3 KB a run of 20 items: a few MB at most
# Bytes kept and read: the newest records that fit (a history restored from a shared CI cache may be anything;
# 144 MB of it cost 527 MB of memory a run). A line longer than MAX_LINE_BYTES is skipped unparsed (a run of
# 500 items is about 75 KB).
HISTORY_MAX_BYTES = 16 * 2**20
MAX_LINE_BYTES = 2**20
SCHEMA = 1
# A number a trend may hold: what a float carries exactly (a 400-digit integer overflowed every later run).
LARGEST_VALUE = 2.0**53
LAST_RUNS = 10  # what a trend shows by default
# The numbers a trend shows, by the check whose row holds them: ρ (stability), R, S and the copy rate.
MAIN_NUMBERS: Mapping[str, str] = {"stability": "ρ", "relative": "R", "sensitivity": "S", "copying": "copy"}
COMMIT_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "CIRCLE_SHA1", "GIT_COMMIT")


class HistoryError(OSError):
    """The history file is not a regular file (a device, a FIFO, a link): it is never written through."""


# ------------------------------------------------------------------------------------------ the record
def run_line(run: RunResult, *, commit: str | None) -> dict[str, Any]:
    """The history's line for one finished run."""
    cost = token_cost(run.pairs)
    spent = {}
    for model in (str(m.get("name")) for m in run.models):
        money = model_money([p for p in run.pairs if p.key.model == model], (),
                            price_for(run.settings.get("price"), model))
        if money:
            spent[model] = round(money["spent"], 6)
    for model, found in judge_money(run.judge_tokens, run.settings.get("price")).items():  # judge calls count
        spent[model] = round(spent.get(model, 0.0) + found["spent"], 6)
    return {
        "v": SCHEMA, "time": run.finished_at or run.started_at, "commit": commit,
        "signature": run.signature,
        "dataset": run.settings.get("dataset_name") or run.settings.get("dataset"),
        "models": {str(m.get("name")): m.get("digest") for m in run.models},
        "calls": {k: run.calls.get(k, 0) for k in ("made", "cached", "failed", "cancelled")},
        "tokens": {"prompt": cost.get("prompt"), "completion": cost.get("completion")} if cost else None,
        "cost": spent or None,  # what this run spent on each priced model (cache hits are free)
        "items": [_item(gate) for gate in run.gates],
    }


def _item(gate: Any) -> dict[str, Any]:
    """An item's outcome and each check's value; the interval's ends where both are finite, and the limit of
    each enforced check (what a trend chart draws: ρ and the enforced checks)."""
    rows = {name: row for name, row in gate.verdict.findings.items() if row.value is not None}
    values = {name: _finite(row.value.mean) for name, row in rows.items()}
    ends = {name: (_finite(row.value.low), _finite(row.value.high)) for name, row in rows.items()}
    limits = {name: _finite(row.threshold) for name, row in rows.items() if row.enforced}
    return {"test": gate.nodeid, "slice": gate.slice, "model": gate.model, "outcome": gate.verdict.outcome,
            "values": {name: v for name, v in values.items() if v is not None},
            "bounds": {name: list(pair) for name, pair in ends.items() if None not in pair},
            "limits": {name: v for name, v in limits.items() if v is not None}}


def _finite(value: float) -> float | None:
    return round(value, 4) if isinstance(value, (int, float)) and math.isfinite(value) else None


def current_commit(env: Mapping[str, str], cwd: Path) -> str | None:
    """The commit the run measured: the CI's variable, else ``git rev-parse HEAD`` when ``cwd`` is in a
    repository (None without git or outside one)."""
    for name in COMMIT_VARIABLES:
        value = env.get(name, "").strip()
        if value and value.isalnum() and len(value) <= 64:
            return value

    git = shutil.which("git")
    if git is None:
        return None
    try:
        done = subprocess.run([git, "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    value = done.stdout.strip()
    return value if done.returncode == 0 and value.isalnum() else None


# ------------------------------------------------------------------------------------------ writing
def append_run(path: Path, line: Mapping[str, Any], *, cap: int = HISTORY_CAP) -> str:
    """Append ``line`` under the history's lock, keeping the last ``cap`` runs; the history's text as it
    now is (read once, under the lock: the trends are made from it, not from a second read)."""
    text = json.dumps(line, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        existing, cut = _read_text(path)
        lines = existing.splitlines(keepends=True)
        if cut or len(lines) + 1 > cap or len(existing.encode("utf-8")) + len(text.encode("utf-8")) > \
                HISTORY_MAX_BYTES:
            now = "".join(_newest(lines, cap - 1, HISTORY_MAX_BYTES - len(text.encode("utf-8")))) + text
            write_atomic(path, now)  # holding the lock: no run appends meanwhile
            return now
        # A line cut short by a killed run has no newline: the new record starts on a line of its own.
        added = ("\n" if existing and not existing.endswith("\n") else "") + text
        _append(path, added)
        return existing + added


def _newest(lines: Sequence[str], count: int, size: int) -> list[str]:
    """The newest of ``lines`` (each ended by a newline) that fit ``count`` lines and ``size`` bytes."""
    kept: list[str] = []
    for line in reversed(lines):
        line = line if line.endswith("\n") else line + "\n"
        size -= len(line.encode("utf-8"))
        if len(kept) >= count or size < 0:
            break
        kept.append(line)
    return kept[::-1]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        import fcntl  # optional: not on every platform
    except ImportError:  # pragma: no cover - Windows: appends of one line are left to the OS
        yield
        return
    fd = open_inside(path.parent, path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _open_regular(path: Path, flags: int) -> int:
    """``os.open`` that never follows a link and refuses anything but a regular file."""
    try:
        fd = os.open(path, flags | NO_FOLLOW | getattr(os, "O_NONBLOCK", 0), 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the path is a symbolic link (O_NOFOLLOW)
            raise HistoryError(f"{path} is a symbolic link: the history is not written through one") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise HistoryError(f"{path} is not a regular file: the history is written to regular files only")
    return fd


def _read_text(path: Path) -> tuple[str, int]:
    """The history's last :data:`HISTORY_MAX_BYTES` from its first whole line, and the bytes left out before
    them (0: the whole file)."""
    try:
        fd = _open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return "", 0
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= HISTORY_MAX_BYTES:
            return handle.read().decode("utf-8", errors="replace"), 0
        handle.seek(size - HISTORY_MAX_BYTES)
        data = handle.read()
        start = data.find(b"\n") + 1  # a record cut by the bound is no record
        return data[start:].decode("utf-8", errors="replace"), size - len(data) + start


def _append(path: Path, text: str) -> None:
    fd = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with os.fdopen(fd, "wb") as handle:
        handle.write(text.encode("utf-8"))


# ------------------------------------------------------------------------------------------ reading
def read_history(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The run records in ``path`` in the order they were written, and one warning per line skipped."""
    text, cut = _read_text(path)
    records, warnings = parse_history(text, path)
    if cut:
        warnings.insert(0, f"{path}: {cut:,} bytes at its start left unread (a history keeps its newest "
                           f"{HISTORY_MAX_BYTES // 2**20} MB; the next run drops them)")
    return records, warnings


def parse_history(text: str, path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The run records in a history's ``text`` (the file ``path``), and one warning per kind of line
    skipped, naming its lines."""
    records: list[dict[str, Any]] = []
    skipped: dict[str, list[int]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        why = "is not a run record (cut short or edited)"
        record = None
        if len(raw) > MAX_LINE_BYTES:
            why = f"is longer than a run record may be ({MAX_LINE_BYTES // 2**10} KB)"
        else:
            with contextlib.suppress(ValueError, RecursionError):  # RecursionError: nested too deeply
                record = json.loads(raw)
        version = record.get("v") if isinstance(record, dict) else None
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA:
            why = (f"was written by a newer pytest-robustexplain (history schema {version}; this one reads "
                   f"{SCHEMA})")
        elif _is_record(record):
            records.append(record)  # type: ignore[arg-type]  # a dict: _is_record checked it
            continue
        skipped.setdefault(why, []).append(number)
    return records, [_skipped(path, numbers, why) for why, numbers in skipped.items()]


def _skipped(path: Path, numbers: Sequence[int], why: str) -> str:
    more = f" and {len(numbers) - 5} more" if len(numbers) > 5 else ""
    lines = ", ".join(map(str, numbers[:5])) + more
    verb, rest = why.split(" ", 1)  # "is …" / "was …": the verb of one line, made plural for several
    verb = verb if len(numbers) == 1 else {"is": "are", "was": "were"}[verb]
    return f"{path}: line{'s' if len(numbers) > 1 else ''} {lines} {verb} {rest}: skipped"


def _is_record(record: Any) -> bool:
    """Whether ``record`` is a run record every reader can use as it is: the types each field is read as,
    finite numbers a float holds, an optional text where one may be missing."""
    if not (isinstance(record, dict) and record.get("v") == SCHEMA
            and isinstance(record.get("signature"), str) and isinstance(record.get("items"), list)):
        return False
    models = record.get("models") or {}
    return (all(_text(record.get(k)) for k in ("time", "commit", "dataset")) and isinstance(models, dict)
            and all(_text(d) for d in models.values()) and all(_is_item(i) for i in record["items"]))


def _is_item(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    values, bounds, limits = item.get("values", {}), item.get("bounds", {}), item.get("limits", {})
    return (isinstance(item.get("test"), str) and isinstance(item.get("model"), str)
            and _text(item.get("outcome")) and all(isinstance(d, dict) for d in (values, bounds, limits))
            and all(_number(v) for v in (*values.values(), *limits.values()))
            and all(isinstance(b, list) and len(b) == 2 and all(_number(v) for v in b)
                    for b in bounds.values()))


def _text(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _number(value: Any) -> bool:
    """A number a trend can hold (null too: a value not measured)."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= LARGEST_VALUE and not (isinstance(value, float) and math.isnan(value))


# ------------------------------------------------------------------------------------------ trends
@dataclass(frozen=True)
class Run:
    """One run of one test item: when, which commit and digest, its outcome and numbers."""

    time: str
    commit: str | None
    digest: str | None
    outcome: str
    values: Mapping[str, float]
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # each value's interval
    limits: Mapping[str, float] = field(default_factory=dict)  # each enforced check's limit


@dataclass
class Trend:
    """The runs of one test item on one model under one signature and dataset, oldest first."""

    test: str
    model: str
    signature: str
    dataset: str = ""
    runs: list[Run] = field(default_factory=list)

    def series(self, check: str, last: int | None = None) -> list[float]:
        runs = self.runs[-last:] if last else self.runs
        return [float(r.values[check]) for r in runs if isinstance(r.values.get(check), (int, float))]

    def change(self, check: str = "stability", last: int | None = None) -> Change | None:
        """The most likely change in ``check``'s value over the last runs (``stats.trend``)."""
        from ..stats.trend import change_point  # lazy: loads numpy

        runs = self.runs[-last:] if last else self.runs
        if any(not isinstance(r.values.get(check), (int, float)) for r in runs):
            return None  # a run without the value: positions would not be runs
        return change_point(self.series(check, last))


def trends(records: Sequence[Mapping[str, Any]]) -> list[Trend]:
    """Every (test item, model, signature, dataset) the records hold, each with its runs in order: runs
    that measured differently, or on other users, are never one trend."""
    found: dict[tuple[str, str, str, str], Trend] = {}
    for record in records:
        for item in record["items"]:
            key = (item["test"], item["model"], record["signature"], str(record.get("dataset") or ""))
            trend = found.setdefault(key, Trend(*key))
            values = {k: float(v) for k, v in item.get("values", {}).items() if is_number(v)}
            bounds = {k: (float(b[0]), float(b[1])) for k, b in item.get("bounds", {}).items()
                      if all(is_number(v) for v in b)}
            limits = {k: float(v) for k, v in item.get("limits", {}).items() if is_number(v)}
            trend.runs.append(Run(str(record.get("time") or ""), record.get("commit"),
                                  (record.get("models") or {}).get(item["model"]),
                                  str(item.get("outcome") or "?"), values, bounds, limits))
    return list(found.values())


def chart_of(trend: Trend, last: int = LAST_RUNS) -> dict[str, Any]:
    """What a trend chart draws of the last runs: each run's commit and outcome, and for ρ and each check
    enforced in any of them its value, interval ends and limit per run (None where a run did not measure
    it), with the change found in it when one is significant."""
    runs = trend.runs[-last:]
    names = list(dict.fromkeys(name for r in runs for name in r.limits))
    checks = {}
    for name in names:
        change = trend.change(name, last)
        checks[name] = {
            "label": MAIN_NUMBERS.get(name, name), "values": [r.values.get(name) for r in runs],
            "low": [r.bounds[name][0] if name in r.bounds else None for r in runs],
            "high": [r.bounds[name][1] if name in r.bounds else None for r in runs],
            "limits": [r.limits.get(name) for r in runs],
            "change": {"at": change.at, "before": change.before, "after": change.after, "p": change.p}
            if change is not None and change.significant else None}
    return {"first": len(trend.runs) - len(runs) + 1,
            "runs": [{"commit": (r.commit or "")[:7] or None, "outcome": r.outcome} for r in runs],
            "checks": checks}


def chart_words(chart: Mapping[str, Any]) -> list[str]:
    """Each charted check's values over the runs, and its change, in words: a trend chart's text
    alternative (the chart itself adds nothing these lines do not say)."""
    first, runs = int(chart["first"]), len(chart["runs"])
    lines = []
    for check in chart["checks"].values():
        shown = ", ".join("–" if v is None else f"{v:.2f}" for v in check["values"])
        line = f"{visible(str(check['label']))}, runs {first}–{first + runs - 1}: {shown}"
        change = check["change"]
        if change:
            line += (f"; changed at run {first + int(change['at'])}: {change['before']:.2f} → "
                     f"{change['after']:.2f} (p {change['p']:.3f})")
        lines.append(line)
    return lines


def is_chart(chart: Any) -> bool:
    """Whether ``chart`` (read back from a JSON report, which anyone may hand the report command) has the
    shape :func:`chart_of` gives, every number a number: only then is it drawn."""
    if not (isinstance(chart, dict) and is_number(chart.get("first")) and isinstance(chart.get("runs"), list)
            and isinstance(chart.get("checks"), dict) and 2 <= len(chart["runs"]) <= LAST_RUNS):
        return False
    n = len(chart["runs"])
    return all(isinstance(c, dict) and isinstance(c.get("label"), str)
               and all(isinstance(c.get(k), list) and len(c[k]) == n and all(_number(v) for v in c[k])
                       for k in ("values", "low", "high", "limits"))
               and (c.get("change") is None or (isinstance(c["change"], dict) and all(
                   is_number(c["change"].get(k)) for k in ("at", "before", "after", "p"))))
               for c in chart["checks"].values())


def recent(trend: Trend, check: str = "stability", last: int = LAST_RUNS) -> str:
    """"last 10 runs 0.69–0.73" (and the change, when one is significant) for one trend."""
    values = trend.series(check, last)
    if not values:
        return ""
    runs = min(last, len(trend.runs))
    said = f"last {runs} run{'s' if runs > 1 else ''} {min(values):.2f}–{max(values):.2f}"
    change = trend.change(check, last)
    if change is not None and change.significant:
        first = len(trend.runs) - runs + change.at + 1
        said += f"; changed at run {first}: {change.before:.2f} → {change.after:.2f} (p {change.p:.3f})"
    return said


def run_trends(text: str, path: Path, run: RunResult) -> tuple[list[dict[str, Any]], list[str]]:
    """For each of ``run``'s items that ran before under the same signature and dataset: its recent runs in
    words (this run the last of them), as the reports show them beside today's numbers; and the history's
    warnings. ``text``: the history (the file ``path``) as :func:`append_run` left it."""
    records, warnings = parse_history(text, path)
    dataset = str(run.settings.get("dataset_name") or run.settings.get("dataset") or "")
    found = {(t.test, t.model): t for t in trends(records) if t.signature == run.signature
             and t.dataset == dataset}
    out = []
    for gate in run.gates:
        trend = found.get((gate.nodeid, gate.model))
        if trend is not None and len(trend.runs) > 1:
            out.append({"test": gate.nodeid, "model": gate.model, "runs": len(trend.runs),
                        "said": recent(trend), "chart": chart_of(trend)})
    return out, warnings
