#!/usr/bin/env bash
# ht-ckpt against real checkpoints of gpt_train: one process (steps 3 and 6)
# and 4 ranks under mpirun with tp 2 x dp 2 and ZeRO-3 (pieces sharded within
# tensor-parallel parts). Each case is its own ctest entry; "setup" trains
# once and the others read its checkpoints (copying them before changing
# anything); "export" also trains a model with a padded vocabulary.
#
# Usage: ckpt_tool_test.sh HT_CKPT GPT_TRAIN MPIEXEC PYTHON WORK_DIR CASE
#   CASE: setup | list | inspect | verify | corrupt | export | usage
#   PYTHON: an interpreter with h5py and numpy (reads the rank files and the export).
set -euo pipefail
tool="$1"
exe="$2"
mpiexec="$3"
python="$4"
work="$5"
case="$6"
single="$work/single/ckpt"
sharded="$work/sharded/ckpt"

fail() { echo "FAIL ($case): $*"; exit 1; }
# run EXPECTED_STATUS OUT ARGS...: ht-ckpt ARGS with stdout+stderr into OUT; fails unless it exits EXPECTED_STATUS.
run() {
  local want="$1" out="$2" status=0
  shift 2
  "$tool" "$@" > "$out" 2>&1 || status=$?
  [ "$status" = "$want" ] || { cat "$out"; fail "ht-ckpt $* exited $status, expected $want"; }
}
expect() { grep -q -- "$2" "$1" || { cat "$1"; fail "no '$2' in the output"; }; }

case "$case" in
setup)
  rm -rf "$work"
  mkdir -p "$work"
  for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$work/text.txt"
  tiny=(--layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2 --steps 6 --ckpt-every 3
        --eval-every 0 --eval-samples 4 --sample-tokens 0)
  "$exe" --text "$work/text.txt" --run-dir "$work/single" --ckpt-dir "$single" "${tiny[@]}" > "$work/single.out" 2>&1 ||
    { cat "$work/single.out"; fail "gpt_train (one process) failed"; }
  "$mpiexec" -np 4 --oversubscribe --bind-to none "$exe" --data "$work/single/tokens.h5" --run-dir "$work/sharded" \
    --ckpt-dir "$sharded" --tp 2 --zero 3 "${tiny[@]}" > "$work/sharded.out" 2>&1 ||
    { cat "$work/sharded.out"; fail "gpt_train under mpirun (tp 2, ZeRO-3) failed"; }
  # An interrupted save, as a crash during a save leaves it.
  mkdir -p "$single/step_00000009.tmp"
  echo "setup: checkpoints in $single and $sharded"
  ;;

list)
  run 0 "$work/list.out" list "$single"
  cat "$work/list.out"
  expect "$work/list.out" "2 committed checkpoint"
  [ "$(grep -cE '^ +[36] +pp1 x dp1 x tp1 +1 +1 +[0-9]+ +GPT L2 H2 C32 V256 T32$' "$work/list.out")" = 2 ] ||
    fail "expected rows for steps 3 and 6 (layout, world 1, 1 file, bytes, model)"
  awk '/^ +3 /{a=NR} /^ +6 /{b=NR} END{exit !(a && b && a < b)}' "$work/list.out" || fail "step 3 is not listed before step 6"
  expect "$work/list.out" "1 interrupted save.*step_00000009.tmp"
  run 0 "$work/list4.out" list "$sharded"
  expect "$work/list4.out" "pp1 x dp2 x tp2  *4  *4 "
  if grep -q "interrupted" "$work/list4.out"; then fail "leftovers reported where there are none"; fi
  ;;

