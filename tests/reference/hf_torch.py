# GPT-2 and Llama as Hugging Face stores them, in plain PyTorch, and the
# safetensors format read and written byte by byte: the outside reference
# for hypertrain's Hugging Face import and export (hf_torch_check.py).
#
# Written from the architectures and transformers' documented tensor names,
# not from hypertrain's code, with the tensors in Hugging Face's layouts:
#   GPT-2 (GPT2LMHeadModel): wte, wpe, h.N.{ln_1, attn.c_attn, attn.c_proj,
#     ln_2, mlp.c_fc, mlp.c_proj}.{weight, bias}, ln_f; Conv1D weights are
#     [in, out] and applied as x @ W + b; GELU's tanh approximation
#     ("gelu_new"); LayerNorm eps 1e-5; the head is wte (tied).
#   Llama (LlamaForCausalLM): model.embed_tokens, model.layers.N.
#     {input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
#     mlp.{gate,up,down}_proj}.weight, model.norm, lm_head (or the embedding
#     when tie_word_embeddings); nn.Linear weights [out, in]; RMSNorm;
#     rotary embeddings in the rotate-half convention Hugging Face's q_proj
#     and k_proj rows are stored for; grouped-query attention by repeating
#     each key/value head; down(silu(gate(x)) * up(x)).
# Computed in float64 from the float32 weights: the reference both float32
# implementations are compared with.
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": (np.float32, torch.float32), "F64": (np.float64, torch.float64)}


# ---------------------------------------------------------------- safetensors
def write_safetensors(path, tensors):
    """tensors: dict name -> float32 torch tensor, written in that order."""
    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    return {k: (e["dtype"], e["shape"], body[e["data_offsets"][0] : e["data_offsets"][1]]) for k, e in header.items()}


def read_dir(d):
    """Every tensor of a Hugging Face directory (one file, or shards through the index)."""
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(d, f)))
    return out


def as_torch(entry):
    dtype, shape, raw = entry
    if dtype != "F32":
        raise ValueError(f"expected F32, got {dtype}")
    return torch.from_numpy(np.frombuffer(raw, dtype="<f4").copy()).reshape(shape)


# ---------------------------------------------------------------- models
def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def causal_attention(q, k, v):
    """q, k, v (b, heads, t, d)."""
    t, d = q.shape[2], q.shape[3]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
    att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    return att @ v


def gpt2_logits(cfg, w, tokens):
    """w: name -> tensor without the "transformer." prefix; tokens (b, t) int64."""
    w = {k: v.double() for k, v in w.items()}
    b, t = tokens.shape
    c, nh = cfg["n_embd"], cfg["n_head"]
    x = w["wte.weight"][tokens] + w["wpe.weight"][:t]
    for n in range(cfg["n_layer"]):
        p = f"h.{n}."
        h = layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (z.view(b, t, nh, c // nh).transpose(1, 2) for z in qkv.split(c, dim=-1))
        y = causal_attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        m = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    return x @ w["wte.weight"].T


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def llama3_scaled(inv_freq, r):
    """Llama 3.1's frequency scaling (rope_type "llama3"), as transformers'
    _compute_llama3_parameters computes it on float32 tensors."""
    if r.get("rope_type", r.get("type")) != "llama3":
        raise ValueError(f"rope_scaling {r} is not llama3's")
    factor, low, high = r["factor"], r["low_freq_factor"], r["high_freq_factor"]
    old = r["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def llama_logits(cfg, w, tokens):
    w = {k: v.double() for k, v in w.items()}
    b, t = tokens.shape
    c, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, eps = c // nh, cfg["rms_norm_eps"]
    # The rotary angles as Hugging Face computes them: inv_freq and positions in float32.
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if cfg.get("rope_scaling"):
        inv_freq = llama3_scaled(inv_freq, cfg["rope_scaling"])
    ang = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)
    emb = torch.cat((ang, ang), dim=-1).double()
    cos, sin = emb.cos(), emb.sin()
    x = w["model.embed_tokens.weight"][tokens]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        # Qwen2's projections have biases; Llama's and Mistral's none.
        proj = lambda n: h @ w[p + f"self_attn.{n}.weight"].T + w.get(p + f"self_attn.{n}.bias", 0)  # noqa: E731
        q = proj("q_proj").view(b, t, nh, d).transpose(1, 2)
        k = proj("k_proj").view(b, t, nkv, d).transpose(1, 2)
        v = proj("v_proj").view(b, t, nkv, d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def random_gpt2(cfg, seed):
    """Random weights, Hugging Face's names (the Hub's gpt2 style: no "transformer." prefix)."""
    g = torch.Generator().manual_seed(seed)
    c, v, ctx = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    r = lambda *shape, s=0.1: torch.randn(*shape, generator=g) * s  # noqa: E731
    w = {"wte.weight": r(v, c), "wpe.weight": r(ctx, c)}
    for n in range(cfg["n_layer"]):
        p = f"h.{n}."
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = 1 + r(c), r(c)
        w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = r(c, 3 * c), r(3 * c)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = r(c, c), r(c)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = 1 + r(c), r(c)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = r(c, 4 * c), r(4 * c)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = r(4 * c, c), r(c)
    w["ln_f.weight"], w["ln_f.bias"] = 1 + r(c), r(c)
    return w


def random_llama(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    c, v, f = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    kv = c // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    r = lambda *shape, s=0.1: torch.randn(*shape, generator=g) * s  # noqa: E731
    w = {"model.embed_tokens.weight": r(v, c)}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        w[p + "input_layernorm.weight"] = 1 + r(c)
        w[p + "self_attn.q_proj.weight"] = r(c, c)
        w[p + "self_attn.k_proj.weight"] = r(kv, c)
        w[p + "self_attn.v_proj.weight"] = r(kv, c)
        if cfg["model_type"] == "qwen2":
            w[p + "self_attn.q_proj.bias"] = r(c)
            w[p + "self_attn.k_proj.bias"] = r(kv)
            w[p + "self_attn.v_proj.bias"] = r(kv)
        w[p + "self_attn.o_proj.weight"] = r(c, c)
        w[p + "post_attention_layernorm.weight"] = 1 + r(c)
        w[p + "mlp.gate_proj.weight"] = r(f, c)
        w[p + "mlp.up_proj.weight"] = r(f, c)
        w[p + "mlp.down_proj.weight"] = r(c, f)
    w["model.norm.weight"] = 1 + r(c)
    if not cfg.get("tie_word_embeddings"):
        w["lm_head.weight"] = r(v, c)
    return w
