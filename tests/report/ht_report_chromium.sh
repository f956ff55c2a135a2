#!/usr/bin/env bash
# ht-report end to end: a 20-step gpt_train run with checkpoints, and a copy of
# it with a hand-written htrun_report.json and htrun_job.log (two launches,
# two incidents); ht-report writes each page; headless Chromium loads it with
# no console message, draws one loss point per step (the DOM it dumps after the
# page's script ran), and saves a screenshot of the second in WORK. Missing or empty run
# directories fail with a message naming the file. Skips when chromium is not
# installed (scripts/setup.sh installs it).
#   ht_report_chromium.sh HT_REPORT GPT_TRAIN WORK
set -euo pipefail
report="$1"; gpt="$2"; work="$3"
fail() { echo "FAIL: $*"; exit 1; }
if ! command -v chromium > /dev/null; then
  echo "SKIPPED: chromium is not installed (apt-get install chromium, or scripts/setup.sh)"
  exit 0
fi
rm -rf "$work"; mkdir -p "$work"
for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"

# Errors: which file is missing and what to run.
if "$report" "$work/nowhere" 2> "$work/err.txt"; then fail "a missing run dir was accepted"; fi
grep -q "nowhere' does not exist.*--run-dir" "$work/err.txt" || fail "unclear message: $(cat "$work/err.txt")"
mkdir "$work/empty"
if "$report" "$work/empty" 2> "$work/err.txt"; then fail "an empty run dir was accepted"; fi
grep -q "empty/metrics.jsonl': it is missing" "$work/err.txt" || fail "unclear message: $(cat "$work/err.txt")"
: > "$work/empty/metrics.jsonl"
if "$report" "$work/empty" 2> "$work/err.txt"; then fail "a metrics.jsonl without steps was accepted"; fi
grep -q "holds no step record" "$work/err.txt" || fail "unclear message: $(cat "$work/err.txt")"

steps=20
"$gpt" --text "$work/text.txt" --run-dir "$work/run" --layers 1 --heads 2 --embd 32 --context 32 --seq-len 16 \
  --micro-batch 2 --steps $steps --ckpt-every 10 --eval-every 5 --eval-samples 4 --sample-tokens 0 > "$work/train.txt"
evals="$(grep -c '"type":"eval"' "$work/run/metrics.jsonl")"

# The same run as if htrun had run it: launch 1 reached step 13 and crashed,
# launch 2 resumed after step 10 (the job log keeps both launches' lines).
cp -r "$work/run" "$work/htrun_run"
{ echo "htrun: launch 1: 2 node(s) [0,1] x 1 slot(s), resuming after step 0"
  for s in $(seq 13); do echo "step $s/$steps | loss 5.$((60 - s)) | lr 1.00e-03 | norm 1.0 | 5 ms | 3.2k tok/s"; done
  echo "htrun: launch 2: 2 node(s) [0,1] x 1 slot(s), resuming after step 10"
  grep '^step [0-9]*/[0-9]* | loss' "$work/train.txt" | sed -n '11,$p'; } > "$work/htrun_run/htrun_job.log"
cat > "$work/htrun_run/htrun_report.json" <<'JSON'
{"verdict":"the job finished","exit_code":0,"wall_s":9.5,"productive_s":2.5,"goodput":0.263,"restarts":2,
 "incidents":[{"kind":"crash","rank":1,"node":1,"host":"n1","exit_code":1,"message":"fault injected: crash","time":2.0,
   "detection_latency_s":0.04,"recovery_s":2.6,"step_reached":13,"steps_lost":3,"resumed_from":10,"resume_tier":"disk","health":[]},
  {"kind":"hang","rank":0,"node":0,"host":"n0","exit_code":0,"message":"","time":5.1,
   "detection_latency_s":4.0,"step_reached":20,"steps_lost":0,"resumed_from":-1,"resume_tier":"","health":[]}],
 "cordoned_nodes":[],"active_nodes":[0,1],"spares_left":[]}
JSON

# Loads PAGE, checks it rendered without console messages, and that every
# series has its points; args: page, then series=count pairs.
check_page() {
  local page="$1" name; shift
  name="$(basename "$(dirname "$page")")"
  grep -Eo '(src|href)="[^"]*"' "$page" && fail "$page refers to another resource"
  grep -o 'https\?://[^"]*' "$page" | grep -qv '^http://www.w3.org/2000/svg$' && fail "$page names a URL"
  timeout 120 chromium --headless --disable-gpu --no-sandbox --enable-logging=stderr --v=0 --dump-dom \
    "file://$page" > "$work/$name.dom.html" 2> "$work/$name.chromium.txt" || fail "chromium failed on $page"
  if grep "CONSOLE" "$work/$name.chromium.txt"; then fail "console messages on $page"; fi
  python3 - "$work/$name.dom.html" "$@" <<'PY' || fail "points of $page"
import json, re, sys
dom = open(sys.argv[1]).read()
m = re.search(r'id="rendered" data-points="([^"]*)"', dom)
if not m: sys.exit("the page's script did not run: no #rendered counts in the DOM")
counted = json.loads(m.group(1).replace("&quot;", '"'))
for arg in sys.argv[2:]:
    series, want = arg.split("=")
    group = re.search(r'<g class="points" data-series="%s"[^>]*>(.*?)</g>' % series, dom, re.S)
    circles = len(re.findall(r'<circle [^>]*data-step="', group.group(1))) if group else 0
    print(f"{series}: {circles} circles, script counted {counted.get(series)}, want {want}")
    if circles != int(want) or counted.get(series) != int(want): sys.exit(f"series {series}: wrong number of points")
PY
}
screenshot() {  # screenshot PAGE: Chromium draws it into WORK/<its directory's name>.png
  local page="$1" name
  name="$(basename "$(dirname "$page")")"
  timeout 120 chromium --headless --disable-gpu --no-sandbox --hide-scrollbars --window-size=960,2200 \
    --screenshot="$work/$name.png" "file://$page" > /dev/null 2>&1 || fail "no screenshot of $page"
  [ -s "$work/$name.png" ] || fail "empty screenshot of $page"
  echo "screenshot: $work/$name.png"
}

"$report" "$work/run" | grep -q "wrote $work/run/report.html ($steps steps" || fail "ht-report on the run"
grep -q 'id="memory-none"' "$work/run/report.html" || fail "the page does not say that no memory was recorded"
# The run recorded its peak and its model's FLOPs per token: MFU needs no flag.
grep -q "MFU = the model's FLOPs per token" "$work/run/report.html" || fail "the page does not take the run's own MFU basis"
[ "$(grep -o '<tr class="checkpoint"' "$work/run/report.html" | wc -l)" = 2 ] || fail "not 2 checkpoints listed"
check_page "$work/run/report.html" loss=$steps tokens_per_s=$steps loss_scale=$steps skipped_steps=$steps val_loss="$evals" mfu=$steps

"$report" "$work/htrun_run" -o "$work/htrun_run/page.html" --peak-tflops 1 | grep -q "2 htrun incidents" \
  || fail "ht-report on the htrun run"
[ "$(grep -o '<g class="incident"' "$work/htrun_run/page.html" | wc -l)" = 2 ] || fail "not 2 incidents on the timeline"
grep -q 'id="goodput">26.3%' "$work/htrun_run/page.html" || fail "no goodput"
check_page "$work/htrun_run/page.html" loss=$steps mfu=$steps loss_earlier_launches=13
screenshot "$work/htrun_run/page.html"  # the fuller page of the two: incidents, launches, MFU
echo "PASS"