inspect)
  run 0 "$work/inspect.out" inspect "$single"
  cat "$work/inspect.out"
  expect "$work/inspect.out" "^# checkpoint .*step_00000006$"
  expect "$work/inspect.out" "^step  *6$"
  expect "$work/inspect.out" "^optimizer steps  *6$"
  expect "$work/inspect.out" '^consumed samples  *[1-9][0-9]*$'
  expect "$work/inspect.out" '^client state  *{'
  expect "$work/inspect.out" "^loss scaler  *scale 1, good steps"
  expect "$work/inspect.out" "^layout  *pp1 x dp1 x tp1"
  expect "$work/inspect.out" "^library  *hypertrain [0-9]"
  expect "$work/inspect.out" "^wte  *master,exp_avg,exp_avg_sq  *256x32  *-  *1  *98304$"
  run 0 "$work/inspect3.out" inspect "$single" --step 3
  expect "$work/inspect3.out" "^step  *3$"
  run 0 "$work/inspect4.out" inspect "$sharded/step_00000006"
  expect "$work/inspect4.out" "^layout  *pp1 x dp2 x tp2 (world 4"
  # The packed QKV weight: split on dimension 0 over tp 2, in 3 stacked pieces.
  expect "$work/inspect4.out" "^h.0.attn.c_attn.weight  *master,exp_avg,exp_avg_sq  *96x32  *dim0/2 x3 "
  expect "$work/inspect4.out" "^# 28 tensors, 34688 values per kind"
  ;;

verify)
  run 0 "$work/verify.out" verify "$single" --all
  cat "$work/verify.out"
  [ "$(grep -c '^OK ' "$work/verify.out")" = 2 ] || fail "expected two OK lines"
  expect "$work/verify.out" "^# 2 of 2 committed checkpoint(s) good"
  run 0 "$work/verify4.out" verify "$sharded/step_00000003"
  cat "$work/verify4.out"
  expect "$work/verify4.out" "^OK .*step_00000003: step 3, 4 rank file(s), [0-9]* pieces"
  run 0 "$work/verify4s.out" verify "$sharded" --step 6
  expect "$work/verify4s.out" "^OK .*step_00000006"
  ;;

corrupt)
  rm -rf "$work/corrupt"
  mkdir -p "$work/corrupt"
  cp -r "$single/step_00000006" "$work/corrupt/"
  bad="$work/corrupt/step_00000006"
  # One flipped byte in the middle of wte's master values (found through HDF5).
  "$python" "$(dirname "$0")/flip_dataset_byte.py" "$bad/rank_00000.h5" "wte|master|0|0" ||
    fail "could not flip a byte (does $python have h5py?)"
  run 1 "$work/corrupt.out" verify "$bad"
  cat "$work/corrupt.out"
  expect "$work/corrupt.out" "^CORRUPT .*step_00000006: 1 problem"
  expect "$work/corrupt.out" "rank_00000.h5': dataset 'wte|master|0|0' fails its checksum"
  # An export of it fails and leaves nothing behind.
  run 1 "$work/corrupt_export.out" export "$bad" "$work/corrupt/out.h5"
  expect "$work/corrupt_export.out" "wte|master|0|0"
  [ -z "$(ls "$work/corrupt" | grep '\.h5')" ] || fail "a failed export left a file: $(ls "$work/corrupt")"
  # So does one to Hugging Face's format: no model directory, no staging one.
  run 1 "$work/corrupt_hf.out" export --format hf "$bad" "$work/corrupt/hf"
  expect "$work/corrupt_hf.out" "wte|master|0|0"
  [ ! -e "$work/corrupt/hf" ] && [ ! -e "$work/corrupt/.hf.partial" ] ||
    fail "a failed Hugging Face export left a directory: $(ls -a "$work/corrupt")"
  # A checkpoint of a model Hugging Face's format does not hold is refused by name.
  cp -r "$single/step_00000006" "$work/corrupt/other_model"
  "$python" - "$work/corrupt/other_model/manifest.json" << 'EOF'
import json
import sys

m = json.load(open(sys.argv[1]))
m["run"]["model"] = "an encoder of the user's own"
json.dump(m, open(sys.argv[1], "w"), indent=1)
EOF
  run 2 "$work/other_hf.out" export --format hf "$work/corrupt/other_model" "$work/corrupt/hf"
  expect "$work/other_hf.out" "which --format hf cannot write.*--format h5"
  [ ! -e "$work/corrupt/hf" ] || fail "a refused Hugging Face export wrote $work/corrupt/hf"

  # A sharded checkpoint with a rank file gone and a piece dropped from the manifest.
  cp -r "$sharded/step_00000006" "$work/corrupt/sharded"
  bad="$work/corrupt/sharded"
  rm "$bad/rank_00003.h5"
  "$python" - "$bad/manifest.json" << 'EOF'
