#!/usr/bin/env bash
# `ht-data shards` from the command line: a set written with the byte
# tokenizer and --eot, its summary line and index.json, llm.c's header on
# every shard, the same bytes for 1 and 3 threads, JSON Lines, --overwrite;
# the refusals with their messages and exit statuses (1: a bad input or
# directory, 2: a usage error).
# Usage: ht_data_shards_test.sh HT_DATA WORK_DIR
set -euo pipefail
ht_data=$1 work=$2
rm -rf "$work" && mkdir -p "$work/in/sub"
fail() { echo "FAIL: $*"; exit 1; }

for i in $(seq 1 30); do printf 'document %d: the quick brown fox\njumps over the lazy dog %d\n' "$i" "$i" > "$work/in/doc$(printf %02d "$i").txt"; done
printf 'nested\n' > "$work/in/sub/nested.txt"

"$ht_data" shards --tokenizer bytes --eot 0 --out "$work/one" --threads 1 --shard-tokens 500 --val-docs 2 \
  "$work/in" > "$work/one.txt"
"$ht_data" shards --tokenizer bytes --eot 0 --out "$work/three" --threads 3 --shard-tokens 500 --val-docs 2 \
  "$work/in" > "$work/three.txt"
cat "$work/three.txt"
summary=$(tail -1 "$work/three.txt")
grep -Eq "^shards [0-9]+ \(train [0-9]+, val 1\) in $work/three \| documents 31 \(val 2\) \| tokens [0-9]+ \(val [0-9]+\) \| uint16 llmc \| .* MB/s \| threads 3$" <<<"$summary" \
  || fail "summary line: $summary"
grep -q '^# wrote train_000000.bin: 500 tokens$' "$work/three.txt" || fail "no line for the first shard"
diff -r "$work/one" "$work/three" > /dev/null || fail "1 and 3 threads wrote different bytes"
text_bytes=$(cat "$work"/in/*.txt "$work"/in/sub/*.txt | wc -c)
tokens=$(grep -o '"tokens": [0-9]*' "$work/one/index.json" | head -1)  # the set's own count sorts before its splits'
[ "$tokens" = "\"tokens\": $((text_bytes + 31))" ] || fail "index.json says $tokens, want $((text_bytes + 31)) (bytes + one end of text a document)"
# llm.c's header: magic 20240520, version 1, the token count; the file is 1024 + 2 x count bytes.
for f in "$work"/one/*.bin; do
  read -r magic version count < <(od -An -t d4 -N 12 "$f")
  [ "$magic" = 20240520 ] && [ "$version" = 1 ] || fail "$f: magic $magic version $version"
  [ "$(stat -c %s "$f")" = $((1024 + 2 * count)) ] || fail "$f: $(stat -c %s "$f") bytes for $count tokens"
done
[ ! -e "$work/.one.partial" ] || fail "the staging directory was left behind"

# JSON Lines, hypertrain's format; an existing set is replaced only with --overwrite.
printf '{"text": "first"}\n\n{"text": "second", "id": 2}\n' > "$work/docs.jsonl"
"$ht_data" shards --tokenizer bytes --no-eot --jsonl --format hypertrain --out "$work/one" --overwrite \
  "$work/docs.jsonl" | tail -1 | grep -q "documents 2 (val 0) | tokens 11 (val 0) | uint16 hypertrain" \
  || fail "JSON Lines into hypertrain shards"
[ "$(head -c 8 "$work/one/train_000000.bin")" = HTTOKENS ] || fail "not a hypertrain shard"
[ "$(tail -c 22 "$work/one/train_000000.bin" | tr -d '\0')" = firstsecond ] || fail "the JSON Lines' texts"

expect() {  # expect STATUS PATTERN ARGS...: must exit with STATUS and print PATTERN
  local status=$1 pattern=$2; shift 2
  local rc=0
  "$ht_data" shards "$@" > "$work/err.txt" 2>&1 || rc=$?
  [ "$rc" = "$status" ] || { cat "$work/err.txt"; fail "exit $rc, want $status: $*"; }
  grep -q -- "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "message lacks '$pattern': $*"; }
}
expect 1 "text input '$work/missing.txt' does not exist" --tokenizer bytes --eot 0 --out "$work/x" "$work/missing.txt"
expect 1 "has no end-of-text token.*--eot ID.*--no-eot" --tokenizer bytes --out "$work/x" "$work/in"
expect 1 "holds a shard set already: pass --overwrite" --tokenizer bytes --eot 0 --out "$work/three" "$work/in"
expect 1 "holds files but no shard set" --tokenizer bytes --eot 0 --out "$work/in" "$work/in"
expect 1 "cannot create" --tokenizer bytes --eot 0 --out /proc/ht_data_no/out "$work/in"
expect 1 "tokenizer '$work/nothing' does not exist" --tokenizer "$work/nothing" --out "$work/x" "$work/in"
expect 1 "leaves none of the 31 for training" --tokenizer bytes --eot 0 --val-docs 31 --out "$work/x" "$work/in"
expect 1 "outside the tokenizer's vocabulary \[0, 256)" --tokenizer bytes --eot 256 --out "$work/x" "$work/in"
expect 2 "excludes" --tokenizer bytes --eot 0 --no-eot --out "$work/x" "$work/in"
expect 2 "val-docs.*excludes\|excludes.*val-docs" --tokenizer bytes --eot 0 --val-docs 2 --val-fraction 0.1 --out "$work/x" "$work/in"
expect 2 "val-docs" --tokenizer bytes --eot 0 --val-docs -1 --out "$work/x" "$work/in"
expect 2 "format" --tokenizer bytes --eot 0 --format parquet --out "$work/x" "$work/in"
expect 2 "out is required" --tokenizer bytes --eot 0 "$work/in"
[ ! -e "$work/x" ] && [ ! -e "$work/.x.partial" ] || fail "a refused run left $work/x or its staging directory"
echo "ht-data shards: all checks passed"
