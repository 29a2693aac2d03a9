"""The JSON report: the complete, versioned record of a run, and the input of every other renderer.

``write_json(run, path)`` writes it atomically; ``read_json(path)`` reads it back into the identical
:class:`~pytest_robustexplain.results.RunResult` (aggregates are derived data and are recomputed, not read).
A file that is not a report, is malformed, or was written with a newer schema raises ``DataError`` naming
the file, the record and the field.

Schema (``schema_version`` 5; version 4 — stability's rows as the verdict's ``checks`` —, version 3 —
besides, the checks' records as fields of the verdict (``guard``, ``attacks``, ``faithfulness``,
``polarity``, ``flip``) —, version 2 — besides, the copying, grounding and relative-robustness numbers flat
in ``guard`` — and version 1 — no cross-user controls, no ``guard`` — are still read). Scores
are floats in [0, 1]; a number that is not finite is written
``null``. Unknown keys are ignored on reading, so later versions may add fields without a version bump;
a version bump means a reader of an older version must refuse the file.

Top level (object):

- ``schema`` — always ``"pytest-robustexplain/report"``.
- ``schema_version`` — integer, 5 for this layout.
- ``package_version`` — version of pytest-robustexplain that wrote the run.
- ``signature`` — the metric signature (tokenizer, tagger and version, BLEU settings, weights, package
  version): two runs are only comparable when it matches.
- ``seed`` — base seed of the sweep (perturbations and sampling).
- ``started_at`` / ``finished_at`` — ISO 8601 timestamps (UTC), possibly empty.
- ``settings`` — every effective setting of the run (thresholds ``min_combined``/``min_metric``, kinds,
  severities, users, repeats, backend options...), as the configuration resolved them; and, when tests could
  not be decided, ``errors`` — one sentence each (every call of a model failed, the server broke off), written
  even when nothing was decided, as every writer's "Not decided: …".
- ``models`` — list of model descriptions: ``name``, ``backend``, ``is_llm`` (false for the template
  explainer), ``digest``, ``parameter_size`` (e.g. ``"8.0B"``), ``quantization``, ``server_version``,
  ``host`` (each may be null) and any backend-specific extra keys.
- ``calls`` — model calls: ``made`` (a provider batch's answers included: ``batch``), ``cached`` (served by
  the response cache), ``failed``,
  ``cancelled`` (skipped because a sequential gate had already decided); when the server counted them, the
  calls made's ``prompt tokens``, ``prompt tokens the server reused`` (from its prompt cache, as it said:
  OpenAI's ``cached_tokens``, llama.cpp's ``cache_n``) and ``completion tokens``.
- ``timings`` — seconds spent per phase (phase name → float).
- ``judge_tokens`` — present when a faithfulness judge's server counted tokens: per judge model,
  ``replies`` (replies with counts), ``prompt`` and ``completion`` (every reply the judge read, from the
  cache or not) and ``made_prompt`` / ``made_completion`` (the calls made in this run), summed over xdist
  workers. ``judge_cost`` — derived, per judge model with a ``price``: ``replies``, ``price``, ``total``
  and ``spent`` (what this run's calls cost: cache hits are free).
- ``pairs`` — list, one object per scored pair (perturbation pairs and control pairs):

  - ``key`` — ``model``, ``user_id``, ``item_id``, ``kind`` (perturbation kind, ``"control"`` for a
    noise-floor pair: the same history explained again with another sample seed; ``"swap"`` for a
    cross-user control: ``original`` is the explanation for the user, ``perturbed`` the one for the donor
    user's interactions (``changes.donor``) under the user's identity (``changes.control_length``
    interactions; ``changes.copied``: the share of the original copied from its prompt), whose
    ``changes.grounding`` (``hedging`` and ``listed`` flags too) lists what the user's explanation
    mentions: ``history``, ``item`` and ``unsupported`` terms), ``severity`` (1–5, 0 for controls),
    ``repeat`` (integer).
  - ``semantic``, ``keyword``, ``structural``, ``length`` — the four similarity scores; ``combined`` — ρ.
  - ``original`` / ``perturbed`` — the two explanations, verbatim (model output: treat as untrusted).
  - ``changes`` — what the perturbation changed (object; content depends on the kind).
  - ``failure`` — null, or why the pair scores 0 everywhere (``"empty"``, ``"refusal"``, ``"error"``);
    ``failure_detail`` — the error message or refused text.
  - ``keyword_empty`` — both keyword sets were empty (keyword scored 0, flagged for review).
  - ``history_diversity`` — the original history's effective number of categories (exp of the entropy of
    its category shares); absent in reports written before it was recorded.
  - ``cached_original`` / ``cached_perturbed`` — the explanation came from the response cache.
  - ``latency_s`` — generation time of the pair's perturbed (or control) reply in seconds,
    ``original_latency_s`` that of its original (shared by the user's pairs); ``history_length`` —
    interactions.

- ``gates`` — list, one object per gated test item: ``nodeid``, ``slice`` (a kind, or ``"overall"``
  for all kinds together), ``model``, ``thresholds`` (name → value) and ``verdict``: ``outcome``
  (PASS / FAIL / INCONCLUSIVE / INSENSITIVE), ``mode`` (``mean``, ``confident``, ``sequential``),
  ``message``, ``findings`` (check name → its row, in the order the checks decided: ``check``,
  ``outcome`` (null: measured, not gated), ``reason``, ``value`` (an interval, or null), ``threshold``,
  ``bound`` (``min``/``max``), ``enforced``, ``counts``, ``examples``, ``note``, ``section``: the report
  section its check names, "" for none), ``details`` (each check's own record, by the name it keeps it
  under, present when measured: ``stability``, a list of rows — ``quantity`` (``combined`` or a metric),
  ``threshold``, ``outcome``, ``fragile`` (the interval straddles the threshold), ``flip_probability``
  (null or float) and ``interval`` —; ``guard``, the cross-user
  control of the slice: ``outcome``, ``policy``, ``swap``,
  ``perturbed``, ``delta``, ``sensitivity`` and ``relative`` intervals (ρ_swap, ρ_pert, Δ, ρ_floor − ρ_swap,
  R), ``floor``, ``n_cases``,
  ``identical``, ``n_users``, ``insensitive_users``, ``share_low``, ``min_sensitivity``,
  ``max_insensitive_share``, ``message``, ``example`` (``user_id``, ``donor_id``, ``item_id``,
  ``user_text``, ``donor_text``, ``combined``) or null, ``identical_low``, ``max_identical_share``,
  ``sensitivity_low`` (one-sided distribution-free lower bound of the users' mean S), ``users_needed``, and
  the records of the checks that read the same control: ``relative_robustness`` (``interval``: R over the
  gated kinds, Fieller's 1 − 2·alpha interval whose upper end is the one-sided bound the gate reads, or null;
  ``limit``, ``outcome``), ``copying`` (``copies``, ``explained``, ``low``/``high``: bounds with users as
  the unit, ``limit``, ``outcome``), ``grounding`` (``history_reference`` / ``unsupported``: intervals of
  the grounding rates, or null; ``min_history_reference``, ``max_unsupported_rate``, ``outcome``); then
  ``stopped_by``, ``stop_note``, ``failed`` (failed replies left out of the cases);
  ``attacks`` (list, one per opt-in adversarial kind the slice ran: ``kind`` ``prompt_injection`` or
  ``shilling``, ``successes``, ``n``, ``low``/``high`` (exact interval of the success rate), ``limit``,
  ``outcome``, ``by_family`` and ``by_severity`` (name → [successes, pairs]), ``examples``, ``stop_note``
  (under ``decision=sequential``, when the attack's own test failed the item early; else ""));
  ``faithfulness``, ``polarity``, ``flip`` (the judge's, preference polarity's and the counterfactual
  flip's records: docs/faithfulness.md); a user's check keeps what it keeps), ``users_needed`` (null or
  integer); in a shard's report (``shard``), ``plan``: the gate's settings (``gate``) and its planned
  ``users``, what ``robustexplain merge`` plans from.
- ``shard`` — present in a shard's report only: ``shard`` (``"2/4"``), ``plan`` (the fingerprint of what
  its shards share: the settings that change a measurement, signature, seed, models and digests, each
  gate's settings and planned users) and ``users`` (those it measured). docs/ci.md.
- ``aggregates`` — derived, per model name (see ``report.summary.Summary``): ``n_users``, ``n_pairs``,
  ``cached_pairs`` (both explanations from the cache), ``overall`` (ρ), ``by_kind`` (kind → interval),
  ``by_metric`` (metric → interval), ``by_severity`` (severity as a string → interval), ``kind_severity``
  (kind → severity → interval), ``by_user`` (list of ``user_id``, ``n``, ``mean``, ``sd`` within the
  user, ``history_length``), ``user_spread`` (``sd`` of the user means, ``sd_limit``, ``stratified``,
  ``strata``: ``label``, ``min_length``, ``max_length``, ``n_users``, ``mean``; ``diversity_strata``, the same
  cut by interaction diversity, the effective number of categories in ``min_length``/``max_length``),
  ``degradation_pct``
  (mean ρ from severity 1 to 5, percent, negative = worse), ``noise_floor`` (interval of the control pairs
  or null), ``n_control_pairs``, ``weakest_metric``, ``weakest_kind``, ``n_failures``, ``failures``
  (``key``, ``failure``, ``detail``), ``keyword_empty`` (keys), ``keyword_unread`` (pairs with an explanation
  the English keyword tagger cannot read: mostly non-Latin letters) and ``unread_scripts`` (their scripts, as
  Unicode names them: ``CJK``, ``THAI``, ``ARABIC``, …), ``small_kinds`` (kinds with fewer than 50
  pairs), ``recommendation`` (one sentence), ``sensitivity`` (the guard over all the model's pairs, same
  fields as a verdict's ``guard``, or null without cross-user controls), ``delta_by_kind`` (kind → Δ
  interval), ``relative_by_kind`` (kind → R interval, where defined).
- ``comparisons`` — derived, present with two or more models: each model after the first compared with the
  first on matched pairs (``stats.compare_models``), when the two share at least 80 % of their pairs (ran
  the same cases): ``names``, ``rows`` (one per quantity — ``combined`` and the four metrics: ``quantity``,
  ``label``, ``mean_a``, ``mean_b`` (intervals), ``delta_pct`` (B relative to A), ``p_value``, ``p_holm``,
  ``d_z``, ``significant``, ``n_units``), ``alpha``, ``unit`` (``user`` or ``pair``), ``n_matched``,
  ``unmatched_a``/``unmatched_b`` (match keys), ``conclusion``.

An interval is an object ``mean``, ``low``, ``high``, ``n`` (pairs), ``n_clusters`` (users),
``confidence``; intervals are cluster-robust by user.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

from ..results import RunResult, judge_money
from ..results.readers import (  # noqa: F401  (read_json & co. are also importable from here)
    SCHEMA,
    SCHEMA_VERSION,
    gate_from_dict,
    pair_from_dict,
    plain,
    read_json,
    run_from_dict,
)
from .comparison import conclusion, model_comparisons
from .summary import ReportModel, model_names


def run_to_dict(run: RunResult) -> dict[str, Any]:
    """The JSON document of ``run`` (plain JSON types, non-finite numbers as None)."""
    return plain(_document(ReportModel.of(run), [p.to_dict() for p in run.pairs]))


def _document(report: ReportModel, pairs: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The document, with ``pairs`` as its pairs (None: without the key; the streaming writer's head)."""
    run = report.run
    names = model_names(run)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "package_version": run.package_version,
        "signature": run.signature,
        "seed": run.seed,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "settings": run.settings,
        "models": run.models,
        "calls": run.calls,
        "timings": run.timings,
        "pairs": pairs,
        "gates": [g.to_dict() for g in run.gates],
        "aggregates": {name: report.summary(name).to_dict() for name in names},
    }
    if run.shard:  # a shard's run: which shard, the plan's fingerprint, its users
        doc["shard"] = run.shard
    if run.judge_tokens:  # the judges' tokens (read back), and what they cost at the price set
        doc["judge_tokens"] = run.judge_tokens
        cost = judge_money(run.judge_tokens, run.settings.get("price"))
        if cost:
            doc["judge_cost"] = cost
    if pairs is None:
        del doc["pairs"]
    if len(names) >= 2:
        doc["comparisons"] = _comparisons(run)
    return doc


