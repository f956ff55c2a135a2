#!/usr/bin/env bash
# The one-shot acceptance run of hypertrain's CUDA path on one GPU machine
# (sized for at most 10 minutes on one H200). Each check is a row of the
# summary table printed at the end (also written to $OUT/gpu_check.txt when
# OUT is set, with each check's log beside it); the exit status is non-zero
# when any check fails.
#
#   scripts/gpu_check.sh [--dry-run] [--build DIR] [--arch SM]
#   scripts/gpu_check.sh --fetch-debs    (on a Debian 12 machine with apt)
#
# Checks, in order:
#   build        configure with CUDA for the device's architecture and build
#                what the checks run
#   gpu-tests    the ctest label "gpu", with zero tests skipped
#   memcheck     compute-sanitizer memcheck on the small cases of every kernel
#   racecheck    compute-sanitizer racecheck on the same
#   gpt-fp32     gpt_train on the CPU and on CUDA (through the NCCL data
#                plane): per-step losses equal within 1e-4 (relative)
#   gpt-bf16     the same in bf16, within 1e-2
#   llama-fp32   llama_train, as gpt-fp32
#   llama-bf16   llama_train, as gpt-bf16
#   throughput   train_throughput --device cuda, GPT-2 124M at B8 x T1024 in
#                fp32 and bf16 (MFU against the device's own measured peak)
#   nsys         cudaMalloc / cudaFree / synchronisation counts per step
#                (skipped where nsys is not installed)
#   nccl-bench   ht-collectives-bench --backend nccl: #wrong must be 0
#
# A bare GPU image may lack the project's Debian packages (MPI, HDF5,
# OpenBLAS, fmt, CLI11, GoogleTest). --fetch-debs, run on a Debian 12
# machine, downloads them into .gpu_debs/ (git-ignored; carry it to the GPU
# machine); a run that finds .gpu_debs/ unpacks them under /opt/ht-deps and
# uses each library only where the system has none of that name.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

dry_run=0
build_dir=build-gpu
arch=""
mode=check
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --build) build_dir="$2"; shift ;;
    --arch) arch="$2"; shift ;;
    --fetch-debs) mode=fetch ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# Debian packages the build and the checks need beyond a CUDA image's own
# compiler, CMake, ninja and Python.
debs=(
  libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libgfortran5
  libhdf5-dev libhdf5-103-1 libhdf5-cpp-103-1 libhdf5-hl-100 libsz2 libaec0 libaec-dev
  libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev libeigen3-dev
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200
  libgtest-dev libgmock-dev
)

if [ "$mode" = fetch ]; then
  mkdir -p .gpu_debs
  (cd .gpu_debs && apt-get download "${debs[@]}") || { echo "gpu_check.sh: apt-get download failed" >&2; exit 1; }
  du -sh .gpu_debs
  exit 0
fi

out="${OUT:-$root/out/gpu_check}"
mkdir -p "$out"
rows=()
failed=0

row() {  # row NAME STATUS SECONDS DETAIL (a dry run records what would run)
  if [ "$dry_run" = 1 ]; then set -- "$1" - - "would run"; fi
  rows+=("$(printf '%-11s %-5s %6s  %s' "$1" "$2" "$3" "$4")")
  [ "$2" = FAIL ] && failed=1
  return 0
}

# run_check NAME LIMIT_S COMMAND...: runs the command under a time limit with
# its output in $out/NAME.log; returns its status.
run_check() {
  local name="$1" limit="$2"
  shift 2
  if [ "$dry_run" = 1 ]; then
    echo "[$name] (at most ${limit} s) $*"
    : > "$out/$name.log"
    return 0
  fi
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  last_seconds=$((SECONDS - start))
  return $rc
}
last_seconds=0

