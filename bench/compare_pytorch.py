#!/usr/bin/env python3
"""compare_pytorch: hypertrain's training throughput against PyTorch's, same
model, same batch, same thread count, measured back to back in one script.

Runs <build>/bench/train_throughput --json for each config, then trains the same
model in PyTorch on random tokens, timing forward + backward + optimizer steps
after warm-up; both sides report the median timed step. The GPT configs (small,
124m): fp32, tied head, tanh GELU, causal attention written as matmul + masked
softmax. The Llama configs (llama-small, llama-124m): RMSNorm, rotate-half
rotary embeddings, grouped-query attention (key/value heads repeated), SwiGLU,
untied head, the same attention. Both with global-norm clipping at 1.0 and
AdamW with hypertrain's hyper-parameters and decay groups.

Output (a contract, see docs/benchmarks.md):
  "# " preamble lines;
  one line per config and repeat (wrapped here):
    small | hypertrain 2012.3 tok/s 508.9 ms/step (cpu 1010 ms) | pytorch 1833.0 tok/s
      558.7 ms/step (cpu 1105 ms) | ratio 1.098 | cpu ratio 1.094
  one line per config with the medians over repeats:
    config small | L6 H6 C384 V256 T256 | batch 8 x 128 | hypertrain 2012.3 tok/s
      | pytorch 1833.0 tok/s | ratio 1.098 | cpu ratio 1.094
  and last, exactly "ratio X": hypertrain tokens/s over PyTorch's for the one
  config, or with a group (--config both, llama, all) the smallest of the
  configs' ratios.
"ratio" compares wall-clock throughput (median step); "cpu ratio" compares
process CPU time per step (all threads; PyTorch's over hypertrain's), the work
each side spends per token, which other load on the machine disturbs less.

Both sides get the same environment: OMP_NUM_THREADS and OPENBLAS_NUM_THREADS
from --threads, OPENBLAS_CORETYPE from --openblas-coretype, and whatever else
is set (OMP_WAIT_POLICY, for one: passive is the robust choice on a shared
machine; docs/benchmarks.md).

Needs Debian's /usr/bin/python3 with python3-torch (1.13); when torch is not
importable under the interpreter that started the script, it re-executes
itself under /usr/bin/python3.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

SYSTEM_PYTHON = "/usr/bin/python3"

# name: (model, batch, seq, warmup, steps), as train_throughput's --config.
# GPT: vocab, context, layers, heads, embd. Llama: also kv_heads, ffn, rope_theta.
CONFIGS = {
    "small": (dict(kind="gpt", vocab=256, context=256, n_layer=6, n_head=6, n_embd=384), 8, 128, 3, 10),
    "124m": (dict(kind="gpt", vocab=50257, context=1024, n_layer=12, n_head=12, n_embd=768), 2, 256, 2, 5),
    "llama-small": (dict(kind="llama", vocab=256, context=256, n_layer=6, n_head=6, n_kv_head=2, n_embd=384,
                         ffn=1024, rope_theta=10000.0), 8, 128, 3, 10),
    "llama-124m": (dict(kind="llama", vocab=50257, context=1024, n_layer=12, n_head=12, n_kv_head=4, n_embd=768,
                        ffn=2048, rope_theta=10000.0), 2, 256, 2, 5),
}
GROUPS = {"both": ["small", "124m"], "llama": ["llama-small", "llama-124m"],
          "all": ["small", "124m", "llama-small", "llama-124m"]}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", required=True, help="hypertrain build directory (holds bench/train_throughput)")
    p.add_argument("--config", choices=list(CONFIGS) + list(GROUPS), default="small")
    p.add_argument("--threads", type=int, default=2,
                   help="threads for both sides (OMP_NUM_THREADS, torch.set_num_threads)")
    p.add_argument("--steps", type=int, default=0, help="timed steps per side (0: 10 for small, 5 for 124m)")
    p.add_argument("--warmup", type=int, default=-1, help="untimed steps first (-1: 3 for small, 2 for 124m)")
    p.add_argument("--batch", type=int, default=0, help="sequences per step (0: the config's)")
    p.add_argument("--seq", type=int, default=0, help="tokens per sequence (0: the config's)")
    p.add_argument("--repeats", type=int, default=1,
                   help="alternate hypertrain and PyTorch runs this many times; medians are reported")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where both sides train: cpu, or cuda (the first GPU; PyTorch's CUDA build on the same device)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="compute dtype: fp32, or bf16 (hypertrain's bf16 compute with f32 master weights; PyTorch's "
                        "autocast to bf16 with f32 parameters)")
    p.add_argument("--attention", default="matmul", choices=["matmul", "sdpa"],
                   help="PyTorch's attention: matmul (matmul + masked softmax, as written below) or sdpa "
                        "(F.scaled_dot_product_attention, PyTorch's fused kernels: its fastest path on a GPU)")
    p.add_argument("--openblas-coretype", default=None,
                   help="set OPENBLAS_CORETYPE for both sides (e.g. SkylakeX, Haswell); default: as inherited. "
                        "OpenBLAS 0.3.21 runs its slow Prescott kernels on CPUs it does not recognise")
    return p.parse_args()


def set_env(args):
    # Before torch is imported: libgomp and OpenBLAS size their pools and pick
    # their kernels when they load. The hypertrain run inherits the same.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    if args.openblas_coretype:
        os.environ["OPENBLAS_CORETYPE"] = args.openblas_coretype


def torch_blas_description():
    """The OpenBLAS torch loaded (Debian links torch against libopenblas.so.0), and its kernels."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        for name in ("openblas_get_config", "openblas_get_corename"):
            getattr(lib, name).restype = ctypes.c_char_p
        return f"{lib.openblas_get_config().decode()}, core {lib.openblas_get_corename().decode()}"
    except (OSError, AttributeError):
        return "BLAS not identified"


