#!/usr/bin/python3
# Hugging Face models in and out of hypertrain, against PyTorch.
#
#   hf_torch_check.py ARCH HF_LOGITS HT_CKPT MPIEXEC WORKDIR      ARCH: gpt2, llama, llama_tied, mistral, qwen2
#
# A tiny model of ARCH with random weights is written in Hugging Face's
# format (config.json and safetensors, by hf_torch.py: GPT-2 as the Hub's
# gpt2 stores it, without the "transformer." prefix and with its attention
# mask buffers; the Llama in two shards with an index). hf_logits loads it on
# each layout (one process, tp 2 with the vocabulary padded from 96 to 128
# rows, so that the second rank reads 32 rows and keeps 32 of zeros, pp 2,
# ZeRO-3 over 2 ranks; the tied Llama
# on one process and pp 2, where the last stage holds the embedding's copy)
# and must give:
#   - the logits of PyTorch's model within 1e-5 (relative to the largest
#     logit), from the parameters gathered off the layout;
#   - PyTorch's mean cross-entropy within 1e-5 relative, from the layout's
#     own forward (engine.evaluate);
# then each layout's checkpoint, exported with `ht-ckpt export --format hf`,
# must hold every tensor of the input bit for bit (names as transformers
# writes them), a config.json with the same model, and give PyTorch the same
# logits exactly. The Llamas use Llama 3.1's rope scaling; the Mistral (one
# process and tp 2) none, and no sliding window; the Qwen2 (one process, tp 2
# with its q/k/v biases split, ZeRO-3) is tied and has no sliding window. Refusals: a config with
# YaRN's rope scaling (a Mistral: a sliding window of 8), a missing tensor, ht-ckpt's --kinds with
# --format hf and --dtype without it, and
# an export into a directory that holds something.
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"hf_torch_check: FAIL: cannot import {e.name} in {sys.executable}: run scripts/setup.sh", file=sys.stderr)
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_torch  # noqa: E402

TOL = 1e-5
SEQ, WINDOWS = 8, 4

CONFIGS = {
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": 96, "n_positions": 16,
             "n_ctx": 16, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": None,
             "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 96, "hidden_size": 32,
              "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 16, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "hidden_act": "silu",
              # Llama 3.1's scaling, its bands placed so that of the 4 frequencies of a head of 8 one is
              # kept, one interpolated and two divided.
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
              "tie_word_embeddings": False},
}
CONFIGS["llama_tied"] = dict(CONFIGS["llama"], tie_word_embeddings=True)
# Mistral 7B v0.3's form: a Llama without rope scaling and without a sliding window.
CONFIGS["mistral"] = {k: v for k, v in CONFIGS["llama"].items() if k != "rope_scaling"}
CONFIGS["mistral"].update(architectures=["MistralForCausalLM"], model_type="mistral", rope_theta=1000000.0,
                          sliding_window=None)
# Qwen2.5 0.5B's form: biases on q, k and v, a tied head, no sliding window.
CONFIGS["qwen2"] = {k: v for k, v in CONFIGS["mistral"].items() if k not in ("sliding_window",)}
CONFIGS["qwen2"].update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", tie_word_embeddings=True,
                        use_sliding_window=False, sliding_window=None, max_window_layers=2)
LAYOUTS = {"one": (1, []), "tp2": (2, ["--tp", "2", "--vocab-multiple", "64"]), "pp2": (2, ["--pp", "2"]), "zero3": (2, ["--zero", "3"])}
CASE_LAYOUTS = {"gpt2": ["one", "tp2", "pp2", "zero3"], "llama": ["one", "tp2", "pp2", "zero3"],
                "llama_tied": ["one", "pp2"], "mistral": ["one", "tp2"], "qwen2": ["one", "tp2", "zero3"]}


def fail(msg):
    print(f"hf_torch_check: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, expect_ok=True):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if expect_ok and p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}")
    return p


