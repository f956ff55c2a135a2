#!/usr/bin/env bash
# SentencePiece models through load_tokenizer() against Debian's spm_encode:
# two small models trained here with spm_train on real text (the licences of
# /usr/share/common-licenses), a unigram model with the default NFKC
# normalisation and a BPE model with the identity rule and byte fallback;
# tokenizer_test's SentencePiece case asserts our ids equal
# `spm_encode --output_format=id` line by line on held-out text (fortunes),
# and that decoding round trips (exactly, for the second model).
# Usage: sentencepiece_reference_test.sh TOKENIZER_TEST WORK_DIR
set -euo pipefail
tokenizer_test=$1 work=$2
for p in spm_train spm_encode; do
  command -v $p >/dev/null || { echo "FAIL: $p is missing: run scripts/setup.sh (Debian's sentencepiece)"; exit 1; }
done
rm -rf "$work" && mkdir -p "$work"
cat /usr/share/common-licenses/{Apache-2.0,Artistic,GPL-3,LGPL-3,MPL-2.0,GFDL-1.3,CC0-1.0} > "$work/train.txt"
# Held-out lines, non-ASCII included; spm_encode reads one sentence a line.
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' | sort | xargs cat > "$work/fortunes.txt"
{ head -n 3000 "$work/fortunes.txt"; grep -P '[^\x00-\x7F]' "$work/fortunes.txt" | head -n 1000; } > "$work/lines.txt"
grep -qP '[^\x00-\x7F]' "$work/lines.txt" || { echo "FAIL: the held-out lines have no non-ASCII line"; exit 1; }

fail=0
run_model() {  # name, exact round trip (0/1), spm_train flags...
  local name=$1 exact=$2
  shift 2
  spm_train --input="$work/train.txt" --model_prefix="$work/$name" --vocab_size=1000 "$@" \
    > "$work/$name.train.log" 2>&1 || { cat "$work/$name.train.log"; echo "FAIL: spm_train $name"; exit 1; }
  spm_encode --model="$work/$name.model" --output_format=id < "$work/lines.txt" > "$work/$name.ids"
  echo "model $name: $(wc -l < "$work/lines.txt") lines"
  local exact_env=()
  [ "$exact" = 1 ] && exact_env=(HT_SPM_EXACT=1)
  env "${exact_env[@]}" HT_SPM_MODEL="$work/$name.model" HT_SPM_LINES="$work/lines.txt" HT_SPM_IDS="$work/$name.ids" \
    "$tokenizer_test" --gtest_filter='SentencePiece.*' || fail=1
}
run_model unigram 0 --model_type=unigram
run_model bpe_bytes 1 --model_type=bpe --byte_fallback=true --normalization_rule_name=identity \
  --remove_extra_whitespaces=false --character_coverage=1.0
exit $fail