# Dependencies carried as .debs: unpacked aside, each library used only where
# the system has no library of that name.
use_carried_debs() {
  [ -d .gpu_debs ] || return 0
  local prefix=/opt/ht-deps
  if [ "$dry_run" = 1 ]; then
    echo "[deps] unpack .gpu_debs/*.deb under $prefix; fall back to its libraries, headers and mpirun"
    return 0
  fi
  mkdir -p "$prefix/fallback"
  for f in .gpu_debs/*.deb; do dpkg -x "$f" "$prefix"; done
  local libdir="$prefix/usr/lib/x86_64-linux-gnu"
  for so in "$libdir"/*.so*; do
    local name
    name="$(basename "$so")"
    ldconfig -p | grep -q " $name " || ln -sf "$so" "$prefix/fallback/$name"
  done
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$prefix/fallback:$libdir/openblas-openmp:$libdir/openmpi/lib"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$prefix/usr/include:$prefix/usr/include/hdf5/serial:$libdir/openmpi/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$prefix/fallback:$libdir${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export PATH="$PATH:$prefix/usr/bin"
  export OPAL_PREFIX="$prefix/usr"  # Open MPI relocated: its components and help files
}

use_carried_debs
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive

if [ -z "$arch" ]; then
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')"
  [ -n "$arch" ] || arch=90
fi
if [ "$dry_run" = 0 ] && ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu_check.sh: no GPU visible (nvidia-smi -L failed); use --dry-run to see what would run" >&2
  exit 2
fi

# The programs the checks run, and every test labelled gpu (test names less
# their _npN suffix are their targets).
targets=(gpt_train llama_train train_throughput ht-collectives-bench)
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
if run_check build 360 bash -c "cmake -S . -B '$build_dir' ${gen[*]} -DCMAKE_BUILD_TYPE=Release -DHT_WITH_CUDA=ON \
    -DHT_CUDA_ARCHITECTURES=$arch && gpu_tests=\$(ctest --test-dir '$build_dir' -N -L gpu | \
    sed -n 's/^ *Test *#[0-9]*: \\([A-Za-z0-9_]*\\)/\\1/p' | sed 's/_np[0-9]*$//' | sort -u) && \
    cmake --build '$build_dir' --parallel \$(nproc) --target ${targets[*]} \$gpu_tests"; then
  row build PASS "$last_seconds" "sm_$arch, $build_dir"
else
  row build FAIL "$last_seconds" "see build.log"
fi
bin="$build_dir"

# The gpu label: every test must run (a skip here means the GPU path did not).
if run_check gpu-tests 240 ctest --test-dir "$build_dir" -L gpu --output-on-failure; then
  skipped=$(grep -c -E "\*\*\*Skipped|\[  SKIPPED \]" "$out/gpu-tests.log" 2>/dev/null)
  if [ "$dry_run" = 1 ]; then row gpu-tests
  elif [ "${skipped:-0}" = 0 ]; then row gpu-tests PASS "$last_seconds" "$(grep -E 'tests passed' "$out/gpu-tests.log")"
  else row gpu-tests FAIL "$last_seconds" "$skipped skipped"; fi
else
  row gpu-tests FAIL "$last_seconds" "$(grep -E 'tests passed|tests failed' "$out/gpu-tests.log" | head -1)"
fi

# compute-sanitizer on every kernel's cases in ops_cuda_test (small shapes).
for tool in memcheck racecheck; do
  if ! command -v compute-sanitizer > /dev/null && [ "$dry_run" = 0 ]; then
    row "$tool" SKIP 0 "compute-sanitizer not installed"
    continue
  fi
  if run_check "$tool" 150 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$bin/tests/ops_cuda_test"; then
    row "$tool" PASS "$last_seconds" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$tool.log" | tail -1)"
  else
    row "$tool" FAIL "$last_seconds" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|FAILED' "$out/$tool.log" | head -1)"
  fi
done

# CPU against CUDA: the same short run, losses step by step from metrics.jsonl.
text="$out/text.txt"
[ "$dry_run" = 1 ] || for i in $(seq 400); do echo "sphinx of black quartz, judge my vow; pack my box $i"; done > "$text"
compare_losses() {  # compare_losses CPU_RUN CUDA_RUN TOLERANCE: prints the largest relative difference
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'EOF'
import json, sys
def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"type":"step"' in l]
a, b, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
if not a or len(a) != len(b):
    print(f"step counts differ: {len(a)} on the CPU, {len(b)} on CUDA"); sys.exit(1)
worst = max(abs(x - y) / max(abs(x), 1e-6) for x, y in zip(a, b))
print(f"{len(a)} steps, largest relative difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
EOF
}
for model in gpt llama; do
  for prec in fp32 bf16; do
    tol=1e-4
    [ "$prec" = bf16 ] && tol=1e-2
    name="$model-$prec"
    args=(--text "$text" --layers 2 --heads 4 --embd 128 --context 64 --seq-len 64 --micro-batch 8 --steps 20
          --eval-samples 0 --sample-tokens 0 --precision "$prec" --seed 7)
    [ "$model" = llama ] && args+=(--kv-heads 2)
    if run_check "$name" 120 bash -c "'$bin/examples/$model/${model}_train' ${args[*]} --device cpu --run-dir '$out/$name-cpu' \
        && '$bin/examples/$model/${model}_train' ${args[*]} --device cuda --run-dir '$out/$name-cuda'"; then
      if [ "$dry_run" = 1 ]; then row "$name"
      elif detail=$(compare_losses "$out/$name-cpu" "$out/$name-cuda" "$tol"); then row "$name" PASS "$last_seconds" "$detail"
      else row "$name" FAIL "$last_seconds" "$detail"; fi
    else
      row "$name" FAIL "$last_seconds" "$(tail -1 "$out/$name.log")"
    fi
  done
done

# Throughput: GPT-2 124M, B8 x T1024, fp32 and bf16.
if run_check throughput 240 "$bin/bench/train_throughput" --device cuda --config 124m --batch 8 --seq 1024 \
    --precision fp32,bf16 --steps 10 --warmup 3; then
  row throughput PASS "$last_seconds" "$(grep -E '^124m' "$out/throughput.log" | tr -s ' ' | cut -c1-120 | paste -sd';')"
else
  row throughput FAIL "$last_seconds" "$(tail -1 "$out/throughput.log")"
fi

# Allocations and synchronisations per step, where Nsight Systems exists.
if command -v nsys > /dev/null || [ "$dry_run" = 1 ]; then
  if run_check nsys 150 bash -c "nsys profile --trace cuda --stats true -o '$out/steps' --force-overwrite true \
      '$bin/examples/gpt/gpt_train' --text '$text' --layers 2 --heads 4 --embd 128 --context 64 --seq-len 64 \
      --micro-batch 8 --steps 20 --eval-samples 0 --sample-tokens 0 --device cuda --run-dir '$out/nsys-run'"; then
    counts=$(grep -E "cudaMalloc|cudaFree|Synchronize" "$out/nsys.log" | awk '{print $NF "=" $(NF-6)}' | paste -sd' ')
    row nsys PASS "$last_seconds" "calls over 20 steps: ${counts:-none}"
  else
    row nsys FAIL "$last_seconds" "$(tail -1 "$out/nsys.log")"
  fi
else
  row nsys SKIP 0 "nsys not installed"
fi

# NCCL collectives: every result checked (#wrong summed over ranks).
launch=()
command -v mpirun > /dev/null && launch=(mpirun -np 1)
if run_check nccl-bench 120 "${launch[@]}" "$bin/bench/ht-collectives-bench" --backend nccl -b 8 -e 64M -f 4 -n 5 -w 2; then
  row nccl-bench PASS "$last_seconds" "#wrong 0; $(grep -E 'Avg bus bandwidth' "$out/nccl-bench.log" | head -1)"
else
  row nccl-bench FAIL "$last_seconds" "$(grep -E 'wrong|error' "$out/nccl-bench.log" | head -1)"
fi

{
  echo "# gpu_check $(git rev-parse --short HEAD 2>/dev/null) on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  printf '%-11s %-5s %6s  %s\n' check state s detail
  printf '%s\n' "${rows[@]}"
} | tee "$out/gpu_check.txt"
[ "$dry_run" = 1 ] && exit 0
exit $failed
