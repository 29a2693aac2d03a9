#!/usr/bin/env bash
# The Action's gate: pytest on the robustness tests with the Action's inputs as options. Every input arrives
# in the environment (never spliced into the script); EXTRA_ARGS is split as a shell would split it — quoted
# arguments stay whole, nothing is globbed — by split-args.py.
#   env: MODEL TESTS GUARD MIN_COMBINED MIN_METRIC HOST BASELINE MAX_REGRESSION EXTRA_ARGS EVENT REF_NAME
#        DEFAULT_BRANCH SHARD (optional: I/N, one shard of the gate; a merge job decides, docs/ci.md)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

args=(--robustexplain-model="$MODEL" --robustexplain-require-model --robustexplain-guard="$GUARD"
      --robustexplain-cache-dir=.robustexplain-cache
      --robustexplain-json=robustness.json --robustexplain-html=robustness.html)
if [ -n "${MIN_COMBINED:-}" ]; then args+=(--robustexplain-min-combined="$MIN_COMBINED"); fi
if [ -n "${MIN_METRIC:-}" ]; then args+=(--robustexplain-min-metric="$MIN_METRIC"); fi
if [ -n "${HOST:-}" ]; then args+=(--robustexplain-host="$HOST"); fi
if [ "$BASELINE" = "true" ] && [ "$EVENT" = "pull_request" ] && [ -f robustexplain-baseline/robustness.json ]; then
  args+=(--robustexplain-baseline=robustexplain-baseline/robustness.json
         --robustexplain-max-regression="$MAX_REGRESSION")
fi
if [ -n "${SHARD:-}" ]; then args+=(--robustexplain-shard="$SHARD"); fi
# A shard's report is a part of the gate, never a baseline: the merge job saves one.
if [ -z "${SHARD:-}" ] && [ "$BASELINE" = "true" ] && [ "$EVENT" != "pull_request" ] && [ "$REF_NAME" = "$DEFAULT_BRANCH" ]; then
  args+=(--robustexplain-save-baseline=robustexplain-baseline/robustness.json)
fi
extra=()
if [ -n "${EXTRA_ARGS:-}" ]; then
  words=$(mktemp)
  python "$here/split-args.py" "$EXTRA_ARGS" > "$words"  # an unclosed quote stops the step here, saying so
  mapfile -d '' -t extra < "$words"
  rm -f "$words"
fi
if [ -n "${GATE_DRY_RUN:-}" ]; then  # the tests print the command instead of running it
  printf '%s\n' python -m pytest "$TESTS" "${args[@]}" "${extra[@]}"
  exit 0
fi
exec python -m pytest "$TESTS" "${args[@]}" "${extra[@]}"
