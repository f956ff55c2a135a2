#!/usr/bin/env python3
"""Safetensors and token shards between Python and hypertrain, both ways.

Python writes the files byte by byte from the formats' descriptions (struct,
json, numpy; no safetensors package) and hypertrain reads them
(format_interop st-dump / tok-dump): the same values. hypertrain writes files
(st-write / tok-write) and the hand-written parsers here read them: the same
values, and the checksums of hypertrain's token shards recomputed here.

usage: interop_check.py FORMAT_INTEROP WORKDIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

TOOL, WORK = sys.argv[1], sys.argv[2]
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def tool(*args):
    out = subprocess.run([TOOL, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"format_interop {' '.join(args)} failed: {out.stderr}")
    return out.stdout


# ---------------------------------------------------------------- safetensors
def bf16_bytes(values):
    bits = np.asarray(values, dtype=np.float32).view(np.uint32) >> 16  # exact for these values
    return bits.astype("<u2").tobytes()


def encode(dtype, values):
    if dtype == "F32":
        return np.asarray(values, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.asarray(values, dtype="<f2").tobytes()
    if dtype == "BF16":
        return bf16_bytes(values)
    if dtype == "I32":
        return np.asarray(values, dtype="<i4").tobytes()
    raise ValueError(dtype)


def decode(dtype, raw):
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float64).tolist()
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float64).tolist()
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64).tolist()
    if dtype == "I32":
        return np.frombuffer(raw, dtype="<i4").tolist()
    raise ValueError(dtype)


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, values); data in that order."""
    header, blobs, at = {}, [], 0
    for name, dtype, shape, values in tensors:
        b = encode(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()  # no padding: readers must not need it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n :]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        out[name] = {"dtype": e["dtype"], "shape": e["shape"], "values": decode(e["dtype"], body[b:end])}
    return out, meta


def values(n, salt, integer=False):
    if integer:
        return [int((i * 7 + salt) % 23 - 11 + (100000 if i % 3 == 0 else 0)) for i in range(n)]
    return [float((i * 7 + salt) % 23 - 11) * 0.5 for i in range(n)]


def numel(shape):
    return int(np.prod(shape)) if shape else 1


SPECS = [  # name, dtype, shape
    ("w.f32", "F32", [3, 5]),
    ("w.f16", "F16", [4, 2, 3]),
    ("w.bf16", "BF16", [7]),
    ("ids", "I32", [2, 6]),
    ("scalar", "F32", []),
    ("empty", "BF16", [0, 4]),
    ("emb", "F32", [5, 3]),
]
TENSORS = [(n, d, s, values(numel(s), k, d == "I32")) for k, (n, d, s) in enumerate(SPECS)]
EXPECTED = {n: {"dtype": d, "shape": s, "values": v} for n, d, s, v in TENSORS}

# Python writes, hypertrain reads: one file with its data in reverse name order.
py_file = os.path.join(WORK, "py.safetensors")
write_safetensors(py_file, list(reversed(TENSORS)), {"format": "pt"})
check(json.loads(tool("st-dump", py_file)) == EXPECTED, "safetensors written by Python, read by hypertrain")

# Python writes a sharded checkpoint and its index by hand.
shard_dir = os.path.join(WORK, "py_sharded")
os.makedirs(shard_dir)
weight_map, total = {}, 0
parts = [TENSORS[:3], TENSORS[3:]]
for i, part in enumerate(parts):
    name = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
    write_safetensors(os.path.join(shard_dir, name), part)
    for t in part:
        weight_map[t[0]] = name
        total += len(encode(t[1], t[3]))
with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
check(json.loads(tool("st-dump", shard_dir)) == EXPECTED, "sharded safetensors + index written by Python, read by hypertrain")

# hypertrain writes, Python reads: one file, then shards of at most 100 bytes.
spec = {"tensors": [{"name": n, "dtype": d.lower(), "shape": s, "values": v} for n, d, s, v in TENSORS],
        "metadata": {"format": "pt", "source": "hypertrain"}}
spec_path = os.path.join(WORK, "spec.json")
with open(spec_path, "w") as f:
    json.dump(spec, f)
ht_file = os.path.join(WORK, "ht.safetensors")
tool("st-write", spec_path, ht_file)
got, meta = read_safetensors(ht_file)
check(got == EXPECTED, "safetensors written by hypertrain, read by Python")
check(meta == {"format": "pt", "source": "hypertrain"}, "its __metadata__")
with open(ht_file, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
check((8 + n) % 8 == 0, "the data section starts 8-byte aligned")

spec["max_shard_bytes"] = 100
with open(spec_path, "w") as f:
    json.dump(spec, f)
ht_dir = os.path.join(WORK, "ht_sharded")
tool("st-write", spec_path, ht_dir)
with open(os.path.join(ht_dir, "model.safetensors.index.json")) as f:
    index = json.load(f)
got = {}
for file in sorted(set(index["weight_map"].values())):
    tensors, _ = read_safetensors(os.path.join(ht_dir, file))
    for name in tensors:
        check(index["weight_map"][name] == file, f"index puts {name} in {file}")
    got.update(tensors)
check(got == EXPECTED, "sharded safetensors written by hypertrain, read by Python through the index")
check(index["metadata"]["total_size"] == sum(len(encode(d, v)) for _, d, _, v in TENSORS), "index total_size")
check(len(set(index["weight_map"].values())) > 1, "several shards")

# --------------------------------------------------------------- token shards
M64 = (1 << 64) - 1
FNV_OFFSET, FNV_PRIME = 0xCBF29CE484222325, 0x100000001B3


def fold(h, v):
    return ((h ^ v) * FNV_PRIME) & M64


def fnv1a(data):
    h = FNV_OFFSET
    for c in data:
        h = fold(h, c)
    return h


def checksum64(data):
    """ht::ckpt::checksum64: four FNV-1a lanes over interleaved 8-byte words, then the tail."""
    n = len(data)
    lanes = [FNV_OFFSET ^ n, 0x84222325CBF29CE4, 0x9CE484222325CBF2, 0x2325CBF29CE48422]
    words = np.frombuffer(data[: n - n % 32], dtype="<u8").tolist()
    for i in range(0, len(words), 4):
        for k in range(4):
            lanes[k] = fold(lanes[k], words[i + k])
    h = lanes[0]
    for k in range(1, 4):
        h = fold(h, lanes[k])
    for i in range(n - n % 32, n, 8):
        h = fold(h, int.from_bytes(data[i : i + 8].ljust(8, b"\0"), "little"))
    return h


def write_llmc(path, tokens, magic, version, dtype):
    """llm.c's dev/data/data_common.py write_datafile: 256 int32 of header, then the tokens."""
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = magic, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=dtype).tobytes())


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] == b"HTTOKENS":
        version, width, count, vocab, tsum, hsum = struct.unpack("<IIQQQQ", data[8:48])
        check(version == 1 and hsum == fnv1a(data[:40]), f"{os.path.basename(path)}: header version and checksum")
        body = data[1024:]
        check(len(body) == count * width and tsum == checksum64(body), f"{os.path.basename(path)}: token checksum")
        return np.frombuffer(body, dtype="<u2" if width == 2 else "<u4").tolist(), width
    magic, version, count = struct.unpack("<iii", data[:12])
    width = {(20240520, 1): 2, (20240801, 7): 4}[(magic, version)]
    body = data[1024:]
    check(len(body) == count * width, f"{os.path.basename(path)}: llm.c size")
    return np.frombuffer(body, dtype="<u2" if width == 2 else "<u4").tolist(), width