def import_torch():
    try:
        import torch  # noqa: F401
        return torch
    except ImportError:
        if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and os.path.exists(SYSTEM_PYTHON):
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit("compare_pytorch: torch is not importable here nor under /usr/bin/python3; "
                 "install Debian's python3-torch")


def run_hypertrain(args, name):
    exe = os.path.join(args.build, "bench", "train_throughput")
    if not os.access(exe, os.X_OK):
        sys.exit(f"compare_pytorch: {exe} not found; build it: ninja -C {args.build} train_throughput")
    cmd = [exe, "--config", name, "--threads", str(args.threads), "--json",
           "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--batch", str(args.batch), "--seq", str(args.seq),
           "--device", args.device, "--precision", args.precision]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"compare_pytorch: {' '.join(cmd)} failed with exit code {proc.returncode}:\n{proc.stderr}")
    out = proc.stdout
    objects = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    run = next(o for o in objects if o["type"] == "run")
    result = next(o for o in objects if o["type"] == "train_throughput")
    return run, result


def causal_attention(torch, q, k, v, hs, attention):
    """(b, heads, t, hs) -> (b, heads, t, hs): written as matmul + masked softmax, or PyTorch's fused kernel."""
    F = torch.nn.functional
    if attention == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
    return att @ v


def build_torch_gpt(torch, attention, device, kind, vocab, context, n_layer, n_head, n_embd):
    nn = torch.nn
    F = torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)

        def forward(self, x):
            b, t, c = x.shape
            hs = c // n_head
            q, k, v = self.c_attn(x).split(c, dim=2)
            q = q.view(b, t, n_head, hs).transpose(1, 2)
            k = k.view(b, t, n_head, hs).transpose(1, 2)
            v = v.view(b, t, n_head, hs).transpose(1, 2)
            y = causal_attention(torch, q, k, v, hs, attention).transpose(1, 2).contiguous().view(b, t, c)
            return self.c_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(n_embd)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(context, n_embd)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                elif "ln_" in name:
                    nn.init.ones_(p)
                else:
                    std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                    nn.init.normal_(p, std=std)

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

    return GPT()


def build_torch_llama(torch, attention, device, kind, vocab, context, n_layer, n_head, n_kv_head, n_embd, ffn, rope_theta):
    """hypertrain's Llama written plainly: RMSNorm, rotate-half rotary embeddings, grouped-query attention
    (key/value heads repeated), SwiGLU, untied head, no biases, N(0, 0.02) matrices."""
    nn = torch.nn
    F = torch.nn.functional
    hs = n_embd // n_head
    inv_freq = 1.0 / (rope_theta ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
    angles = torch.outer(torch.arange(context, dtype=torch.float32), inv_freq)
    cos, sin = angles.cos().to(device), angles.sin().to(device)

    def rope(x):  # (b, heads, t, hs)
        t = x.shape[2]
        x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
        c, s_ = cos[:t], sin[:t]
        return torch.cat([x1 * c - x2 * s_, x2 * c + x1 * s_], dim=-1)

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n_embd))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(n_embd, n_embd, bias=False)
            self.k_proj = nn.Linear(n_embd, n_kv_head * hs, bias=False)
            self.v_proj = nn.Linear(n_embd, n_kv_head * hs, bias=False)
            self.o_proj = nn.Linear(n_embd, n_embd, bias=False)

        def forward(self, x):
            b, t, c = x.shape
            q = rope(self.q_proj(x).view(b, t, n_head, hs).transpose(1, 2))
            k = rope(self.k_proj(x).view(b, t, n_kv_head, hs).transpose(1, 2))
            v = self.v_proj(x).view(b, t, n_kv_head, hs).transpose(1, 2)
            k = k.repeat_interleave(n_head // n_kv_head, dim=1)
            v = v.repeat_interleave(n_head // n_kv_head, dim=1)
            y = causal_attention(torch, q, k, v, hs, attention)
            return self.o_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up = nn.Linear(n_embd, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, n_embd, bias=False)

        def forward(self, x):
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm()
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.self_attn(self.input_layernorm(x))
            return x + self.mlp(self.post_attention_layernorm(x))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab, n_embd)
            self.layers = nn.ModuleList([Block() for _ in range(n_layer)])
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            for name, p in self.named_parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx, targets):
            x = self.embed_tokens(idx)
            for block in self.layers:
                x = block(x)
            logits = self.lm_head(self.norm(x))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))

    return Llama()