def _comparisons(run: RunResult) -> list[dict[str, Any]]:
    return [{**comparison.to_dict(), "names": list(comparison.names), "conclusion": conclusion(comparison)}
            for comparison in model_comparisons(run)]


def write_json(run: RunResult | ReportModel, path: str | os.PathLike[str]) -> Path:
    """Write the JSON report of ``run`` to ``path`` atomically (a reader never sees half a file).

    Streamed: the pairs (most of the document: ~1.5 KB each) are converted and written one at a time, so
    neither the document nor its text is ever whole in memory. The bytes are those of :func:`dumps`.
    """
    report = ReportModel.of(run)
    head = plain(_document(report, None))
    pairs = (plain(p.to_dict()) for p in report.run.pairs)
    return atomic_write(path, lambda handle: _write_document(handle, head, pairs, end="\n"))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda handle: handle.write(text))


def atomic_write(path: str | os.PathLike[str], write: Callable[[TextIO], object]) -> Path:
    """Call ``write`` on a temporary file beside ``path``, then rename it over ``path``.

    The temporary file is opened normally (not with ``mkstemp``) so the report gets the usual
    permissions from the umask: it is meant to be shared as a CI artifact.

    Only a regular file (or a new one) is replaced. A symbolic link keeps its place: the file it names is
    the one replaced. A character device or a FIFO (``/dev/stdout``, a pipe), or a link to one, is written
    in place — the rename replaced ``/dev/full`` with a file when run as root, and left a FIFO's reader
    with nothing — and a directory, a block device or a socket is refused with the reason.
    """
    if not os.fspath(path):
        raise OSError(errno.ENOENT, "an empty path names no file", "")
    target = Path(path)
    try:
        mode: int | None = os.stat(target).st_mode  # through links: what a write would reach
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return _write_in_place(target, mode, write)
    if target.is_symlink():
        target = Path(os.path.realpath(target))  # the link stays; the file it names is replaced
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _write_in_place(target: Path, mode: int, write: Callable[[TextIO], object]) -> Path:
    """Write to a device or a FIFO where it is (nothing to replace atomically); refuse what cannot hold a
    report."""
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "a directory is in the way", str(target))
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # a block device is a disk: never written
        raise OSError(errno.EINVAL, "neither a file, a character device nor a FIFO", str(target))
    with open(target, "w", encoding="utf-8") as handle:
        write(handle)
        handle.flush()
    return target


