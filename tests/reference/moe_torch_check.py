"""nn::MoE against PyTorch: for every case moe_reference_export knows, the
layer written here in PyTorch (float64) from the same weights and tokens
must give the same routing (each token's experts, in order of score, the
tokens per expert, and with a capacity the same choices dropped), the same output and auxiliary losses, and, backward from
the same upstream gradient plus aux_scale x (load-balancing + z-loss), the
same input and parameter gradients, within 1e-5 relative (max |a - b| /
max |b|).

usage: moe_torch_check.py EXPORTER WORKDIR
"""
import math
import os
import subprocess
import sys

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:
    print(f"moe_torch_check: FAIL: cannot import {e.name} in {sys.executable}: {e}\n"
          "  run scripts/setup.sh (installs python3-torch, python3-h5py and python3-numpy for /usr/bin/python3)",
          file=sys.stderr)
    sys.exit(1)

TOL = 1e-5


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
    return float(np.max(np.abs(a - b))) / scale if b.size else 0.0


def swiglu(p, prefix, x):
    """Llama's feed-forward: gate_up packs [gate | up]."""
    gate, up = (x @ p[prefix + ".gate_up.weight"].T).chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up) @ p[prefix + ".down.weight"].T


def moe(f, p, x):
    """The layer as its header describes it, written from that description."""
    a = f.attrs
    experts, k = int(a["experts"]), int(a["top_k"])
    tokens = x.reshape(-1, x.shape[-1])
    n = tokens.shape[0]
    logits = tokens @ p["moe.router.weight"].T
    scores = torch.sigmoid(logits) if a["sigmoid"] else torch.softmax(logits, dim=-1)
    # Chosen by score + routing bias (DeepSeek-V3), weighted by the score.
    bias = torch.tensor(f["bias"][...], dtype=scores.dtype)
    choice = torch.topk(scores + bias, k, dim=-1).indices
    top = scores.gather(-1, choice)
    weights = top / top.sum(-1, keepdim=True) if a["renormalize"] else top
    # With a capacity: each expert takes at most ceil(factor x T x k / E) of
    # a sequence's choices, in order of position and then of score.
    kept = torch.ones_like(choice, dtype=torch.bool)
    factor = float(a["capacity_factor"])
    if factor > 0:
        t_len = x.shape[-2] if x.dim() >= 3 else n
        capacity = math.ceil(factor * t_len * k / experts)
        for start in range(0, n, t_len):
            taken = [0] * experts
            for t in range(start, start + t_len):
                for j in range(k):
                    e = int(choice[t, j])
                    kept[t, j] = taken[e] < capacity
                    taken[e] += 1
    y = torch.zeros_like(tokens)
    for e in range(experts):
        tok, slot = ((choice == e) & kept).nonzero(as_tuple=True)
        if len(tok):
            y = y.index_add(0, tok, weights[tok, slot, None] * swiglu(p, f"moe.expert{e}", tokens[tok]))
    if int(a["shared_experts"]):
        y = y + swiglu(p, "moe.shared", tokens)
    share = torch.bincount(choice.flatten(), minlength=experts).to(torch.float64) / (n * k)  # the router's choices
    counts = torch.bincount(choice[kept], minlength=experts)  # the choices taken
    probs = scores if not a["sigmoid"] else scores / scores.sum(-1, keepdim=True)
    aux = float(a["aux_loss_coeff"]) * experts * (share * probs.mean(0)).sum()
    z = float(a["z_loss_coeff"]) * (torch.logsumexp(logits, dim=-1) ** 2).mean()
    return y.reshape(x.shape), aux, z, choice, counts, int((~kept).sum())


def check(exporter, workdir, case):
    path = os.path.join(workdir, case + ".h5")
    subprocess.run([exporter, case, path], check=True)
    with h5py.File(path, "r") as f:
        p = {n: torch.tensor(f["params"][n][...], dtype=torch.float64, requires_grad=True) for n in f["params"]}
        p = {f"moe.{n}" if not n.startswith("moe.") else n: t for n, t in p.items()}
        x = torch.tensor(f["x"][...], dtype=torch.float64, requires_grad=True)
        out, aux, z, choice, counts, dropped = moe(f, p, x)
        if dropped != int(f["dropped"][0]):
            print(f"{case}: FAIL: {int(f['dropped'][0])} choices dropped, PyTorch drops {dropped}")
            return False
        if not np.array_equal(choice.numpy(), f["choice"][...]):
            print(f"{case}: FAIL: the experts chosen differ:\n{f['choice'][...]}\nPyTorch's:\n{choice.numpy()}")
            return False
        if not np.array_equal(counts.numpy(), f["tokens_per_expert"][...]):
            print(f"{case}: FAIL: tokens per expert {f['tokens_per_expert'][...]}, PyTorch's {counts.numpy()}")
            return False
        loss = (out * torch.tensor(f["dout"][...], dtype=torch.float64)).sum() + float(f.attrs["aux_scale"]) * (aux + z)
        loss.backward()
        errs = {"out": rel_err(f["out"][...], out.detach().numpy()),
                "dx": rel_err(f["dx"][...], x.grad.numpy()),
                "aux_loss": rel_err(f["aux_loss"][()], float(aux)),
                "z_loss": rel_err(f["z_loss"][()], float(z)) if float(f.attrs["z_loss_coeff"]) else 0.0}
        names = list(f["grads"].keys())
        by_name = {n: p[f"moe.{n}" if not n.startswith("moe.") else n] for n in names}
        # An expert no token chose takes no gradient in PyTorch: zeros.
        grad = {n: (t.grad if t.grad is not None else torch.zeros_like(t)).numpy() for n, t in by_name.items()}
        errs["grads"] = max(rel_err(f["grads"][n][...], grad[n]) for n in names)
        idle = int((counts == 0).sum())
    bad = {k: e for k, e in errs.items() if not e <= TOL}
    print(f"{case}: " + ", ".join(f"{k} {e:.2e}" for k, e in errs.items()) +
          f"; tokens per expert {counts.tolist()} ({idle} idle, {dropped} dropped)" + (" FAIL" if bad else " ok"))
    return not bad


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    exporter, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    cases = subprocess.run([exporter, "--list"], check=True, capture_output=True, text=True).stdout.split()
    if not cases:
        print("moe_torch_check: FAIL: the exporter lists no case", file=sys.stderr)
        return 1
    ok = [check(exporter, workdir, c) for c in cases]
    print(f"moe_torch_check: {sum(ok)} of {len(ok)} cases match PyTorch")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
