#!/usr/bin/python3
# A Llama trained by llama_train, exported with `ht-ckpt export`, runs in
# PyTorch: the consolidated HDF5 file (one dataset per tensor) loads into the
# Llama of llama_torch.py name for name and shape for shape, and PyTorch's
# greedy continuation of a prompt equals the one llama_train printed at the
# end of training (--temperature 0), which it sampled from the gathered full
# parameters, the final checkpoint's master weights. A greedy sample of a
# trained model hardly moves under small changes to the model (swapping gate
# and up in PyTorch changes the logits by 10% and no argmax), so the final
# validation loss llama_train wrote to metrics.jsonl must also equal
# PyTorch's on the same windows (the first --eval-samples consecutive
# windows of the validation split) within 1e-5 relative.
#
#   llama_torch_export_check.py LLAMA_TRAIN HT_CKPT WORKDIR [MPIEXEC NP --tp 2 ...]
#
# With MPIEXEC, llama_train runs under `MPIEXEC -np NP` with the remaining
# arguments added (a layout); the export then assembles tensor-parallel parts
# (the packed gate_up in its two parts) and ZeRO shards.
#
# Greedy sampling: at each step PyTorch's argmax over the last position's
# logits must be the byte llama_train chose, given the sequence so far
# (llama_train's own bytes are fed back, so every step is compared). A
# different choice passes only as a near-tie: PyTorch's logit of llama_train's
# byte within 1e-5 of its largest logit's magnitude (float32 rounding of two
# implementations); such steps are printed. The window is the last `context`
# tokens, positions from 0, as CausalLM::generate does.
import json
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:
    print(f"llama_torch_export_check: FAIL: cannot import {e.name} in {sys.executable}: {e}\n"
          "  run scripts/setup.sh, or point HT_TORCH_PYTHON at a python3 with torch, h5py and numpy",
          file=sys.stderr)
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch  # noqa: E402

TIE_TOL = 1e-5
LOSS_TOL = 1e-5
SEQ_LEN, MICRO_BATCH, EVAL_SAMPLES = 16, 8, 16
MODEL = dict(layers=2, heads=4, kv_heads=2, embd=32, ffn=48, context=32, vocab=256, rope_theta=10000.0)
STEPS, CKPT_EVERY = 60, 20  # enough to continue the prompt with words, not one repeated byte
PROMPT = "the quick"
SAMPLE_TOKENS = 40  # the prompt and these exceed the context: the window slides
HEADER = b"# sample (temperature 0.00):\n"


