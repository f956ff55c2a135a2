#!/usr/bin/python3
# A training program under several layouts against one process: each layout
# trains on the same global batch, so its per-step losses and its validation
# loss and metrics (metrics.jsonl) must equal one process's, and a
# checkpoint saved under one layout must resume under another on the
# uninterrupted run's losses.
#
#   layouts.py PROGRAM MPIEXEC WORK CASE [PROGRAM ARGS...]
#
# CASE
#   pipelines   pp 2 under 1F1B, GPipe, ZB-H1 and interleaved (v 2)
#   splits      pp 2 with stages of 1 + 3 and 3 + 1 layers (a model of 4)
#   mixed       dp 2 ZeRO-3 (also with full recomputation), tp 2, tp 2 x pp 2,
#               dp 2 x pp 2 (ZeRO-1)
#   bf16        one process and dp 2 ZeRO-3 in bf16: within bf16's rounding of
#               each other and of fp32
#   resume      a dp 2 ZeRO-3 checkpoint of step 3 resumed under pp 2 x
#               accumulation 4, under tp 2 and under one process: steps 4-6
#               on the uninterrupted run's losses
# The PROGRAM ARGS (the model's size, the data) go to every run. Layouts keep
# the global batch at 32 rows (16 for resume).
import json
import os
import shutil
import subprocess
import sys

REL_TOL = 1e-5
STEPS = 6


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def run(name, np_, flags):
    run_dir = os.path.join(WORK, name)
    cmd = ([MPIEXEC, "-np", str(np_), "--oversubscribe", "--bind-to", "none"] if np_ > 1 else []) + \
        [PROGRAM, "--run-dir", run_dir, "--steps", str(STEPS), "--eval-every", "0", "--eval-samples", "24",
         "--warmup", "2", "--seed", "5"] + ARGS + flags
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
    out = p.stdout.decode("utf-8", "replace")
    with open(os.path.join(WORK, name + ".txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + out)
    if p.returncode != 0:
        print(out[-4000:])
        fail(f"{name}: {' '.join(cmd)} exited {p.returncode}")
    steps, evals = {}, []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["type"] == "step":
                steps[r["step"]] = r["loss"]
            elif r["type"] == "eval":
                evals.append(r)
    # An evaluation is labelled with the step it follows: a fresh run's first
    # before step 1, the last after the last step.
    resumed = "--resume" in flags
    if not evals or evals[-1]["step"] != STEPS or (not resumed and evals[0]["step"] != 0):
        fail(f"{name}: evaluations labelled {[e['step'] for e in evals]}, not 0 (fresh runs) ... {STEPS}")
    return steps, evals, out


def close(a, b, tol):
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-12)


def compare(name, got, want, tol=REL_TOL, first_step=1):
    steps, evals, _ = got
    want_steps, want_evals, _ = want
    for s in range(first_step, STEPS + 1):
        if s not in steps or not close(steps[s], want_steps[s], tol):
            fail(f"{name}: step {s} loss {steps.get(s)} against one process's {want_steps[s]} (rel tol {tol})")
    last, want_last = evals[-1], want_evals[-1]
    for key, value in want_last.items():
        if key.startswith("val_") and key != "val_samples" and not close(last.get(key, float("nan")), value, tol):
            fail(f"{name}: {key} {last.get(key)} against one process's {value} (rel tol {tol})")
    print(f"{name}: steps {first_step}-{STEPS} and validation ({', '.join(k for k in want_last if k.startswith('val_'))})"
          f" equal one process's within {tol:g}")


def main():
    global PROGRAM, MPIEXEC, WORK, ARGS
    if len(sys.argv) < 5:
        print(f"usage: {sys.argv[0]} PROGRAM MPIEXEC WORK CASE [ARGS...]", file=sys.stderr)
        return 2
    PROGRAM, MPIEXEC, WORK, case = sys.argv[1:5]
    ARGS = sys.argv[5:]
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    if case == "pipelines":
        one = run("one", 1, ["--micro-batch", "8", "--grad-accum", "4"])
        for schedule, extra in [("1f1b", []), ("gpipe", []), ("zb-h1", []), ("interleaved", ["--virtual-stages", "2"])]:
            got = run(f"pp2_{schedule}", 2, ["--pp", "2", "--schedule", schedule, "--micro-batch", "8",
                                              "--grad-accum", "4"] + extra)
            compare(f"pp 2 {schedule}", got, one)
    elif case == "splits":
        one = run("one", 1, ["--micro-batch", "8", "--grad-accum", "4"])
        for split in ["1,3", "3,1"]:
            got = run(f"pp2_split_{split.replace(',', '_')}", 2, ["--pp", "2", "--stage-layers", split,
                                                                   "--micro-batch", "8", "--grad-accum", "4"])
            compare(f"pp 2 stages of {split} layers", got, one)
    elif case == "mixed":
        one = run("one", 1, ["--micro-batch", "8", "--grad-accum", "4"])
        for name, np_, flags in [("dp2_zero3", 2, ["--zero", "3", "--micro-batch", "4"]),
                                 ("dp2_zero3_recompute", 2, ["--zero", "3", "--micro-batch", "4", "--recompute", "full"]),
                                 ("tp2", 2, ["--tp", "2", "--micro-batch", "8"]),
                                 ("tp2_pp2", 4, ["--tp", "2", "--pp", "2", "--micro-batch", "8"]),
                                 ("dp2_pp2_zero1", 4, ["--pp", "2", "--zero", "1", "--micro-batch", "4"])]:
            compare(name, run(name, np_, flags + ["--grad-accum", "4"]), one)
    elif case == "bf16":
        fp32 = run("fp32", 1, ["--micro-batch", "8", "--grad-accum", "4"])
        one = run("bf16", 1, ["--micro-batch", "8", "--grad-accum", "4", "--precision", "bf16"])
        compare("bf16 against fp32", one, fp32, tol=3e-2)
        compare("bf16 dp 2 ZeRO-3", run("bf16_dp2_zero3", 2, ["--micro-batch", "4", "--grad-accum", "4", "--zero", "3",
                                                               "--precision", "bf16"]), one, tol=1e-2)
    elif case == "resume":
        ckpt = os.path.join(WORK, "ckpt")
        whole = run("whole", 2, ["--zero", "3", "--micro-batch", "4", "--grad-accum", "2", "--ckpt-dir", ckpt,
                                 "--ckpt-every", "3", "--mem-ckpt-every", "0"])
        saved = sorted(d for d in os.listdir(ckpt) if d.startswith("step_"))
        if saved[:1] != ["step_00000003"]:
            fail(f"the dp 2 run saved {saved}, not step 3 first")
        for name, np_, flags in [("pp2_accum4", 2, ["--pp", "2", "--micro-batch", "4", "--grad-accum", "4"]),
                                 ("tp2", 2, ["--tp", "2", "--micro-batch", "8", "--grad-accum", "2"]),
                                 ("one", 1, ["--micro-batch", "16", "--grad-accum", "1"])]:
            mine = os.path.join(WORK, "ckpt_" + name)
            shutil.copytree(ckpt, mine)
            for d in saved[1:]:
                shutil.rmtree(os.path.join(mine, d))
            got = run("resumed_" + name, np_, flags + ["--ckpt-dir", mine, "--resume", "auto", "--mem-ckpt-every", "0"])
            if "# resumed from step 3" not in got[2]:
                fail(f"{name} did not resume from step 3:\n{got[2][-2000:]}")
            compare(f"dp 2 ZeRO-3's step 3 resumed under {name}", got, whole, first_step=4)
    else:
        fail(f"unknown case {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
