"""What gpt_torch_check.py and llama_torch_check.py share: for every case an
exporter (tests/reference/*_reference_export.cc) knows, the loss, every
parameter gradient and one AdamW step must match the same model in PyTorch
loaded with the same weights.

Tolerances. Relative error of a tensor = max|a - b| / max(max|b|, tiny), b the
reference. Loss and gradients: 1e-5 against PyTorch in float32 (the spec).
Float64 PyTorch is printed alongside as a diagnosis: when hypertrain is right,
both float32 implementations sit at about the same distance from it.
AdamW: PyTorch's AdamW is given hypertrain's own gradients, so the step is
checked on its own, to 1e-6 relative. Relative (not absolute 1e-6) because the
decoupled weight decay moves a weight of 0.02 by only lr * wd * 0.02 = 2e-6:
an absolute 1e-6 would barely see it missing, while 1e-6 of a matrix's largest
value (~0.08) is ~1e-7, which any error in the update or the decay exceeds,
and which float32 rounding (~1e-8 at 0.08) stays far below. Given PyTorch's
own gradients instead, Adam's first step (about lr * sign(g)) would turn
rounding-level differences in near-zero gradients into full +-lr moves; that
comparison is printed, not checked. Weight decay applies to the 2-D
parameters (matrices, embeddings) and not to biases and norm gains, in both
libraries.
"""
import os
import subprocess
import sys

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:
    print(f"torch_check: FAIL: cannot import {e.name} in {sys.executable}: {e}\n"
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


def load_params(model, f):
    """Copies the exported initial values into `model`; SystemExit naming what does not match."""
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
    return model


def loss_and_grads(build, f, dtype):
    model = build(f, dtype)
    tokens = torch.from_numpy(f["tokens"][()]).long()
    targets = torch.from_numpy(f["targets"][()]).long()
    loss = model(tokens, targets)
    loss.backward()
    return float(loss), {n: p.grad.detach().double().numpy() for n, p in model.named_parameters()}


def adamw(model, a, grads):
    """One step of PyTorch's AdamW on `model` from `grads` (name -> array);
    weight decay on the 2-D parameters only."""
    for n, p in model.named_parameters():
        p.grad = torch.as_tensor(grads[n]).float()
    torch.optim.AdamW([{"params": [p for p in model.parameters() if p.dim() >= 2],
                        "weight_decay": float(a["weight_decay"])},
                       {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}],
                      lr=float(a["lr"]), betas=(float(a["beta1"]), float(a["beta2"])), eps=float(a["eps"])).step()


def check_case(build, describe, name, path, worst_overall):
    """Returns a list of failure lines (empty when the case passes)."""
    failures = []
    with h5py.File(path, "r") as f:
        a = f.attrs
        print(f"== {name}: {describe(a)}, batch {int(a['batch'])} x {int(a['seq_len'])}")
        ht_loss = float(f["loss"][()])
        loss32, g32 = loss_and_grads(build, f, torch.float32)
        loss64, g64 = loss_and_grads(build, f, torch.float64)
        e = abs(ht_loss - loss32) / max(abs(loss32), TINY)
        worst_overall["loss"] = max(worst_overall["loss"], (e, name))
        print(f"loss: hypertrain {ht_loss:.8f}  torch f32 {loss32:.8f}  f64 {loss64:.8f}  rel err vs f32 {e:.2e}")
        if not e <= LOSS_GRAD_TOL:
            failures.append(f"{name}: loss {ht_loss} vs PyTorch {loss32}: rel err {e:.2e} > {LOSS_GRAD_TOL:g}")

        print(f"{'gradient':<40} {'ht vs f32':>10} {'ht vs f64':>10} {'f32 vs f64':>10}")
        worst = ("", 0.0)
        for n in g32:
            ht = f["grads"][n][()]
            e32, e64, e_t = rel_err(ht, g32[n]), rel_err(ht, g64[n]), rel_err(g32[n], g64[n])
            flag = "" if e32 <= LOSS_GRAD_TOL else "  <-- FAIL"
            print(f"  {n:<38} {e32:10.2e} {e64:10.2e} {e_t:10.2e}{flag}")
            if not e32 <= LOSS_GRAD_TOL:
                failures.append(f"{name}: grad {n}: rel err {e32:.2e} > {LOSS_GRAD_TOL:g} "
                                f"(max|ht| {np.abs(ht).max():.3e}, max|torch| {np.abs(g32[n]).max():.3e})")
            if e32 >= worst[1]:
                worst = (n, e32)
        print(f"worst gradient: {worst[0]} {worst[1]:.2e}")
        worst_overall["grad"] = max(worst_overall["grad"], (worst[1], f"{name}: {worst[0]}"))

        # AdamW: weight decay on the 2-D parameters, not on biases and norm
        # gains; hypertrain's per-parameter flag must agree.
        model = build(f, torch.float32)
        for n, p in model.named_parameters():
            ht_flag = bool(f["params"][n].attrs["weight_decay"])
            if ht_flag != (p.dim() >= 2):
                failures.append(f"{name}: {n} ({p.dim()}-D): hypertrain weight_decay={ht_flag}, "
                                f"the convention is {p.dim() >= 2}")
        adamw(model, a, {n: f["grads"][n][()] for n in g32})
        print(f"{'after AdamW step':<40} {'rel err':>10} {'abs err':>10}")
        worst = ("", 0.0)
        for n, p in model.named_parameters():
            ht = f["after_step"][n][()]
            ref = p.detach().numpy()
            e, ea = rel_err(ht, ref), float(np.max(np.abs(ht.astype(np.float64) - ref)))
            flag = "" if e <= ADAMW_TOL else "  <-- FAIL"
            print(f"  {n:<38} {e:10.2e} {ea:10.2e}{flag}")
            if not e <= ADAMW_TOL:
                failures.append(f"{name}: after_step {n}: rel err {e:.2e} > {ADAMW_TOL:g} (abs {ea:.2e})")
            if e >= worst[1]:
                worst = (n, e)
        print(f"worst AdamW step: {worst[0]} {worst[1]:.2e}")
        worst_overall["adamw"] = max(worst_overall["adamw"], (worst[1], f"{name}: {worst[0]}"))

        # Informational: the same step from PyTorch's own float32 gradients.
        own = build(f, torch.float32)
        adamw(own, a, g32)
        diffs = [np.abs(f["after_step"][n][()] - p.detach().numpy()) for n, p in own.named_parameters()]
        moved = sum(int((d > ADAMW_TOL).sum()) for d in diffs)
        total = sum(d.size for d in diffs)
        print(f"(info, not checked) AdamW from PyTorch's own gradients: max abs diff "
              f"{max(float(d.max()) for d in diffs):.2e}, {moved}/{total} elements differ by > {ADAMW_TOL:g}")
    return failures


def main(program, build, describe):
    """Runs every case of the exporter named on the command line; returns the exit status."""
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} EXPORTER WORKDIR", file=sys.stderr)
        return 2
    exporter, workdir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    os.makedirs(workdir, exist_ok=True)
    print(f"# torch {torch.__version__}, h5py {h5py.__version__}, numpy {np.__version__}, python {sys.executable}")
    cases = subprocess.run([exporter, "--list"], check=True, capture_output=True, text=True).stdout.split()
    if not cases:
        print(f"{program}: FAIL: the exporter lists no cases", file=sys.stderr)
        return 1
    failures = []
    worst = {"loss": (0.0, ""), "grad": (0.0, ""), "adamw": (0.0, "")}
    for case in cases:
        path = os.path.join(workdir, f"{case}.h5")
        if os.path.exists(path):
            os.remove(path)
        subprocess.run([exporter, case, path], check=True)
        failures += check_case(build, describe, case, path, worst)
    print(f"\n# worst relative errors vs PyTorch f32: loss {worst['loss'][0]:.2e} ({worst['loss'][1]}), "
          f"gradient {worst['grad'][0]:.2e} ({worst['grad'][1]}), AdamW step {worst['adamw'][0]:.2e} "
          f"({worst['adamw'][1]})")
    if failures:
        print(f"\n{program}: FAIL: {len(failures)} mismatch(es) with PyTorch:", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"\n{program}: PASS ({len(cases)} cases)")
    return 0