rng = np.random.default_rng(5)
gpt2 = rng.integers(0, 50257, size=5000).tolist()
llama = rng.integers(0, 128256, size=3000).tolist()
write_llmc(os.path.join(WORK, "fineweb_train_000001.bin"), gpt2, 20240520, 1, "<u2")
write_llmc(os.path.join(WORK, "llama_train_000001.bin"), llama, 20240801, 7, "<u4")
with open(os.path.join(WORK, "train.bin"), "wb") as f:  # nanoGPT: raw uint16
    f.write(np.asarray(gpt2, dtype="<u2").tobytes())
check(json.loads(tool("tok-dump", os.path.join(WORK, "fineweb_*.bin"))) == gpt2, "llm.c GPT-2 shard written by Python")
check(json.loads(tool("tok-dump", os.path.join(WORK, "llama_*.bin"))) == llama, "llm.c Llama 3 shard written by Python")
check(json.loads(tool("tok-dump", "raw-uint16:" + os.path.join(WORK, "train.bin"))) == gpt2, "nanoGPT train.bin")
check(json.loads(tool("tok-dump", os.path.join(WORK, "fineweb_*.bin") + "," + os.path.join(WORK, "llama_*.bin")))
      == gpt2 + llama, "two shards read as one sequence")

ids_path = os.path.join(WORK, "ids.json")
for name, tokens, fmt, width in [("ht16.bin", gpt2, "ht", 0), ("ht32.bin", llama, "ht", 0),
                                 ("ht32w.bin", gpt2, "ht", 4), ("llmc16.bin", gpt2, "llmc", 0),
                                 ("llmc32.bin", llama, "llmc", 0)]:
    with open(ids_path, "w") as f:
        json.dump(tokens, f)
    tool("tok-write", ids_path, os.path.join(WORK, name), fmt, str(width))
    got, got_width = read_shard(os.path.join(WORK, name))
    check(got == tokens, f"{name} written by hypertrain, read by Python ({got_width}-byte tokens)")

if failures:
    print(f"# {len(failures)} check(s) failed")
    sys.exit(1)
print("# all checks passed")
