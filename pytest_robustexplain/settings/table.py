"""The option table: every setting declared once in :data:`OPTIONS`, with the choices and defaults it offers —
the run's own here, each check's in its own module (``Check.options``, gathered as :data:`CHECK_OPTIONS`).

From one :class:`OptionSpec` come the command-line option (``--robustexplain-<name>``), the ini key
(``robustexplain_<name>``), the environment variable (``ROBUSTEXPLAIN_<NAME>``), the key of
``robustexplain.yaml`` and the field of :class:`~pytest_robustexplain.settings.Settings`;
:func:`register_options` adds the options and ini keys to pytest.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..backends import BACKEND_NAMES, DEFAULT_HOSTS, GENERATION_DEFAULTS
from ..backends import BACKENDS as BACKEND_RECORDS
from ..checks.registry import BUILTIN
from ..options.parsers import (
    float_parser,
    int_parser,
    parse_bool,
    parse_check_limits,
    parse_columns,
    parse_dataset,
    parse_env_name,
    parse_history,
    parse_host,
    parse_judge_models,
    parse_kinds,
    parse_min_metric_setting,
    parse_models,
    parse_path,
    parse_per_kind_setting,
    parse_price,
    parse_severities,
    parse_shard,
    parse_text,
    parse_weights,
)
from ..options.spec import DOORS as DOORS  # the table's names, defined with the spec
from ..options.spec import PYTEST_SPELLING as PYTEST_SPELLING
from ..options.spec import OptionSpec, enum_opt, opt
from ..options.spec import Spelling as Spelling
from ..results import (
    COUNTS_PROPORTIONAL,
    DEFAULT_MIN_COMBINED,
    DEFAULT_MIN_METRIC,
    GUARD_POLICIES,
    JUDGE_SCOPES,
    PERTURBATION_COUNTS,
)

if TYPE_CHECKING:
    import pytest

BATCH_PRICE = 0.5  # what a batch call costs of a synchronous one (OpenAI's Batch API: half)
BACKENDS: tuple[str, ...] = BACKEND_NAMES  # the registry's (pytest_robustexplain.backends)
CACHE_MODES: tuple[str, ...] = ("off", "read", "write", "read-write", "replay-only")
DECISIONS: tuple[str, ...] = ("mean", "confident", "sequential")
DESIGNS: tuple[str, ...] = ("full", "balanced")
INCONCLUSIVE_POLICIES: tuple[str, ...] = ("fail", "pass", "warn")
TRISTATE: tuple[str, ...] = ("auto", "on", "off")
JUDGE_BACKENDS: tuple[str, ...] = ("auto", *(b.name for b in BACKEND_RECORDS.values() if b.default_host))
DEFAULT_PERTURBATIONS: tuple[str, ...] = (
    "noise_injection", "temporal_shuffle", "behavior_dilution", "category_drift", "missing_values",
)
_GEN = GENERATION_DEFAULTS  # the generation options' defaults, defined once in backends.py
MIN_ALPHA = 1e-6  # the smallest error level a setting may ask for (one wrong verdict in a million gates)
YAML_NAME = "robustexplain.yaml"
PLUGIN_NAME = "robustexplain"  # the pytest11 entry point's name (pyproject.toml), as ``-p`` takes it
# The settings the built-in checks declare, each in its own module (``Check.options``), in registry order.
CHECK_OPTIONS: tuple[OptionSpec, ...] = tuple(spec for check in BUILTIN for spec in check.options)

_PERTURB_HELP = ("Perturbation kinds, comma-separated (noise_injection, temporal_shuffle, behavior_dilution, "
                 "category_drift, missing_values; aliases noise, shuffle, dilution, drift, missing); "
                 "default all five.")

OPTIONS: tuple[OptionSpec, ...] = (
    opt("model", parse_models, (), "Model(s) to gate, comma-separated (e.g. llama3.1:8b,qwen2.5:7b). "
        "Without a model the robustness tests are skipped (see require-model).", metavar="MODEL[,MODEL...]"),
    enum_opt("backend", BACKENDS, "ollama", "Explanation backend ('callable': your conftest overrides the "
             "explainer fixture; 'template': a deterministic offline template)."),
    opt("host", parse_host, None, "Base URL of the Ollama server or OpenAI-compatible API; several, "
        "comma-separated (a list in YAML), spread the calls over the hosts, each with its own concurrency; "
        f"default $OLLAMA_HOST for Ollama, else {DEFAULT_HOSTS['ollama']} (Ollama) or "
        f"{DEFAULT_HOSTS['openai']} (a local OpenAI-compatible server: llama.cpp, vLLM, LM Studio).",
        metavar="URL[,URL...]", env_fallbacks=("OLLAMA_HOST",)),
    opt("api-key-env", parse_env_name, "OPENAI_API_KEY", "Name of the environment variable holding the "
        "API key for the openai backend; default OPENAI_API_KEY.", metavar="VAR", echo=False),
    opt("histories", parse_path, None, "User histories file (default: the bundled synthetic set).",
        metavar="FILE", path="file"),
    opt("catalog", parse_path, None, "Item catalog file (default: the bundled synthetic set).",
        metavar="FILE", path="file"),
    opt("cases", parse_path, None, "Evaluation cases file: user and recommended item per line "
        "(default: the bundled synthetic set).", metavar="FILE", path="file"),
    opt("columns", parse_columns, MappingProxyType({}), "Your own CSV column names for the histories and "
        "catalog files: FIELD=COLUMN,... (a mapping in YAML), e.g. user_id=userId,item_id=movieId; each "
        "file's columns it has are renamed; default none.", metavar="FIELD=COLUMN,..."),
    opt("catalog-columns", parse_columns, MappingProxyType({}), "CSV column names of the catalog file "
        "only, over columns there: FIELD=COLUMN,... (a mapping in YAML); default none.",
        metavar="FIELD=COLUMN,..."),
    opt("dataset", parse_dataset, "synthetic", "'synthetic' (bundled, the paper's setup) or the path of a "
        "MovieLens-style directory; default synthetic.", metavar="synthetic|DIR", path="dir"),
    opt("perturbations", parse_kinds, DEFAULT_PERTURBATIONS, _PERTURB_HELP, metavar="KIND[,KIND...]",
        marker=True),
    opt("severities", parse_severities, (1, 2, 3, 4, 5), "Severity levels: a comma list and/or ranges "
        "within 1-5 (e.g. 1-5, 1,3,5, 2-4); default 1-5.", metavar="LEVELS", marker=True),
    opt("users", int_parser(1, allow_all=True), 20, "Number of evaluation cases (users) to use, a seeded "
        "sample on datasets without a cases file; 'all' for every one; default 20 on every dataset.",
        metavar="N|all", marker=True),
    opt("max-history", int_parser(1, allow_all=True), 50, "Most recent interactions of each history the "
        "model sees (older ones are dropped when the data is loaded); 'all' keeps every one; default 50.",
        metavar="N|all"),
    enum_opt('perturbation-counts', PERTURBATION_COUNTS, COUNTS_PROPORTIONAL, "How many items "
             "noise_injection and behavior_dilution insert at severity s: 'proportional' round(0.1·s·n) of a "
             "history of n (at least 1), 'paper' exactly s, as the paper and the guide write it; recorded in "
             "the signature, so runs of the two never compare."),
    opt("repeats", int_parser(1), 1, "Explanations per (case, kind, severity), with different sample "
        "seeds; default 1.", metavar="N", marker=True),
    opt("seed", int_parser(0), _GEN.seed, f"Random seed for perturbations and model sampling; default "
        f"{_GEN.seed}.", metavar="N"),
    opt("temperature", float_parser(0.0, None), _GEN.temperature,
        f"Sampling temperature; default {_GEN.temperature}.", metavar="T"),
    opt("num-predict", int_parser(1), _GEN.num_predict,
        f"Maximum tokens per explanation; default {_GEN.num_predict}.", metavar="N"),
    opt("num-ctx", int_parser(1), _GEN.num_ctx,
        f"Model context window in tokens; default {_GEN.num_ctx}.", metavar="N"),
    opt("concurrency", int_parser(1), _GEN.concurrency, "Model calls in flight at once, per process "
        f"(under pytest-xdist each worker has its own limit); default {_GEN.concurrency}.", metavar="N"),
    opt("connect-timeout", float_parser(0.0, None, open_low=True), _GEN.connect_timeout, "Seconds to "
        f"wait for a connection to the model server; default {_GEN.connect_timeout:g}.", metavar="SECONDS"),
    opt("timeout", float_parser(0.0, None, open_low=True), _GEN.read_timeout, "Seconds one model call "
        "may take in all (with connect-timeout; each attempt, before retries), also for a callable "
        f"explainer; default {_GEN.read_timeout:g}.", metavar="SECONDS"),
    opt("retries", int_parser(0), _GEN.max_attempts - 1, "Retries of a failed model call (with "
        f"backoff); default {_GEN.max_attempts - 1}.", metavar="N"),
    enum_opt("cache", CACHE_MODES, "read-write", "Response cache mode ('replay-only' fails on any cache "
             "miss, for offline CI)."),
    opt("cache-dir", parse_path, None, "Response cache directory, shared by pytest and robustexplain run; "
        "default ./.robustexplain-cache in the rootdir (a directory the run creates ignores itself in git, "
        "as pytest's cache does).", metavar="DIR", path="output-dir"),
    opt("json", parse_path, None, "Write the JSON report (the full run) to this file.", metavar="FILE",
        path="output"),
    opt("html", parse_path, None, "Write the HTML report to this file.", metavar="FILE", path="output"),
    opt("markdown", parse_path, None, "Write the Markdown summary to this file (e.g. "
        "$GITHUB_STEP_SUMMARY).", metavar="FILE", path="output"),
    opt("history", parse_history, None, "Run history: each run appends one line (time, commit, models, each "
        "item's outcome and numbers, calls, tokens) that `robustexplain history` and the reports' trends "
        "read; the last 1000 runs are kept. Default <cache-dir>/history.jsonl when the cache writes (cache "
        "write or read-write); 'off' keeps none.",
        metavar="FILE|off", path="output"),
    opt("require-model", parse_bool, False, "Error out, instead of skipping the robustness tests, "
        "when no model is configured.", metavar=None, flag=True, doors=("pytest",)),
    opt("dry-run", parse_bool, False, "Plan the robustness tests and print what they would cost (pairs, "
        "model calls at most) without calling a model; the marked tests are skipped.", metavar=None,
        flag=True),
    opt("min-combined", float_parser(0.0, 1.0), DEFAULT_MIN_COMBINED, "Gate: minimum combined "
        f"robustness ρ (0-1); default {DEFAULT_MIN_COMBINED}.", metavar="X", marker=True),
    opt("min-metric", parse_min_metric_setting, DEFAULT_MIN_METRIC, "Gate: minimum of each metric "
        "(0-1), or per metric: semantic=0.5,keyword=0.4 (the others 0.35); default 0.35.",
        metavar="X|METRIC=X,...", marker=True),
    opt("per-kind", parse_per_kind_setting, MappingProxyType({}), "Gate: thresholds for one perturbation "
        "kind's item: category_drift.min_combined=0.4,noise.min_metric.semantic=0.5 (a mapping in YAML); "
        "default none.", metavar="KIND.KEY=X,...", marker=True),
    opt("weights", parse_weights, (0.25, 0.25, 0.25, 0.25), "Weights of semantic, keyword, structural "
        "and length in ρ: four comma-separated numbers or semantic=..,keyword=..,structural=..,length=.. "
        "(a fifth number or embedding=.. with embed-model); non-negative, summing to 1; default equal.",
        metavar="W,W,W,W", marker=True),
    opt("embed-model", parse_text, None, "Opt-in fifth metric 'embedding': cosine of the two explanations' "
        "vectors from this embedding model (Ollama /api/embed, or /v1/embeddings with the openai "
        "backend), on the first host; reported beside the four, in ρ only when the weights name it; "
        "default off (the paper's four metrics).", metavar="MODEL"),
    enum_opt("design", DESIGNS, "full", "Which severities each user runs: 'full' every kind at every "
             "severity (the paper's), 'balanced' every kind at one severity, rotated over the users so that "
             "every (kind, severity) is covered — about a quarter of the calls per user, spent on more "
             "users.", marker=True),
    enum_opt("decision", DECISIONS, "mean", "Gate rule: 'mean' compares the mean (the method's rule), "
             "'confident' needs the whole interval on one side, 'sequential' stops adding users once "
             "decided.", marker=True),
    # Bounded before anything runs: at 1e-20 every interval was infinite and the betting test's level
    # overflowed; above 0.5 a verdict would be wrong more often than the method allows anything to be.
    opt("alpha", float_parser(MIN_ALPHA, 0.5), 0.05, "Error level of the intervals and the sequential "
        f"test, between {MIN_ALPHA:g} and 0.5; default 0.05.", metavar="A", marker=True),
    enum_opt("inconclusive", INCONCLUSIVE_POLICIES, "fail", "What an INCONCLUSIVE verdict does to the test.",
         marker=True),
    opt("max-users", int_parser(1), None, "Most users the sequential decision may use; default all.",
        metavar="N", marker=True),
    opt("max-calls", int_parser(1), None, "Most model calls one gated test may plan: its users are cut to "
        "the number that fits (said before the run); default no limit.", metavar="N"),
    opt("max-minutes", float_parser(0.0, None, open_low=True), None, "Time budget of the run's model "
        "calls, from the first call: when it runs out the calls still to make are cancelled and each gate "
        "is decided on its first users whose pairs are all in (a gate they cannot decide is INCONCLUSIVE "
        "and says how many users it would need); default no limit.", metavar="MINUTES"),
    opt("price", parse_price, MappingProxyType({}), "Prices of the model's tokens, input/output per "
        "million tokens in your currency: 0.15/0.60 for every model, or per model gpt-4o-mini=0.15/0.60,"
        "llama3.1:8b=0/0 (a mapping in YAML; a judge-model is priced by its name too); every report then "
        "gives the cost beside the tokens, the dry run estimates it, and max-cost can bound it; default "
        "none.", metavar="IN/OUT|MODEL=IN/OUT,..."),
    opt("max-cost", float_parser(0.0, None, open_low=True), None, "Most one gated test may cost on each "
        "model, at its price (needs price; the judge's calls count, at the judge model's price): its users "
        "are cut to the number that fits (said before the run), at the tokens a call took last time (the "
        "pace the cache keeps) or, before any run, at the most a call can take (num-ctx prompt tokens, "
        "num-predict completion tokens); default no limit.", metavar="AMOUNT"),
    opt("batch", parse_bool, False, "Send the explanation calls the response cache cannot answer as one "
        "provider batch (the OpenAI-compatible /v1/files + /v1/batches flow; backend openai), wait for it "
        "with progress until it ends or max-minutes runs out — a rerun picks a pending batch up — and price "
        f"the models' calls at the batch price ({BATCH_PRICE:g} of price, OpenAI's Batch API discount).",
        metavar=None, flag=True),
    opt("shard", parse_shard, None, "Measure one shard of the plan's users, I of N (a CI matrix job each): "
        "the plan is the whole gate's in every shard, a user's calls all fall in one shard, and the items "
        "pass as measured; `robustexplain merge` of the N JSON reports decides every gate as one run "
        "would. Default: the whole run.", metavar="I/N"),
    enum_opt("noise-floor", TRISTATE, "auto", "Measure the model's own noise (same history, resampled); "
             "'auto' does it when temperature > 0.", marker=True),
    enum_opt("guard", GUARD_POLICIES, "fail", "Cross-user control: explain each item once more for another "
             "user; 'fail' fails a gate whose explanations barely depend on the user's history "
             "(INSENSITIVE), 'warn' passes it with a warning, 'off' skips the control (one call per case).",
             marker=True),
    # Here the checks' own settings (Check.options): the guard's four, the attacks', grounding's, the
    # flip's, the judge's and polarity's, in the registry's order.
    *CHECK_OPTIONS,
    opt("judge-model", parse_judge_models, None, "Opt-in faithfulness judge: this model reads each "
        "original explanation beside the history the explainer saw and the item, and answers faithful or "
        "not with a one-sentence rationale (and the same facts with the history in reverse order, to check "
        "the judge itself); several, comma-separated, each judge every case, the majority decides (a tie is "
        "not faithful) and their agreement (Cohen's or Fleiss' kappa) is reported; reported beside ρ and "
        "the guard; default off (the paper's protocol).", metavar="MODEL[,MODEL...]"),
    enum_opt("judge-backend", JUDGE_BACKENDS, "auto", "Backend of the judge model ('auto': the run's backend "
             "when it is a language model's, else ollama)."),
    opt("judge-host", parse_host, None, "Base URL of the judge's server; default the run's first host "
        "when the judge uses the run's backend, else that backend's default.", metavar="URL"),
    opt("judge-criteria", parse_path, None, "A text file of your domain's criteria for the faithfulness "
        "judge (e.g. 'A reason about price is unsupported unless the history shows price-driven "
        "choices'), one per line: placed into the judge's prompt as a fenced fifth step, inside its "
        "reject-by-default structure and before its answer's shape, which the file cannot change; default "
        "none.",
        metavar="FILE", path="file"),
    opt("judge-labels", parse_path, None, "People's verdicts on some cases, to check the judge against: a "
        "CSV (user_id,item_id,faithful), JSON, YAML or JSONL file; the reports give the judge's agreement "
        "with them (agreement and Cohen's kappa with bounds, the confusion table); default none.",
        metavar="FILE", path="file"),
    enum_opt("judge", JUDGE_SCOPES, "originals", "What the judge reads: the 'originals' (two calls per "
             "case), or 'all' explanations — perturbed ones and controls too — for the drop in faithful rate "
             "under each perturbation kind."),
    opt("check-limits", parse_check_limits, MappingProxyType({}), "Gate: the limit of each check that "
        "declares one — your own (pytest_robustexplain_register_checks) — by name, between 0 and 1: for a "
        "predicate check the largest share of explanations it may flag, e.g. no_price=0.05 (a mapping in "
        "YAML and the marker); default: the limit each was registered or declared with.",
        metavar="CHECK=X,...", marker=True),
    opt("baseline", parse_path, None, "Compare against this saved baseline (JSON report): for rho and "
        "each metric, a one-sided non-inferiority test on matched pairs (per-user means, at alpha); the "
        "item fails unless every drop is shown to be smaller than max-regression.", metavar="FILE",
        path="file", doors=("pytest",)),
    opt("save-baseline", parse_path, None, "Save this run as a baseline to this file.", metavar="FILE",
        path="output", doors=("pytest",)),
    opt("max-regression", float_parser(0.0, 1.0), 0.02, "Largest allowed drop in ρ against the "
        "baseline; default 0.02.", metavar="X", doors=("pytest",)),
    opt("prompt", parse_path, None, "Prompt template file with {history}, {item} and {features} "
        "placeholders; default: the paper's prompt.", metavar="FILE", path="file"),
    enum_opt("progress", TRISTATE, "auto", "Progress line while the sweep runs ('auto': only on a terminal).",
             ),
    opt("config", parse_path, None, f"Settings file (YAML); default ./{YAML_NAME} in the rootdir if it "
        "exists.", metavar="FILE", path="file"),
)

BY_FIELD: Mapping[str, OptionSpec] = MappingProxyType({spec.field: spec for spec in OPTIONS})
if len(BY_FIELD) != len(OPTIONS):  # pragma: no cover - a check declared a setting the table has already
    raise TypeError("a setting is declared twice: "
                    f"{sorted(f for f in BY_FIELD if [s.field for s in OPTIONS].count(f) > 1)}")


def option(name: str) -> OptionSpec:
    """The spec of an option by dashed or underscored name (``min-combined`` or ``min_combined``)."""
    try:
        return BY_FIELD[name.replace("-", "_")]
    except KeyError:
        raise KeyError(f"unknown robustexplain option {name!r}") from None


def register_options(parser: pytest.Parser) -> None:
    """Add every ``--robustexplain-*`` option (default None: "not given") and every ini key."""
    group = parser.getgroup("robustexplain", "robustness of LLM recommendation explanations")
    for spec in OPTIONS:
        if spec.flag:
            group.addoption(spec.cli, action="store_true", dest=spec.dest, default=None, help=spec.help)
        else:
            group.addoption(spec.cli, action="store", dest=spec.dest, default=None, metavar=spec.metavar,
                            help=spec.help)
        parser.addini(spec.ini, help=spec.help, type="string", default=None)