def write_model(arch, cfg, weights, d):
    os.makedirs(d)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    if arch == "gpt2":
        # The Hub's gpt2 holds the causal mask of each block beside the weights.
        tensors = dict(weights)
        t = cfg["n_positions"]
        for n in range(cfg["n_layer"]):
            tensors[f"h.{n}.attn.bias"] = torch.tril(torch.ones(t, t)).view(1, 1, t, t)
        hf_torch.write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        return
    names = list(weights)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    index = {"metadata": {"total_size": sum(weights[n].numel() * 4 for n in names)}, "weight_map": {}}
    for f, part in shards.items():
        hf_torch.write_safetensors(os.path.join(d, f), {n: weights[n] for n in part})
        index["weight_map"].update({n: f for n in part})
    json.dump(index, open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)


def logits_of(arch, cfg, weights, tokens):
    return (hf_torch.gpt2_logits if arch == "gpt2" else hf_torch.llama_logits)(cfg, weights, tokens)


def main():
    if len(sys.argv) != 6:
        fail("usage: hf_torch_check.py ARCH HF_LOGITS HT_CKPT MPIEXEC WORKDIR")
    arch, hf_logits, ht_ckpt, mpiexec, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cfg = CONFIGS[arch]
    weights = (hf_torch.random_gpt2 if arch == "gpt2" else hf_torch.random_llama)(cfg, seed=7)
    model_dir = os.path.join(work, "hf")
    write_model(arch, cfg, weights, model_dir)
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(0, cfg["vocab_size"], (SEQ * WINDOWS + 1,), generator=g, dtype=torch.int64)
    ids.to(torch.int32).numpy().astype("<i4").tofile(os.path.join(work, "tokens.bin"))
    inputs = torch.stack([ids[b * SEQ : b * SEQ + SEQ] for b in range(WINDOWS)])
    targets = torch.stack([ids[b * SEQ + 1 : b * SEQ + SEQ + 1] for b in range(WINDOWS)])
    ref = logits_of(arch, cfg, weights, inputs)
    ref_loss = F.cross_entropy(ref.reshape(-1, ref.shape[-1]), targets.reshape(-1)).item()
    scale = max(1.0, ref.abs().max().item())
    env = dict(os.environ, OMP_NUM_THREADS="1")

    for layout in CASE_LAYOUTS[arch]:
        np_, flags = LAYOUTS[layout]
        out = os.path.join(work, layout)
        ckpt = os.path.join(work, f"ckpt_{layout}")
        cmd = [hf_logits, model_dir, os.path.join(work, "tokens.bin"), out, "--seq-len", str(SEQ),
               "--run-dir", os.path.join(work, f"run_{layout}"), "--ckpt-dir", ckpt, "--micro-batch", "2",
               ] + flags
        if np_ > 1:
            cmd = [mpiexec, "--oversubscribe", "-np", str(np_)] + cmd
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        if p.returncode != 0:
            fail(f"{layout}: hf_logits exited {p.returncode}:\n{p.stdout}")
        got = torch.from_numpy(
            __import__("numpy").fromfile(out + ".logits", dtype="<f4").copy()).double().view(ref.shape)
        err = (got - ref).abs().max().item() / scale
        loss = float(open(out + ".loss").read())
        loss_err = abs(loss - ref_loss) / abs(ref_loss)
        print(f"{arch} {layout}: logits max error {err:.2e} (of the largest {scale:.3f}), loss {loss:.7f} vs "
              f"PyTorch {ref_loss:.7f} ({loss_err:.1e})")
        if err > TOL:
            fail(f"{layout}: the logits differ from PyTorch's by {err:.3e} > {TOL}")
        if loss_err > TOL:
            fail(f"{layout}: the loss {loss} differs from PyTorch's {ref_loss} by {loss_err:.3e} relative > {TOL}")

        exported = os.path.join(work, f"export_{layout}")
        run([ht_ckpt, "export", "--format", "hf", ckpt, exported])
        check_export(arch, cfg, weights, exported, inputs, ref)

    # Refusals, each by name.
    bad = os.path.join(work, "hf_bad")
    shutil.copytree(model_dir, bad)
    # (the setting named in the refusal, the config's changes)
    needle, change = {"gpt2": ("activation_function", {"activation_function": "relu"}),
                      "mistral": ("sliding_window", {"sliding_window": 8}),
                      "qwen2": ("use_sliding_window", {"use_sliding_window": True, "sliding_window": 8,
                                                       "max_window_layers": 0})}.get(
        arch, ("rope_scaling", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}))
    json.dump(dict(cfg, **change), open(os.path.join(bad, "config.json"), "w"))
    expect_refusal([hf_logits, bad, os.path.join(work, "tokens.bin"), os.path.join(work, "bad"), "--seq-len",
                    str(SEQ), "--run-dir", os.path.join(work, "run_bad")], needle)
    missing = os.path.join(work, "hf_missing")
    os.makedirs(missing)
    shutil.copy(os.path.join(model_dir, "config.json"), missing)
    w = dict(weights)
    gone = next(n for n in w if "c_proj.bias" in n or "down_proj" in n)
    del w[gone]
    hf_torch.write_safetensors(os.path.join(missing, "model.safetensors"), w)
    expect_refusal([hf_logits, missing, os.path.join(work, "tokens.bin"), os.path.join(work, "bad"), "--seq-len",
                    str(SEQ), "--run-dir", os.path.join(work, "run_missing")], gone)
    expect_refusal([ht_ckpt, "export", "--format", "hf", os.path.join(work, "ckpt_one"), model_dir],
                   "not an empty directory")
    expect_refusal([ht_ckpt, "export", "--format", "hf", "--kinds", "exp_avg", os.path.join(work, "ckpt_one"),
                    os.path.join(work, "export_kinds")], "drop --kinds")
    expect_refusal([ht_ckpt, "export", "--dtype", "bf16", os.path.join(work, "ckpt_one"),
                    os.path.join(work, "export.h5")], "--dtype is for --format hf")
    print(f"hf_torch_check: {arch}: PASS")


