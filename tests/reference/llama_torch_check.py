#!/usr/bin/python3
# Checks hypertrain's Llama against PyTorch: for every case
# llama_reference_export knows, the loss, every parameter gradient and one
# AdamW step must match the Llama of llama_torch.py loaded with the same
# weights (the checks and tolerances: torch_check.py).
#
#   llama_torch_check.py EXPORTER WORKDIR
#
# Run it with Debian's /usr/bin/python3, which sees python3-torch and
# python3-h5py (installed by scripts/setup.sh). Exits 0 when every check
# passes, 1 with a report of the worst mismatches otherwise.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_check  # noqa: E402  (first: it reports a missing torch or h5py)
import llama_torch  # noqa: E402


def build(f, dtype):
    a = f.attrs
    model = llama_torch.Llama(int(a["vocab_size"]), int(a["context"]), int(a["n_layer"]), int(a["n_head"]),
                              int(a["n_kv_head"]), int(a["n_embd"]), int(a["ffn_hidden"]),
                              theta=float(a["rope_theta"]), eps=float(a["norm_eps"]))
    try:
        model.load({n: f["params"][n][()] for n in f["params"].keys()})
    except ValueError as e:
        raise SystemExit(f"llama_torch_check: FAIL: {e}")
    return model.to(dtype)


def describe(a):
    return (f"L{int(a['n_layer'])} H{int(a['n_head'])} KV{int(a['n_kv_head'])} C{int(a['n_embd'])} "
            f"F{int(a['ffn_hidden'])} V{int(a['vocab_size'])} T{int(a['context'])} theta{float(a['rope_theta']):g}")


if __name__ == "__main__":
    sys.exit(torch_check.main("llama_torch_check", build, describe))
