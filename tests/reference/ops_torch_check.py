"""The ops on Vars against PyTorch: for every case ops_reference_export
knows, the output and the input's gradient (backward from the same upstream
gradient) must equal PyTorch's on the same inputs, computed in float64,
within 1e-5 relative (max |a - b| / max |b|).

usage: ops_torch_check.py EXPORTER WORKDIR
"""
import os
import subprocess
import sys

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:
    print(f"ops_torch_check: FAIL: cannot import {e.name} in {sys.executable}: {e}\n"
          "  run scripts/setup.sh (installs python3-torch, python3-h5py and python3-numpy for /usr/bin/python3)",
          file=sys.stderr)
    sys.exit(1)

TOL = 1e-5


def cross_entropy(f, x):
    v = x.shape[-1]
    targets = torch.from_numpy(f["targets"][...]).long()
    ignore = int(f.attrs["ignore_index"])
    reduction = "sum" if f.attrs["sum"] else "mean"
    out = torch.nn.functional.cross_entropy(x.reshape(-1, v), targets.reshape(-1), ignore_index=ignore,
                                            label_smoothing=float(f.attrs["label_smoothing"]), reduction=reduction)
    count = int((targets != ignore).sum())
    if int(f.attrs["count"]) != count:
        raise AssertionError(f"count_targets gave {int(f.attrs['count'])}, PyTorch counts {count}")
    return out


def split_concat(f, x):
    a, b, c = x.split([1, 3, 2], -1)
    return torch.cat([c * 2, a, b], -1)


def attention(f, x):
    """q, k, v cut from x as the exporter does; 4 query heads of 6 share 2
    key/value heads; the softmax materialised, masks as -inf; segment ids
    (document masking): query i sees key j only when their ids are equal."""
    tq = int(f.attrs["tq"])
    b = x.shape[0]
    q, kv = x[:, :tq], x[:, tq:]
    k, v = kv[..., :12], kv[..., 12:]
    tk = k.shape[1]
    qh = q.reshape(b, tq, 4, 6).transpose(1, 2)
    kh = k.reshape(b, tk, 2, 6).transpose(1, 2).repeat_interleave(2, dim=1)
    vh = v.reshape(b, tk, 2, 6).transpose(1, 2).repeat_interleave(2, dim=1)
    scores = qh @ kh.transpose(-1, -2) / 6 ** 0.5
    allowed = torch.from_numpy(f["key_mask"][...] != 0)[:, None, None, :].expand(b, 1, tq, tk)
    if f.attrs["causal"]:
        allowed = allowed & torch.ones(tq, tk, dtype=torch.bool).tril(diagonal=int(f.attrs["offset"]))
    if "segment_ids" in f:
        seg = torch.from_numpy(f["segment_ids"][...])
        allowed = allowed & (seg[:, None, :, None] == seg[:, None, None, :])
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, -1) @ vh
    return out.transpose(1, 2).reshape(b, tq, 24)


OPS = {
    "cross_entropy_": cross_entropy,
    "attention_": attention,
    "concat_narrow": lambda f, x: torch.cat([x[:, 2:5], x, x[:, 0:2]], 1),
    "split_concat": split_concat,
    "transpose_0_2": lambda f, x: x.transpose(0, 2),
    "transpose_1_2": lambda f, x: x.transpose(-1, 1),
    "softmax_of_transpose": lambda f, x: torch.softmax(x.transpose(1, 2), -1),
    "softmax": lambda f, x: torch.softmax(x, -1),
    "log_softmax": lambda f, x: torch.log_softmax(x, -1),
}


def op_of(case):
    if case in OPS:
        return OPS[case]
    for prefix, fn in OPS.items():
        if prefix.endswith("_") and case.startswith(prefix):
            return fn
    raise KeyError(f"no PyTorch reference for case {case}")


def rel_err(a, b):
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
    return float(np.max(np.abs(a - b))) / scale if b.size else 0.0


def check(exporter, workdir, case):
    path = os.path.join(workdir, case + ".h5")
    subprocess.run([exporter, case, path], check=True)
    with h5py.File(path, "r") as f:
        x = torch.tensor(f["x"][...], dtype=torch.float64, requires_grad=True)
        out = op_of(case)(f, x)
        out.backward(torch.tensor(f["dout"][...], dtype=torch.float64).reshape(out.shape))
        got_out = np.asarray(f["out"][...], np.float64)
        if got_out.shape != tuple(out.shape):
            print(f"{case}: FAIL: output shape {got_out.shape}, PyTorch's {tuple(out.shape)}")
            return False
        errs = {"out": rel_err(got_out, out.detach().numpy()),
                "dx": rel_err(np.asarray(f["dx"][...], np.float64), x.grad.numpy())}
    bad = {k: e for k, e in errs.items() if not e <= TOL}
    print(f"{case}: " + ", ".join(f"{k} {e:.2e}" for k, e in errs.items()) + (" FAIL" if bad else " ok"))
    return not bad


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    exporter, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    cases = subprocess.run([exporter, "--list"], check=True, capture_output=True, text=True).stdout.split()
    if not cases:
        print("ops_torch_check: FAIL: the exporter lists no case", file=sys.stderr)
        return 1
    ok = [check(exporter, workdir, c) for c in cases]
    print(f"ops_torch_check: {sum(ok)} of {len(ok)} cases match PyTorch")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
