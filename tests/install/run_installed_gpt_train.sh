#!/usr/bin/env bash
# The installed gpt_train starts from its install prefix alone (its RUNPATH
# finds lib/libhypertrain beside bin/, not the build tree's) and trains: two
# steps of a one-block model on a small text. The prefix is the one
# build_custom_program.sh installed (the custom_program_built fixture).
#
#   run_installed_gpt_train.sh PREFIX WORK_DIR
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 PREFIX WORK_DIR" >&2
  exit 2
fi
prefix=$1 work=$2
exe=$prefix/bin/gpt_train
fail() { echo "FAIL: $*"; exit 1; }

[ -x "$exe" ] || fail "$exe is not installed"
rm -rf "$work"
mkdir -p "$work"
for i in $(seq 100); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"

# Only what the binary itself records may find the library.
unset LD_LIBRARY_PATH
lib=$(ldd "$exe" | awk '$1 ~ /^libhypertrain\.so/ { print $3 }')
[ -n "$lib" ] && [ "$lib" != "not" ] || { ldd "$exe"; fail "$exe does not find libhypertrain from its RUNPATH"; }
case "$(realpath "$lib")" in
  "$(realpath "$prefix")"/*) ;;
  *) fail "$exe loads $lib, not the installed library under $prefix" ;;
esac

"$exe" --text "$work/text.txt" --run-dir "$work/run" --layers 1 --heads 2 --embd 16 --context 16 \
  --seq-len 8 --micro-batch 2 --steps 2 --sample-tokens 0 > "$work/out.txt" 2>&1 \
  || { cat "$work/out.txt"; fail "the installed gpt_train did not run"; }
grep -q "^step 2/2 | loss" "$work/out.txt" || { cat "$work/out.txt"; fail "no progress line for step 2"; }
[ "$(grep -c '"type":"step"' "$work/run/metrics.jsonl")" = 2 ] || fail "metrics.jsonl lacks 2 step lines"
echo "installed gpt_train ran from $prefix (libhypertrain: $lib)"
