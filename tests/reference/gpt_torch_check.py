#!/usr/bin/python3
# Checks hypertrain's GPT against PyTorch: for every case gpt_reference_export
# knows, the loss, every parameter gradient and one AdamW step must match a
# GPT-2 written in PyTorch and loaded with the same weights.
#
#   gpt_torch_check.py EXPORTER WORKDIR
#
# Run it with Debian's /usr/bin/python3, which sees python3-torch and
# python3-h5py (installed by scripts/setup.sh). Exits 0 when every check
# passes, 1 with a report of the worst mismatches otherwise.
#
# Tolerances. Relative error of a tensor = max|a - b| / max(max|b|, tiny), b the
# reference. Loss and gradients: 1e-5 against PyTorch in float32 (the spec).
# Float64 PyTorch is printed alongside as a diagnosis: when hypertrain is right,
# both float32 implementations sit at about the same distance from it.
# AdamW: PyTorch's AdamW is given hypertrain's own gradients, so the step is
# checked on its own, to 1e-6 relative. Relative (not absolute 1e-6) because the
# decoupled weight decay moves a weight of 0.02 by only lr * wd * 0.02 = 2e-6:
# an absolute 1e-6 would barely see it missing, while 1e-6 of a matrix's largest
# value (~0.08) is ~1e-7, which any error in the update or the decay exceeds,
# and which float32 rounding (~1e-8 at 0.08) stays far below. Given PyTorch's
# own gradients instead, Adam's first step (about lr * sign(g)) would turn
# rounding-level differences in near-zero gradients into full +-lr moves; that
# comparison is printed, not checked.
import math
import os
import subprocess
import sys

try:
    import h5py
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"gpt_torch_check: FAIL: cannot import {e.name} in {sys.executable}: {e}\n"
          "  run scripts/setup.sh (installs python3-torch, python3-h5py and python3-numpy for "
          "/usr/bin/python3), or point the CMake cache variable HT_TORCH_PYTHON at a python3 that has them",
          file=sys.stderr)
    sys.exit(1)

LOSS_GRAD_TOL = 1e-5
ADAMW_TOL = 1e-6
TINY = 1e-30


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b), initial=0.0)) / max(float(np.max(np.abs(b), initial=0.0)), TINY)


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
    names = {n for n, _ in model.named_parameters()}
    exported = set(f["params"].keys())
    if names != exported:
        raise SystemExit(f"parameter names differ: only in hypertrain {sorted(exported - names)}, "
                         f"only in PyTorch {sorted(names - exported)}")
    with torch.no_grad():
        for n, p in model.named_parameters():
            src = f["params"][n][()]
            if tuple(src.shape) != tuple(p.shape):
                raise SystemExit(f"{n}: hypertrain shape {src.shape}, PyTorch {tuple(p.shape)}")
            p.copy_(torch.from_numpy(src))
    return model.to(dtype)


def loss_and_grads(f, dtype):
    model = build(f, dtype)
    tokens = torch.from_numpy(f["tokens"][()]).long()
    targets = torch.from_numpy(f["targets"][()]).long()
    loss = model(tokens, targets)
    loss.backward()
    return float(loss), {n: p.grad.detach().double().numpy() for n, p in model.named_parameters()}


