#!/usr/bin/env bash
# Ollama on a GitHub runner, for the reusable Action (action.yml): which release asset fits this machine,
# download it with its checksum verified, start the server, pull a model.
#
#   ollama.sh asset VERSION MACHINE   the release asset name (MACHINE as `uname -m` prints it)
#   ollama.sh bin                     where the binary of $OLLAMA_VERSION lives (cached between runs)
#   ollama.sh install                 download, verify against the release's sha256sum.txt, unpack
#   ollama.sh start                   serve on 127.0.0.1:11434 and wait until it answers
#   ollama.sh pull MODEL              pull MODEL
#
# Linux assets are .tar.zst since 0.14.0 (.tgz before); amd64 and arm64 are published. Nothing is added to
# GITHUB_PATH: later steps call the binary by the path `bin` prints.
set -euo pipefail

release_base="${OLLAMA_RELEASE_BASE:-https://github.com/ollama/ollama/releases/download}"  # a mirror, or a test's server

arch_of() {
  case "$1" in
    x86_64 | amd64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) echo "ollama.sh: no Ollama release for machine '$1' (amd64 and arm64 are published)" >&2; return 1 ;;
  esac
}

# True when version $1 is at least $2 (dotted numbers; a leading v ignored).
at_least() {
  [ "$(printf '%s\n%s\n' "${2#v}" "${1#v}" | sort -V | head -n1)" = "${2#v}" ]
}

asset_of() {
  local version=$1 arch
  arch=$(arch_of "$2")
  if at_least "$version" 0.14.0; then
    echo "ollama-linux-${arch}.tar.zst"
  else
    echo "ollama-linux-${arch}.tgz"
  fi
}

bin_dir() {
  echo "$HOME/.cache/robustexplain-ollama/${OLLAMA_VERSION:?}-$(arch_of "$(uname -m)")"
}

install() {
  local dir asset tmp expected actual
  dir=$(bin_dir)
  if [ -x "$dir/bin/ollama" ]; then
    echo "Ollama $OLLAMA_VERSION already in $dir (restored from the cache)"
    return 0
  fi
  asset=$(asset_of "$OLLAMA_VERSION" "$(uname -m)")
  tmp=$(mktemp -d)
  curl -fsSL --retry 3 -o "$tmp/$asset" "$release_base/v$OLLAMA_VERSION/$asset"
  curl -fsSL --retry 3 -o "$tmp/sha256sum.txt" "$release_base/v$OLLAMA_VERSION/sha256sum.txt"
  expected=$(awk -v name="$asset" '$2 == name || $2 == "./" name { print $1 }' "$tmp/sha256sum.txt")
  actual=$(sha256sum "$tmp/$asset" | cut -d' ' -f1)
  if [ -z "$expected" ] || [ "$expected" != "$actual" ]; then
    echo "ollama.sh: $asset does not match the release's sha256sum.txt (expected '${expected:-none}', got $actual)" >&2
    return 1
  fi
  mkdir -p "$dir"
  case "$asset" in
    *.tar.zst)
      command -v zstd > /dev/null || { echo "ollama.sh: $asset needs zstd (apt-get install zstd)" >&2; return 1; }
      zstd -dc "$tmp/$asset" | tar -x -C "$dir" ;;
    *) tar -xzf "$tmp/$asset" -C "$dir" ;;
  esac
  rm -rf "$tmp"
  echo "Ollama $OLLAMA_VERSION ($asset, checksum verified) in $dir"
}

start() {
  local dir log
  dir=$(bin_dir)
  log="${RUNNER_TEMP:-/tmp}/ollama.log"
  nohup "$dir/bin/ollama" serve > "$log" 2>&1 &
  for _ in $(seq 1 60); do
    curl -fsS http://127.0.0.1:11434/api/version > /dev/null 2>&1 && return 0
    sleep 1
  done
  echo "Ollama did not start:" >&2
  cat "$log" >&2
  return 1
}

case "${1:-}" in
  asset) asset_of "$2" "$3" ;;
  bin) echo "$(bin_dir)/bin/ollama" ;;
  install) install ;;
  start) start ;;
  pull) "$(bin_dir)/bin/ollama" pull "$2" ;;
  *) echo "usage: ollama.sh asset VERSION MACHINE | bin | install | start | pull MODEL" >&2; exit 2 ;;
esac