def run_pytorch(torch, args, name):
    model_spec, batch, seq, warmup, steps = CONFIGS[name]
    batch = args.batch or batch
    seq = args.seq or seq
    warmup = warmup if args.warmup < 0 else args.warmup
    steps = args.steps or steps
    vocab = model_spec["vocab"]
    torch.manual_seed(1337)
    build = build_torch_gpt if model_spec["kind"] == "gpt" else build_torch_llama
    device = torch.device(args.device)
    model = build(torch, args.attention, device, **model_spec).to(device)
    autocast = torch.autocast(device_type=args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    # As hypertrain's AdamW: decay on matrices and embeddings, none on biases and norm gains (vectors).
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    no_decay = [p for n, p in model.named_parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    step_ms, losses = [], []
    cpu_ms = []
    for i in range(warmup + steps):
        c0 = time.process_time()
        t0 = time.perf_counter()
        idx = torch.randint(0, vocab, (batch, seq + 1), device=device)
        with autocast:
            loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()  # waits for the device: the optimizer's kernels were queued before
        ms = (time.perf_counter() - t0) * 1000.0
        if i >= warmup:
            step_ms.append(ms)
            cpu_ms.append((time.process_time() - c0) * 1000.0)
            losses.append(loss_value)
        print(f"# pytorch {name} {'step' if i >= warmup else 'warm-up'} "
              f"{i - warmup + 1 if i >= warmup else i + 1}: {ms:.1f} ms, loss {loss_value:.4f}",
              file=sys.stderr, flush=True)
    ms = statistics.median(step_ms)
    return {"num_parameters": sum(p.numel() for p in model.parameters()), "ms_per_step": ms,
            "cpu_ms_per_step": statistics.median(cpu_ms),
            "tokens_per_s": batch * seq * 1000.0 / ms, "batch": batch, "seq_len": seq, "steps": steps}


def main():
    args = parse_args()
    set_env(args)
    torch = import_torch()
    torch.set_num_threads(args.threads)
    names = GROUPS.get(args.config, [args.config])
    device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"# compare_pytorch: torch {torch.__version__} ({sys.executable}), device {device_name}, "
          f"precision {args.precision}, pytorch attention {args.attention}, threads {args.threads} on both sides, "
          f"{args.repeats} repeat(s), OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}", flush=True)
    print(f"# pytorch: {torch_blas_description()}", flush=True)
    final = []
    for name in names:
        ours_runs, theirs_runs = [], []
        for rep in range(args.repeats):
            run, ours = run_hypertrain(args, name)
            if rep == 0:
                print(f"# hypertrain: {run['build']}, gemm {run['gemm']}, {run['openblas']}, "
                      f"core {run['openblas_core']}, peak {run['peak_gflops']:.1f} GFLOP/s", flush=True)
            theirs = run_pytorch(torch, args, name)
            if theirs["num_parameters"] != ours["num_parameters"]:
                sys.exit(f"compare_pytorch: parameter counts differ: hypertrain {ours['num_parameters']}, "
                         f"pytorch {theirs['num_parameters']}")
            assert (theirs["batch"], theirs["seq_len"]) == (ours["batch"], ours["seq_len"])
            ours_runs.append(ours)
            theirs_runs.append(theirs)
            print(f"{name} | hypertrain {ours['tokens_per_s']:.1f} tok/s {ours['ms_per_step']:.1f} ms/step "
                  f"(cpu {ours['cpu_ms_per_step']:.0f} ms) | pytorch {theirs['tokens_per_s']:.1f} tok/s "
                  f"{theirs['ms_per_step']:.1f} ms/step (cpu {theirs['cpu_ms_per_step']:.0f} ms) | "
                  f"ratio {ours['tokens_per_s'] / theirs['tokens_per_s']:.3f} | "
                  f"cpu ratio {theirs['cpu_ms_per_step'] / ours['cpu_ms_per_step']:.3f}", flush=True)
        ours_tps = statistics.median(r["tokens_per_s"] for r in ours_runs)
        theirs_tps = statistics.median(r["tokens_per_s"] for r in theirs_runs)
        ratio = statistics.median(a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(ours_runs, theirs_runs))
        cpu_ratio = statistics.median(b["cpu_ms_per_step"] / a["cpu_ms_per_step"]
                                      for a, b in zip(ours_runs, theirs_runs))
        print(f"config {name} | {ours_runs[0]['model']} | batch {ours_runs[0]['batch']} x {ours_runs[0]['seq_len']} "
              f"| hypertrain {ours_tps:.1f} tok/s | pytorch {theirs_tps:.1f} tok/s | ratio {ratio:.3f} "
              f"| cpu ratio {cpu_ratio:.3f}", flush=True)
        final.append(ratio)
    print(f"ratio {min(final):.2f}")


if __name__ == "__main__":
    main()