def fail(msg):
    print(f"llama_torch_export_check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, what):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.stdout.write(p.stdout.decode("utf-8", "replace"))
        fail(f"{what} exited {p.returncode}")
    return p.stdout


def printed_sample(out):
    """The bytes llama_train printed after the prompt: exactly SAMPLE_TOKENS
    bytes after the header and the prompt (a sampled byte may be a newline)."""
    at = out.find(HEADER)
    if at < 0:
        sys.stdout.write(out.decode("utf-8", "replace"))
        fail(f"llama_train printed no {HEADER!r}")
    text = out[at + len(HEADER):]
    prompt = PROMPT.encode()
    if not text.startswith(prompt):
        fail(f"the sample {text[:80]!r} does not start with the prompt {PROMPT!r}")
    sample = text[len(prompt):len(prompt) + SAMPLE_TOKENS]
    if len(sample) != SAMPLE_TOKENS or text[len(prompt) + SAMPLE_TOKENS:len(prompt) + SAMPLE_TOKENS + 1] != b"\n":
        fail(f"expected {SAMPLE_TOKENS} sampled bytes and a newline after the prompt, got {text[:120]!r} "
             "(a sampled NUL byte would cut printf's output short)")
    return list(sample)


def load_export(path):
    with h5py.File(path, "r") as f:
        step = int(f.attrs["step"])
        model_desc = f.attrs["model"]
        if isinstance(model_desc, bytes):
            model_desc = model_desc.decode()
        tensors = {}
        for name in f.keys():
            ds = f[name]
            kind = ds.attrs.get("kind", "master")
            if isinstance(kind, bytes):
                kind = kind.decode()
            if kind != "master":
                fail(f"dataset {name} holds {kind!r}; export was asked for master weights only")
            if ds.dtype != np.float32:
                fail(f"dataset {name} is {ds.dtype}, not float32")
            tensors[name] = ds[()]
    return step, model_desc, tensors


def check_val_loss(model, run_dir):
    """PyTorch's loss on the validation windows llama_train evaluated at the
    end equals the val_loss of its last eval line in metrics.jsonl."""
    evals = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "eval":
                evals.append(record)
    if not evals or evals[-1]["step"] != STEPS:
        fail(f"metrics.jsonl has no validation line for step {STEPS}: {evals[-1:]}")
    ht_loss = float(evals[-1]["val_loss"])
    with h5py.File(os.path.join(run_dir, "tokens.h5"), "r") as f:
        val = f["val"][()].astype(np.int64)
    windows = (len(val) - 1) // SEQ_LEN
    with torch.no_grad():
        # TokenWindows::sequential: validation sample i is the i-th consecutive window.
        starts = [(i % windows) * SEQ_LEN for i in range(EVAL_SAMPLES)]
        tokens = torch.tensor(np.stack([val[s:s + SEQ_LEN] for s in starts]))
        targets = torch.tensor(np.stack([val[s + 1:s + SEQ_LEN + 1] for s in starts]))
        torch_loss = float(model(tokens, targets))
    e = abs(ht_loss - torch_loss) / abs(torch_loss)
    print(f"final validation loss: llama_train {ht_loss:.8f}, PyTorch {torch_loss:.8f}, rel err {e:.2e}")
    if not e <= LOSS_TOL:
        fail(f"validation loss {ht_loss} vs PyTorch's {torch_loss} on the exported weights: rel err {e:.2e} > "
             f"{LOSS_TOL:g}")


def main():
    if len(sys.argv) < 4:
        print(f"usage: {sys.argv[0]} LLAMA_TRAIN HT_CKPT WORKDIR [MPIEXEC NP LAYOUT_ARGS...]", file=sys.stderr)
        return 2
    exe, tool, work = sys.argv[1:4]
    launcher, layout = [], []
    if len(sys.argv) > 4:
        if len(sys.argv) < 6:
            fail("MPIEXEC needs NP")
        launcher = [sys.argv[4], "-np", sys.argv[5], "--oversubscribe", "--bind-to", "none"]
        layout = sys.argv[6:]
    torch.set_num_threads(2)
    print(f"# torch {torch.__version__}, h5py {h5py.__version__}, python {sys.executable}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    text = os.path.join(work, "text.txt")
    with open(text, "w") as f:
        for i in range(300):
            f.write(f"the quick brown fox jumps over the lazy dog {i}\n")

    m = MODEL
    ckpt = os.path.join(work, "ckpt")
    out = run(launcher + [exe, "--text", text, "--run-dir", os.path.join(work, "run"), "--ckpt-dir", ckpt,
                          "--layers", str(m["layers"]), "--heads", str(m["heads"]), "--kv-heads", str(m["kv_heads"]),
                          "--embd", str(m["embd"]), "--ffn", str(m["ffn"]), "--context", str(m["context"]),
                          "--vocab", str(m["vocab"]), "--rope-theta", str(m["rope_theta"]),
                          "--seq-len", str(SEQ_LEN), "--micro-batch", str(MICRO_BATCH), "--steps", str(STEPS),
                          "--lr", "1e-2", "--warmup", "5", "--ckpt-every", str(CKPT_EVERY), "--eval-every", "0",
                          "--eval-samples", str(EVAL_SAMPLES), "--temperature", "0",
                          "--sample-tokens", str(SAMPLE_TOKENS), "--prompt", PROMPT] + layout, "llama_train")
    ht_sample = printed_sample(out)
    print(f"llama_train's greedy sample: {bytes(ht_sample)!r}")
    if len(set(ht_sample)) < 4:
        fail(f"the sample {bytes(ht_sample)!r} has fewer than 4 distinct bytes: too little training for the "
             "comparison to tell models apart")

    exported = os.path.join(work, "export.h5")
    sys.stdout.write(run([tool, "export", ckpt, exported], "ht-ckpt export").decode("utf-8", "replace"))
    step, model_desc, tensors = load_export(exported)
    print(f"export: step {step}, model {model_desc!r}, {len(tensors)} tensors")
    if step != STEPS:
        fail(f"the exported checkpoint is of step {step}, not the last step {STEPS}")
    if not model_desc.startswith("Llama "):
        fail(f"the checkpoint's model is {model_desc!r}, not a Llama")

    model = llama_torch.Llama(m["vocab"], m["context"], m["layers"], m["heads"], m["kv_heads"], m["embd"], m["ffn"],
                              theta=m["rope_theta"])
    try:
        model.load(tensors)
    except ValueError as e:
        fail(f"the export does not load into the PyTorch Llama: {e}")
    model.eval()

    check_val_loss(model, os.path.join(work, "run"))

    seq = [b for b in PROMPT.encode()]
    mismatches, ties = [], []
    with torch.no_grad():
        for i, chosen in enumerate(ht_sample):
            window = seq[-m["context"]:]
            logits = model.logits(torch.tensor([window], dtype=torch.long))[0, -1]
            best = int(torch.argmax(logits))
            if best != chosen:
                gap = float(logits[best] - logits[chosen])
                scale = float(logits.abs().max())
                line = (f"step {i}: PyTorch picks byte {best} ({bytes([best])!r}, logit {float(logits[best]):.6f}), "
                        f"llama_train {chosen} ({bytes([chosen])!r}, logit {float(logits[chosen]):.6f}), "
                        f"gap {gap:.2e} of max |logit| {scale:.3f}")
                (ties if gap <= TIE_TOL * scale else mismatches).append(line)
            seq.append(chosen)
    for line in ties:
        print(f"near-tie (accepted): {line}")
    if mismatches:
        for line in mismatches:
            print(f"  {line}", file=sys.stderr)
        fail(f"PyTorch's greedy choice differs from llama_train's at {len(mismatches)} of {SAMPLE_TOKENS} steps")
    print(f"llama_torch_export_check: PASS: PyTorch's greedy continuation of {PROMPT!r} equals llama_train's "
          f"({SAMPLE_TOKENS} bytes, {len(ties)} near-ties)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