import json
import sys

path = sys.argv[1]
m = json.load(open(path))
m["pieces"] = [p for p in m["pieces"] if p["dataset"] != "wte|exp_avg|1|0"]  # in rank_00001.h5
json.dump(m, open(path, "w"), indent=1)
EOF
  run 1 "$work/corrupt4.out" verify "$bad"
  cat "$work/corrupt4.out"
  expect "$work/corrupt4.out" "rank file '.*rank_00003.h5' (rank 3) is missing"
  expect "$work/corrupt4.out" "wte (exp_avg), tp part 1: elements \[0, [0-9]*) of [0-9]* are in no piece"
  # The manifest no longer lists a dataset that rank_00002.h5 (or another rank) holds.
  expect "$work/corrupt4.out" "dataset 'wte|exp_avg|1|0' is not listed in the manifest"
  ;;

export)
  run 0 "$work/export.out" export "$single" "$work/single.h5"
  cat "$work/export.out"
  run 0 "$work/export4.out" export "$sharded" "$work/sharded.h5" --kinds master,exp_avg,exp_avg_sq
  cat "$work/export4.out"
  [ -z "$(ls -a "$work" | grep '\.tmp\.')" ] || fail "export left a temporary file: $(ls -a "$work")"
  "$python" - "$single/step_00000006" "$work/single.h5" "$sharded/step_00000006" "$work/sharded.h5" << 'EOF' ||
import json
import sys

import h5py
import numpy as np

single_dir, single_h5, sharded_dir, sharded_h5 = sys.argv[1:5]


def check(cond, msg):
    if not cond:
        sys.exit(f"FAIL (export): {msg}")


def assemble(step_dir, pieces):
    """The full tensor from its pieces, independently of the library: fill each
    tp part's flat range, then interleave the parts' chunks on the split dim."""
    p0 = pieces[0]
    shape, dim, tp, parts = p0["global_shape"], p0["tp_split_dim"], max(p0["tp_size"], 1), p0["tp_parts"]
    split = dim >= 0 and tp > 1
    part_shape = list(shape)
    if split:
        part_shape[dim] //= tp
    flats = [np.full(int(np.prod(part_shape)), np.nan, np.float32) for _ in range(tp)]
    for p in pieces:
        with h5py.File(f"{step_dir}/{p['file']}", "r") as f:
            flats[p["tp_rank"]][p["begin"]:p["end"]] = f[p["dataset"]][()]
    if not split:
        return flats[0].reshape(shape)
    chunk = shape[dim] // (parts * tp)
    out = np.empty(shape, np.float32)
    for r in range(tp):
        part = flats[r].reshape(part_shape)
        for j in range(parts):
            src = np.take(part, range(j * chunk, (j + 1) * chunk), axis=dim)
            idx = [slice(None)] * len(shape)
            idx[dim] = slice((j * tp + r) * chunk, (j * tp + r + 1) * chunk)
            out[tuple(idx)] = src
    return out


def compare(step_dir, h5, kinds, exact):
    m = json.load(open(f"{step_dir}/manifest.json"))
    groups = {}
    for p in m["pieces"]:
        groups.setdefault((p["tensor"], p["kind"]), []).append(p)
    with h5py.File(h5, "r") as f:
        check(int(f.attrs["step"]) == m["run"]["step"], f"step attribute {f.attrs['step']}")
        check(f.attrs["model"] == m["run"]["model"], f"model attribute {f.attrs['model']!r}")
        want = {t if k == "master" else f"{t}.{k}" for (t, k) in groups if k in kinds}
        check(set(f.keys()) == want, f"datasets {sorted(set(f.keys()) ^ want)} differ from the manifest's")
        for (t, k), pieces in groups.items():
            if k not in kinds:
                continue
            ds = f[t if k == "master" else f"{t}.{k}"]
            check(list(ds.shape) == pieces[0]["global_shape"], f"{ds.name} is {ds.shape}")
            check(ds.dtype == np.float32 and ds.attrs["kind"] == k, f"{ds.name}: {ds.dtype}, kind {ds.attrs['kind']!r}")
            values = ds[()]
            check(np.all(np.isfinite(values)), f"{ds.name} has non-finite values")
            if exact:
                check(np.array_equal(values, assemble(step_dir, pieces)), f"{ds.name} differs from its pieces")
    return len(want)


