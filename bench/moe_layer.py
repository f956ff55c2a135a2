#!/usr/bin/env python3
"""moe_layer: nn::MoE's forward + backward against the same layer in PyTorch,
same shapes, same threads, runs alternating in one script.

PyTorch's side is the layer as Hugging Face's Mixtral writes it
(MixtralSparseMoeBlock): a router, softmax, top-k, the chosen weights
renormalised, then per expert the rows that chose it through a SwiGLU MLP,
scaled and index_add-ed back; the Switch load-balancing loss (coefficient
0.01) added to the loss. hypertrain's side is bench/moe_bench (nn::MoE with
the same options). Both time forward + backward from a random upstream
gradient, the input's gradient included, median of rounds.

usage: moe_layer.py BUILD [--tokens 2048] [--dim 512] [--hidden 1024] [--experts 8] [--top-k 2]
                          [--threads 2] [--repeats 3]
Last line: "ratio X", PyTorch's ms over hypertrain's (above 1: hypertrain faster), the median of repeats.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SYSTEM_PYTHON = "/usr/bin/python3"


def torch_ms(a):
    import torch
    torch.manual_seed(1)
    d, h, e, k, n = a.dim, a.hidden, a.experts, a.top_k, a.tokens
    router = torch.nn.Linear(d, e, bias=False)
    gate_up = torch.nn.ModuleList(torch.nn.Linear(d, 2 * h, bias=False) for _ in range(e))
    down = torch.nn.ModuleList(torch.nn.Linear(h, d, bias=False) for _ in range(e))
    x = torch.randn(n, d, requires_grad=True)  # a layer inside a model: its input's gradient is wanted
    dy = torch.randn(n, d)

    def layer(x):
        logits = router(x)
        scores = torch.softmax(logits, dim=-1)
        top, choice = torch.topk(scores, k, dim=-1)
        weights = top / top.sum(-1, keepdim=True)
        y = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(choice, e).permute(2, 1, 0)
        for i in range(e):
            slot, tok = torch.where(mask[i])
            g, u = gate_up[i](x[tok]).chunk(2, dim=-1)
            y.index_add_(0, tok, down[i](torch.nn.functional.silu(g) * u) * weights[tok, slot, None])
        share = torch.bincount(choice.flatten(), minlength=e).float() / (n * k)
        aux = 0.01 * e * (share * scores.mean(0)).sum()
        return y, aux

    def one_pass():
        for p in [x] + list(router.parameters()) + list(gate_up.parameters()) + list(down.parameters()):
            p.grad = None
        y, aux = layer(x)
        ((y * dy).sum() + aux).backward()

    one_pass()
    ms = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.iters):
            one_pass()
        ms.append((time.perf_counter() - t0) * 1000 / a.iters)
    return statistics.median(ms)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--torch-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.torch_only:
        import torch
        torch.set_num_threads(a.threads)
        print(json.dumps({"ms": torch_ms(a)}))
        return 0
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    shape = ["--tokens", str(a.tokens), "--dim", str(a.dim), "--hidden", str(a.hidden), "--experts", str(a.experts),
             "--top-k", str(a.top_k), "--rounds", str(a.rounds), "--iters", str(a.iters)]
    print(f"# moe_layer: {a.tokens} tokens, dim {a.dim}, {a.experts} experts of hidden {a.hidden}, top {a.top_k}, "
          f"{a.threads} threads, forward + backward, median of {a.rounds} rounds of {a.iters}")
    ratios = []
    for r in range(a.repeats):
        out = subprocess.run([os.path.join(a.build, "bench", "moe_bench")] + shape, env=env, check=True,
                             capture_output=True, text=True).stdout.splitlines()
        if r == 0:
            print(next(line for line in out if line.startswith("# ")))
        ht = json.loads(out[-1])["ms"]
        pt = json.loads(subprocess.run([SYSTEM_PYTHON, __file__, a.build, "--torch-only"] + shape +
                                       ["--threads", str(a.threads)], env=env, check=True, capture_output=True,
                                       text=True).stdout.splitlines()[-1])["ms"]
        ratios.append(pt / ht)
        print(f"hypertrain {ht:.1f} ms | pytorch {pt:.1f} ms | ratio {pt / ht:.3f}")
    print(f"ratio {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