def check_case(name, path):
    """Returns a list of failure lines (empty when the case passes)."""
    failures = []
    with h5py.File(path, "r") as f:
        a = f.attrs
        print(f"== {name}: L{int(a['n_layer'])} H{int(a['n_head'])} C{int(a['n_embd'])} V{int(a['vocab_size'])} "
              f"T{int(a['context'])}, batch {int(a['batch'])} x {int(a['seq_len'])}")
        ht_loss = float(f["loss"][()])
        loss32, g32 = loss_and_grads(f, torch.float32)
        loss64, g64 = loss_and_grads(f, torch.float64)
        e = abs(ht_loss - loss32) / max(abs(loss32), TINY)
        print(f"loss: hypertrain {ht_loss:.8f}  torch f32 {loss32:.8f}  f64 {loss64:.8f}  rel err vs f32 {e:.2e}")
        if not e <= LOSS_GRAD_TOL:
            failures.append(f"{name}: loss {ht_loss} vs PyTorch {loss32}: rel err {e:.2e} > {LOSS_GRAD_TOL:g}")

        print(f"{'gradient':<28} {'ht vs f32':>10} {'ht vs f64':>10} {'f32 vs f64':>10}")
        worst = ("", 0.0)
        for n in g32:  # registration order, as hypertrain lists them
            ht = f["grads"][n][()]
            e32, e64, e_t = rel_err(ht, g32[n]), rel_err(ht, g64[n]), rel_err(g32[n], g64[n])
            flag = "" if e32 <= LOSS_GRAD_TOL else "  <-- FAIL"
            print(f"  {n:<26} {e32:10.2e} {e64:10.2e} {e_t:10.2e}{flag}")
            if not e32 <= LOSS_GRAD_TOL:
                failures.append(f"{name}: grad {n}: rel err {e32:.2e} > {LOSS_GRAD_TOL:g} "
                                f"(max|ht| {np.abs(ht).max():.3e}, max|torch| {np.abs(g32[n]).max():.3e})")
            if e32 >= worst[1]:
                worst = (n, e32)
        print(f"worst gradient: {worst[0]} {worst[1]:.2e}")

        # AdamW: weight decay on matrices and embeddings (2-D), not on biases and
        # LayerNorm parameters; hypertrain's per-parameter flag must agree.
        model = build(f, torch.float32)
        decay, no_decay = [], []
        for n, p in model.named_parameters():
            ht_flag = bool(f["params"][n].attrs["weight_decay"])
            if ht_flag != (p.dim() >= 2):
                failures.append(f"{name}: {n} ({p.dim()}-D): hypertrain weight_decay={ht_flag}, "
                                f"GPT-2 convention is {p.dim() >= 2}")
            (decay if p.dim() >= 2 else no_decay).append(p)
            p.grad = torch.from_numpy(f["grads"][n][()])
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(a["weight_decay"])},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=float(a["lr"]), betas=(float(a["beta1"]), float(a["beta2"])), eps=float(a["eps"]))
        opt.step()
        print(f"{'after AdamW step':<28} {'rel err':>10} {'abs err':>10}")
        worst = ("", 0.0)
        for n, p in model.named_parameters():
            ht = f["after_step"][n][()]
            ref = p.detach().numpy()
            e, ea = rel_err(ht, ref), float(np.max(np.abs(ht.astype(np.float64) - ref)))
            flag = "" if e <= ADAMW_TOL else "  <-- FAIL"
            print(f"  {n:<26} {e:10.2e} {ea:10.2e}{flag}")
            if not e <= ADAMW_TOL:
                failures.append(f"{name}: after_step {n}: rel err {e:.2e} > {ADAMW_TOL:g} (abs {ea:.2e})")
            if e >= worst[1]:
                worst = (n, e)
        print(f"worst AdamW step: {worst[0]} {worst[1]:.2e}")

        # Informational: the same step from PyTorch's own float32 gradients.
        own = build(f, torch.float32)
        for n, p in own.named_parameters():
            p.grad = torch.from_numpy(g32[n]).float()
        torch.optim.AdamW([{"params": [p for p in own.parameters() if p.dim() >= 2],
                            "weight_decay": float(a["weight_decay"])},
                           {"params": [p for p in own.parameters() if p.dim() < 2], "weight_decay": 0.0}],
                          lr=float(a["lr"]), betas=(float(a["beta1"]), float(a["beta2"])),
                          eps=float(a["eps"])).step()
        diffs = [np.abs(f["after_step"][n][()] - p.detach().numpy()) for n, p in own.named_parameters()]
        moved = sum(int((d > ADAMW_TOL).sum()) for d in diffs)
        total = sum(d.size for d in diffs)
        print(f"(info, not checked) AdamW from PyTorch's own gradients: max abs diff "
              f"{max(float(d.max()) for d in diffs):.2e}, {moved}/{total} elements differ by > {ADAMW_TOL:g}")
    return failures


def main():
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} EXPORTER WORKDIR", file=sys.stderr)
        return 2
    exporter, workdir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    os.makedirs(workdir, exist_ok=True)
    print(f"# torch {torch.__version__}, h5py {h5py.__version__}, numpy {np.__version__}, python {sys.executable}")
    cases = subprocess.run([exporter, "--list"], check=True, capture_output=True, text=True).stdout.split()
    if not cases:
        print("gpt_torch_check: FAIL: the exporter lists no cases", file=sys.stderr)
        return 1
    failures = []
    for case in cases:
        path = os.path.join(workdir, f"{case}.h5")
        if os.path.exists(path):
            os.remove(path)
        subprocess.run([exporter, case, path], check=True)
        failures += check_case(case, path)
    if failures:
        print(f"\ngpt_torch_check: FAIL: {len(failures)} mismatch(es) with PyTorch:", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"\ngpt_torch_check: PASS ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
