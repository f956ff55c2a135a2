# A plain Llama in PyTorch with hypertrain's parameter names, the reference
# the Llama tests compare with (llama_torch_check.py: loss, gradients, AdamW;
# llama_torch_export_check.py: greedy sampling from an exported checkpoint).
#
# Written from the architecture, not from hypertrain's code: RMSNorm, rotary
# position embeddings in the rotate-half convention with the table computed as
# Hugging Face's LlamaRotaryEmbedding computes it (documented in
# include/ht/ops/rope.h), grouped-query attention by repeating each key/value
# head for its n_head / n_kv_head query heads, causal softmax attention by
# matmul (torch 1.13 has no scaled_dot_product_attention), a SwiGLU MLP whose
# packed gate_up weight is split into gate (first half of the output rows) and
# up (second half), no biases, an untied output head.
#
# Names as hypertrain's models::Llama (Hugging Face's LlamaForCausalLM
# without the "model." prefix, and the MLP packed): embed_tokens.weight,
# layers.N.{input_layernorm,post_attention_layernorm}.weight,
# layers.N.self_attn.{q,k,v,o}_proj.weight, layers.N.mlp.{gate_up,down}.weight,
# norm.weight, lm_head.weight.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def rope_cos_sin(t, head_dim, theta, dtype):
    """(cos, sin), each (t, head_dim): angle[p, i] = p * inv_freq[i mod D/2].

    inv_freq and the angles in float32 as Hugging Face computes them. For a
    float32 model cos and sin are PyTorch's float32 functions; for a float64
    model they are taken in float64 of the same float32 angles (so a float64
    run differs from a float32 one by arithmetic only, not by the table)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    pos = torch.arange(t, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    if dtype == torch.float32:
        return emb.cos(), emb.sin()
    emb = emb.to(dtype)
    return emb.cos(), emb.sin()


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x (b, heads, t, d); cos, sin (t, d)."""
    return x * cos + rotate_half(x) * sin


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, c, n_head, n_kv_head):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, c // n_head
        kv = self.head_dim * n_kv_head
        self.q_proj = nn.Linear(c, c, bias=False)
        self.k_proj = nn.Linear(c, kv, bias=False)
        self.v_proj = nn.Linear(c, kv, bias=False)
        self.o_proj = nn.Linear(c, c, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        d = self.head_dim
        q = self.q_proj(x).view(b, t, self.n_head, d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv_head, d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv_head, d).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Query head h reads key/value head h // (n_head / n_kv_head).
        rep = self.n_head // self.n_kv_head
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.o_proj(y)


class SwiGLU(nn.Module):
    def __init__(self, c, hidden):
        super().__init__()
        self.hidden = hidden
        self.gate_up = nn.Linear(c, 2 * hidden, bias=False)  # rows [gate | up]
        self.down = nn.Linear(hidden, c, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).split(self.hidden, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, c, n_head, n_kv_head, hidden, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(c, eps)
        self.self_attn = Attention(c, n_head, n_kv_head)
        self.post_attention_layernorm = RMSNorm(c, eps)
        self.mlp = SwiGLU(c, hidden)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, vocab, context, n_layer, n_head, n_kv_head, c, hidden, theta=10000.0, eps=1e-5):
        super().__init__()
        self.context, self.theta, self.head_dim = context, theta, c // n_head
        self.embed_tokens = nn.Embedding(vocab, c)
        self.layers = nn.ModuleList(Block(c, n_head, n_kv_head, hidden, eps) for _ in range(n_layer))
        self.norm = RMSNorm(c, eps)
        self.lm_head = nn.Linear(c, vocab, bias=False)

    def logits(self, tokens):
        t = tokens.shape[1]
        if t > self.context:
            raise ValueError(f"sequence of {t} tokens exceeds the context {self.context}")
        x = self.embed_tokens(tokens)
        cos, sin = rope_cos_sin(t, self.head_dim, self.theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))

    def forward(self, tokens, targets):
        logits = self.logits(tokens)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def load(self, tensors):
        """Copies name -> array (numpy or torch) into the parameters; raises
        ValueError naming the names or shapes that differ."""
        names = {n for n, _ in self.named_parameters()}
        given = set(tensors.keys())
        if names != given:
            raise ValueError(f"parameter names differ: only in hypertrain {sorted(given - names)}, "
                             f"only in PyTorch {sorted(names - given)}")
        with torch.no_grad():
            for n, p in self.named_parameters():
                src = torch.as_tensor(tensors[n])
                if tuple(src.shape) != tuple(p.shape):
                    raise ValueError(f"{n}: hypertrain shape {tuple(src.shape)}, PyTorch {tuple(p.shape)}")
                p.copy_(src)
        return self
