#!/usr/bin/env bash
# What the run directory sees of training under htrun: gpt_train on 8
# simulated hosts (one rank each) for 120 steps, with an inotify watch of
# the whole directory tree. During the 100 steps of steady training (from
# step 10 to step 110, by the step records' own times) only checkpoints may
# be created or renamed there (metrics.jsonl and the logs are appended, not
# created); nothing per rank per heartbeat, ever: the ranks report to their
# node agents.
#   run_dir_writes.sh HTRUN GPT_TRAIN WORK
set -euo pipefail
htrun="$1" gpt="$2" work="$3"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL (run_dir_writes): $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work/run"
for i in $(seq 300); do echo "pack my box with five dozen liquor jugs $i"; done > "$work/text.txt"

# The watch: inotify on every directory of the tree (new ones as they come),
# one line per create or rename into it: "<ms since the epoch> <path>".
python3 - "$work/run" > "$work/events.txt" 2> "$work/watch.err" <<'PY' &
import ctypes, os, struct, sys, time
libc = ctypes.CDLL("libc.so.6", use_errno=True)
IN_CREATE, IN_MOVED_TO, IN_ISDIR = 0x100, 0x80, 0x40000000
fd = libc.inotify_init()
watches = {}
def watch(path):
    wd = libc.inotify_add_watch(fd, path.encode(), IN_CREATE | IN_MOVED_TO)
    if wd >= 0:
        watches[wd] = path
root = sys.argv[1]
watch(root)
print("# watching", flush=True)
while True:
    data = os.read(fd, 65536)
    now_ms = int(time.time() * 1000)
    at = 0
    while at < len(data):
        wd, mask, cookie, size = struct.unpack_from("iIII", data, at)
        name = data[at + 16:at + 16 + size].rstrip(b"\0").decode(errors="replace")
        at += 16 + size
        path = os.path.join(watches.get(wd, "?"), name)
        print(now_ms, os.path.relpath(path, root), flush=True)
        if mask & IN_ISDIR:
            watch(path)
PY
watcher=$!
trap 'kill $watcher 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "# watching" "$work/events.txt" 2>/dev/null && break; sleep 0.05; done

"$htrun" --local --nodes 8 --slots 1 --run-dir "$work/run" --backoff 0.2 --hang-timeout 30 -- "$gpt" \
  --text "$work/text.txt" --layers 2 --heads 2 --embd 64 --context 64 --seq-len 64 --micro-batch 2 --eval-every 0 \
  --eval-samples 8 --sample-tokens 0 --heartbeat 0.1 --steps 120 --ckpt-every 50 > "$work/htrun.log" 2>&1 \
  || { tail -20 "$work/htrun.log"; fail "the run did not finish"; }
sleep 0.5
kill $watcher 2>/dev/null || true

python3 - "$work/run/metrics.jsonl" "$work/events.txt" <<'PY' || fail "the run directory saw more than checkpoints, metrics and logs"
import json, sys
steps = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") == "step":
        steps[r["step"]] = r["time_ms"]
start, end = steps[10], steps[110]
events = [l.split(" ", 1) for l in open(sys.argv[2]) if not l.startswith("#")]
events = [(int(t), p.strip()) for t, p in events]
window = [p for t, p in events if start <= t <= end]
others = [p for p in window if not p.startswith("checkpoints")]
per_rank = [p for t, p in events if p.split("/")[0] in ("heartbeat", "exit")]
print(f"# steady training, steps 10-110 ({(end - start) / 1000:.1f} s, 8 ranks): {len(window)} created or renamed, "
      f"{len(window) - len(others)} under checkpoints/, {len(others)} elsewhere; whole run: {len(events)}, "
      f"{len(per_rank)} per-rank records")
if others:
    print("elsewhere:", sorted(set(others))[:20])
if per_rank:
    print("per-rank records:", sorted(set(per_rank))[:20])
sys.exit(1 if others or per_rank else 0)
PY
echo "run_dir_writes: passed"