def dumps(doc: dict[str, Any]) -> str:
    """The document as text: indented, except one line per pair (compact, and diffs stay readable)."""
    body = {k: v for k, v in doc.items() if k != "pairs"}
    if "pairs" not in doc:
        return json.dumps(body, ensure_ascii=False, indent=1, allow_nan=False)
    out = io.StringIO()
    _write_document(out, body, doc["pairs"])
    return out.getvalue()


def _write_document(handle: TextIO, body: dict[str, Any], pairs: Iterable[dict[str, Any]], *,
                    end: str = "") -> None:
    """``body`` indented, then ``"pairs"`` last with one compact line per pair, written as they come."""
    head = json.dumps(body, ensure_ascii=False, indent=1, allow_nan=False)
    handle.write(f"{head[:-2]},\n " if body else "{\n ")
    handle.write('"pairs": [')
    separator = "\n  "
    for pair in pairs:
        handle.write(separator)
        handle.write(json.dumps(pair, ensure_ascii=False, allow_nan=False, separators=(", ", ": ")))
        separator = ",\n  "
    handle.write(("]" if separator == "\n  " else "\n ]") + "\n}" + end)


def write_report(write: Any, where: str) -> str | None:
    """Run one report write; an OS error (no such directory, a file in the way, read-only, disk full)
    becomes one message naming ``where`` and the cause, never a traceback."""
    try:
        write()
    except OSError as exc:
        cause = exc.strerror or str(exc)
        if exc.filename and not where.endswith(f"={exc.filename}"):
            cause = f"{cause} ({exc.filename})"  # e.g. a file where its directory should be
        return f"{where}: cannot write the report: {cause}"
    return None
