#!/usr/bin/python3
# Checks hypertrain's GPT against PyTorch: for every case gpt_reference_export
# knows, the loss, every parameter gradient and one AdamW step must match a
# GPT-2 written in PyTorch and loaded with the same weights (the checks and
# tolerances: torch_check.py).
#
#   gpt_torch_check.py EXPORTER WORKDIR
#
# Run it with Debian's /usr/bin/python3, which sees python3-torch and
# python3-h5py (installed by scripts/setup.sh). Exits 0 when every check
# passes, 1 with a report of the worst mismatches otherwise.
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_check  # noqa: E402  (first: it reports a missing torch or h5py)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Attention(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(c, 3 * c)  # q | k | v along the output
        self.c_proj = nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.n_head
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c, 4 * c)
        self.c_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = Attention(c, n_head)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 with hypertrain's parameter names: wte, wpe, h.<i>.*, ln_f.*; head tied to wte."""

    def __init__(self, vocab, context, n_layer, n_head, c):
        super().__init__()
        self.wte = nn.Parameter(torch.empty(vocab, c))
        self.wpe = nn.Parameter(torch.empty(context, c))
        self.h = nn.ModuleList(Block(c, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c, eps=1e-5)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte[tokens] + self.wpe[:t]
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build(f, dtype):
    a = f.attrs
    model = GPT(int(a["vocab_size"]), int(a["context"]), int(a["n_layer"]), int(a["n_head"]), int(a["n_embd"]))
    return torch_check.load_params(model, f).to(dtype)


def describe(a):
    return f"L{int(a['n_layer'])} H{int(a['n_head'])} C{int(a['n_embd'])} V{int(a['vocab_size'])} T{int(a['context'])}"


if __name__ == "__main__":
    sys.exit(torch_check.main("gpt_torch_check", build, describe))
