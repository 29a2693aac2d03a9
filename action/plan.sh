#!/usr/bin/env bash
# Names the Action's steps share, one per line as `name=value` for $GITHUB_OUTPUT: the runner's architecture,
# a slug of the model and the tests (artifact names, cache keys), and the cache keys' prefixes. Each prefix
# ends with a separator, so `qwen2.5` never restores the baseline of `qwen2.5-instruct`; the tests are part of
# the baseline's key, so two suites gating one model keep two baselines.
# A shard (SHARD=2/4, a matrix leg of one gate) keeps its replies and uploads its report under its own names.
#   env: MODEL, TESTS, RUNNER_ARCH (X64 / ARM64), OLLAMA_VERSION, RUN_ATTEMPT, JOB, SHARD (optional)
set -euo pipefail

slug() {  # letters, digits, dot, dash and underscore; anything else becomes "_" (artifact names forbid / : *)
  printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_'
}

key_part() {  # a cache key holds no comma, and no line break may reach $GITHUB_OUTPUT
  printf '%s' "$1" | tr ',\n\r' '+__'
}

case "${RUNNER_ARCH:-X64}" in
  X64) arch=amd64 ;;
  ARM64) arch=arm64 ;;
  *) echo "plan.sh: Ollama publishes no Linux build for runner architecture ${RUNNER_ARCH}" >&2; exit 1 ;;
esac
model=$(slug "${MODEL:?}")
tests=$(slug "${TESTS:?}")
model_key=$(key_part "$MODEL")
tests_key=$(key_part "$TESTS")
echo "arch=$arch"
echo "ollama-key=robustexplain-ollama|$(key_part "${OLLAMA_VERSION:?}")|$arch|$model_key"
echo "baseline-prefix=robustexplain-baseline|$model_key|$tests_key|"
shard=""
if [ -n "${SHARD:-}" ]; then shard="shard$(slug "$SHARD")"; fi
echo "responses-prefix=robustexplain-responses|$model_key|$tests_key|${shard:+$shard|}"
echo "artifact=robustness-${JOB:-job}-$model-$tests-${shard:+$shard-}${RUN_ATTEMPT:-1}"