def expect_refusal(cmd, needle):
    p = run(cmd, expect_ok=False)
    if p.returncode == 0 or needle not in p.stdout:
        fail(f"{' '.join(cmd)} should have been refused naming '{needle}'; exit {p.returncode}:\n{p.stdout}")
    print(f"refused as expected: {needle}")


def check_export(arch, cfg, weights, d, inputs, ref):
    got_cfg = json.load(open(os.path.join(d, "config.json")))
    for k, v in cfg.items():
        if k in ("n_inner", "rope_scaling") and v is None:
            continue
        if got_cfg.get(k) != v:
            fail(f"{d}/config.json: {k} is {got_cfg.get(k)!r}, the model's {v!r}")
    tensors = hf_torch.read_dir(d)
    prefix = "transformer." if arch == "gpt2" else ""
    expected = {prefix + n for n in weights}
    if set(tensors) != expected:
        fail(f"{d}: tensors differ: extra {sorted(set(tensors) - expected)}, missing {sorted(expected - set(tensors))}")
    for n, t in weights.items():
        dtype, shape, raw = tensors[prefix + n]
        if dtype != "F32" or shape != list(t.shape) or raw != t.numpy().astype("<f4").tobytes():
            fail(f"{d}: {prefix + n} is not the input's bits ({dtype} {shape})")
    back = {n[len(prefix):]: hf_torch.as_torch(e) for n, e in tensors.items()}
    if not torch.equal(logits_of(arch, cfg, back, inputs), ref):
        fail(f"{d}: PyTorch's logits from the export differ from the input's")
    print(f"  export {os.path.basename(d)}: {len(tensors)} tensors bit-exact, config equal, logits equal")


if __name__ == "__main__":
    main()