n1 = compare(single_dir, single_h5, {"master"}, exact=True)
with h5py.File(single_h5, "r") as f, h5py.File(f"{single_dir}/rank_00000.h5", "r") as r:
    check(np.array_equal(f["wte"][()].ravel(), r["wte|master|0|0"][()]), "wte differs from the rank file's master piece")
    check(f["wte"].shape == (256, 32), f"wte is {f['wte'].shape}")
n4 = compare(sharded_dir, sharded_h5, {"master", "exp_avg", "exp_avg_sq"}, exact=True)
print(f"export: {n1} datasets of the one-process run and {n4} of the tp2 x ZeRO-3 run match their pieces")
EOF
    fail "the exported files do not match the checkpoints"
  # A padded vocabulary (256 ids in 384 rows): the checkpoint stores the 384
  # rows and records 256 as real, the export holds the 256 real rows only.
  "$exe" --text "$work/text.txt" --run-dir "$work/padded" --ckpt-dir "$work/padded/ckpt" --vocab-multiple 384 \
    --layers 2 --heads 2 --embd 32 --context 32 --seq-len 16 --micro-batch 2 --steps 2 --eval-every 0 \
    --eval-samples 4 --sample-tokens 0 > "$work/padded.out" 2>&1 || { cat "$work/padded.out"; fail "gpt_train (padded) failed"; }
  run 0 "$work/export_padded.out" export "$work/padded/ckpt" "$work/padded.h5"
  run 0 "$work/list_padded.out" list "$work/padded/ckpt"
  expect "$work/list_padded.out" "GPT L2 H2 C32 V256 Vp384 T32"
  "$python" - "$work/padded/ckpt/step_00000002" "$work/padded.h5" << 'EOF' || fail "the padded export is wrong"
import glob
import json
import sys

import h5py
import numpy as np

step_dir, out = sys.argv[1:3]
manifest = json.load(open(f"{step_dir}/manifest.json"))
wte = [p for p in manifest["pieces"] if p["tensor"] == "wte" and p["kind"] == "master"]
assert wte and all(p["global_shape"] == [384, 32] and p["real_rows"] == 256 for p in wte), wte
assert all("real_rows" not in p for p in manifest["pieces"] if p["tensor"] != "wte"), "real_rows on another tensor"
with h5py.File(glob.glob(f"{step_dir}/*.h5")[0], "r") as r:
    stored = r["wte|master|0|0"][()].reshape(384, 32)
with h5py.File(out, "r") as f:
    assert f["wte"].shape == (256, 32), f["wte"].shape
    assert f["wte"].attrs["padded_rows"] == 384
    assert np.array_equal(f["wte"][()], stored[:256]), "the exported rows are not the stored real rows"
assert not stored[256:].any(), "the padding rows moved off zero"
print("export: padded wte stored as (384, 32), exported as its 256 real rows; the padding stayed zero")
EOF
  ;;

usage)
  run 2 "$work/u1.out" verify "$work/no_such_dir"
  expect "$work/u1.out" "is not a directory"
  run 2 "$work/u2.out" verify "$single/step_00000006" --all
  expect "$work/u2.out" "is a step directory"
  run 2 "$work/u3.out" inspect "$single" --step 4
  expect "$work/u3.out" "no committed checkpoint of step 4; it holds steps 3, 6"
  run 2 "$work/u4.out" export "$single" "$work/x.h5" --kinds master,momentum
  expect "$work/u4.out" "holds no 'momentum' state"
  [ ! -e "$work/x.h5" ] || fail "a refused export wrote $work/x.h5"
  run 2 "$work/u5.out" frobnicate
  run 2 "$work/u6.out" list
  mkdir -p "$work/empty"
  run 2 "$work/u7.out" verify "$work/empty"
  expect "$work/u7.out" "holds no committed checkpoint"
  run 0 "$work/u8.out" --help
  expect "$work/u8.out" "verify"
  ;;

*)
  fail "unknown case '$case'"
  ;;
esac
echo "ht-ckpt $case: passed"
