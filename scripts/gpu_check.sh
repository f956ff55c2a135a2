#!/usr/bin/env bash
# The one-shot acceptance run of hypertrain's CUDA path on one GPU machine
# (sized for under 10 minutes on one H200). Each check is a row of the
# summary table, rewritten after every check to $OUT/gpu_check.txt (OUT set)
# or out/gpu_check/gpu_check.txt, with every check's log packed beside it in
# logs.tgz; the exit status is non-zero when any check fails.
#
#   scripts/gpu_check.sh [--build DIR | --prebuilt BUNDLE] [--arch SM]
#                        [--only CHECKS] [--deadline SECONDS] [--dry-run]
#   scripts/gpu_check.sh --bundle [--build DIR]
#
# --bundle (on a build machine, after `cmake --build DIR` with CUDA) packs the
# programs the checks run, every library they load except the C and C++
# runtimes, the CUDA driver and NCCL, and Open MPI's plugins and help files
# into .gpu_bundle.tar.xz (git-ignored; carry it to the GPU machine). With
# --prebuilt .gpu_bundle.tar.xz the checks run those programs against those
# libraries (NCCL and cuBLAS are the GPU machine's own): a GPU image without
# the project's Debian packages needs no build. Without --prebuilt the first
# check configures and builds DIR (default build-gpu) there.
#
# Checks, in order (--only takes a comma list of these names):
#   probe        what the machine has: GPU, driver, OS, the libraries the
#                programs resolve, NCCL and cuBLAS found, mpirun -np 2
#   build        (without --prebuilt) configure with CUDA for the device's
#                architecture and build what the checks run
#   gpu-tests    the ctest label "gpu" (cublas_api_test, ops_cuda_test,
#                allocator_cuda_test, nccl_communicator_test on 1 rank,
#                routing_communicator_test on 2 and 4), none skipped
#   gpt-fp32     gpt_train on the CPU and on CUDA: per-step losses equal
#                within 1e-4 (relative)
#   gpt-bf16     the same in bf16, within 1e-2
#   llama-fp32   llama_train, as gpt-fp32
#   llama-bf16   llama_train, as gpt-bf16
#   throughput   bench/compare_pytorch.py --device cuda: GPT-2 124M at
#                B8 x T1024 in fp32 and bf16 and Llama-124M in bf16, each
#                against PyTorch on the same GPU (fused attention), side by
#                side; train_throughput's MFU against the measured peak
#   nccl-bench   ht-collectives-bench --backend nccl: #wrong must be 0
#   memcheck     compute-sanitizer memcheck on ops_cuda_test's small cases
#   racecheck    compute-sanitizer racecheck on the same
#   kernels      ncu: GPU time per kernel over one GPT-2 124M bf16 step at
#                B8 x T1024, the kernels that take most, and their sum
#                against the step's wall time
#   nsys         cudaMalloc / cudaFree / synchronisation counts per step
#                (skipped where nsys is not on the PATH)
# Each check has a time limit, cut to what is left of --deadline (default
# 540 s from the start); a check with under 20 s left is skipped, by name.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

dry_run=0
build_dir=build-gpu
prebuilt=""
arch=""
only=""
deadline=540
mode=check
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --build) build_dir="$2"; shift ;;
    --prebuilt) prebuilt="$2"; shift ;;
    --arch) arch="$2"; shift ;;
    --only) only="$2"; shift ;;
    --deadline) deadline="$2"; shift ;;
    --bundle) mode=bundle ;;
    -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# The programs the checks run, as paths in a build tree.
programs=(examples/gpt/gpt_train examples/llama/llama_train bench/train_throughput bench/ht-collectives-bench
          tests/cublas_api_test tests/ops_cuda_test tests/allocator_cuda_test tests/nccl_communicator_test
          tests/routing_communicator_test)
ompi_lib=lib/x86_64-linux-gnu/openmpi      # Debian's Open MPI, below its prefix /usr
pmix_lib=lib/x86_64-linux-gnu/pmix2

# --- --bundle: pack the built programs and what they load -----------------
if [ "$mode" = bundle ]; then
  [ "$build_dir" = build-gpu ] && [ ! -d build-gpu ] && build_dir=build
  for p in "${programs[@]}" src/libhypertrain.so.0; do
    [ -e "$build_dir/$p" ] || { echo "gpu_check.sh: $build_dir/$p is missing; build it: cmake --build $build_dir" >&2; exit 1; }
  done
  grep -q '^HT_HAVE_CUDA:INTERNAL=ON\|^HT_CUDA_ARCHITECTURES' "$build_dir/CMakeCache.txt" 2> /dev/null ||
    echo "gpu_check.sh: warning: $build_dir may not be a CUDA build" >&2
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/bin" "$stage/lib" "$stage/ompi/usr/bin" "$stage/ompi/usr/share" "$stage/ompi/usr/$ompi_lib/lib" \
    "$stage/ompi/usr/$pmix_lib/lib"
  for p in "${programs[@]}" src/libhypertrain.so.0; do
    mkdir -p "$stage/bin/$(dirname "$p")"
    cp -L "$build_dir/$p" "$stage/bin/$p"
  done
  cp -L /usr/bin/orterun "$stage/ompi/usr/bin/orterun"
  ln -s orterun "$stage/ompi/usr/bin/mpirun"
  cp -rL "/usr/$ompi_lib/lib/openmpi3" "$stage/ompi/usr/$ompi_lib/lib/"
  cp -rL "/usr/$pmix_lib/lib/pmix" "$stage/ompi/usr/$pmix_lib/lib/"
  cp -rL "/usr/$pmix_lib/share" "$stage/ompi/usr/$pmix_lib/"
  cp -rL /usr/share/openmpi "$stage/ompi/usr/share/"
  # Every library loaded, by the name the loader asks for, except the C and
  # C++ runtimes (the GPU machine's are as new or newer), the CUDA driver and
  # NCCL (the GPU machine's own).
  for f in "$stage"/bin/*/* "$stage"/bin/*/*/* "$stage/ompi/usr/bin/orterun" "$stage"/ompi/usr/lib/*/*/lib/*/*.so; do
    [ -f "$f" ] && ldd "$f" 2> /dev/null
  done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    grep -vE '^(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libnccl|libhypertrain)\.so' |
    while read -r name path; do cp -L "$path" "$stage/lib/$name"; done
  git rev-parse --short HEAD > "$stage/REVISION" 2> /dev/null
  grep -E '^(CMAKE_BUILD_TYPE|HT_CUDA_ARCHITECTURES):' "$build_dir/CMakeCache.txt" >> "$stage/REVISION"
  tar -C "$stage" -cJf .gpu_bundle.tar.xz . || exit 1
  echo "gpu_check.sh: .gpu_bundle.tar.xz ($(du -h .gpu_bundle.tar.xz | cut -f1), $(ls "$stage/lib" | wc -l) libraries," \
    "from $build_dir at $(head -1 "$stage/REVISION")); on the GPU machine: scripts/gpu_check.sh --prebuilt .gpu_bundle.tar.xz"
  exit 0
fi

# --- where results go -------------------------------------------------------
if [ -n "${OUT:-}" ]; then out="$OUT"; work=/tmp/gpu_check; else out="$root/out/gpu_check"; work="$out"; fi
mkdir -p "$out" "$work"
rows=()
failed=0
started=$SECONDS

summary() {  # the table so far, and the logs beside it
  {
    # The programs' revision: a bundle's own (the checkout beside it may be another's).
    echo "# gpu_check of ${prebuilt:+$(head -1 "$bundle/REVISION" 2> /dev/null) (prebuilt)}${prebuilt:-$(git rev-parse --short HEAD 2> /dev/null)}" \
      "on $(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1), $((SECONDS - started)) s"
    printf '%-11s %-5s %6s  %s\n' check state s detail
    printf '%s\n' "${rows[@]}"
  } > "$out/gpu_check.txt"
  [ "$work" = "$out" ] || tar -C "$work" -czf "$out/logs.tgz" --exclude='*.h5' --exclude='*.bin' . 2> /dev/null
}

row() {  # row NAME STATUS SECONDS DETAIL (a dry run records what would run)
  if [ "$dry_run" = 1 ]; then set -- "$1" - - "would run"; fi
  rows+=("$(printf '%-11s %-5s %6s  %s' "$1" "$2" "$3" "$4")")
  echo "${rows[-1]}"
  [ "$2" = FAIL ] && failed=1
  summary
  return 0
}

wanted() {  # wanted NAME: is this check asked for?
  [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]
}

# run_check NAME LIMIT_S COMMAND...: runs the command under a time limit cut
# to the deadline, its output in $work/NAME.log; returns its status (125: no
# time was left, and the row says so).
run_check() {
  local name="$1" limit="$2"
  shift 2
  if [ "$dry_run" = 1 ]; then
    echo "[$name] (at most ${limit} s) $*"
    : > "$work/$name.log"
    return 0
  fi
  local left=$((deadline - (SECONDS - started) - 10))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then
    last_seconds=0
    echo "no time left before the ${deadline} s deadline" > "$work/$name.log"
    return 125
  fi
  local start=$SECONDS
  # A shell function of this script runs in a child bash (exported below).
  if declare -F "$1" > /dev/null; then set -- bash -c "$1"; fi
  timeout --kill-after=10 "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  last_seconds=$((SECONDS - start))
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "gpu_check.sh: stopped at its ${limit} s limit" >> "$work/$name.log"
  return $rc
}
last_seconds=0

fail_detail() {  # fail_detail NAME RC PATTERN: why a check failed, in one line
  if [ "$2" = 125 ]; then echo "skipped: no time left before the deadline"
  elif [ "$2" = 124 ] || [ "$2" = 137 ]; then echo "timed out after ${last_seconds} s"
  else grep -E "$3" "$work/$1.log" | head -1 | cut -c1-160; fi
}

# --- the programs and their libraries ----------------------------------------
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive GTEST_COLOR=no
mpirun=mpirun
if [ -n "$prebuilt" ]; then
  [ -f "$prebuilt" ] || { echo "gpu_check.sh: $prebuilt not found; make it with scripts/gpu_check.sh --bundle" >&2; exit 2; }
  bundle=/tmp/ht-gpu-bundle
  rm -rf "$bundle" && mkdir -p "$bundle" && tar -C "$bundle" -xJf "$prebuilt" || exit 2
  bin="$bundle/bin"
  # The machine's NCCL and cuBLAS, wherever its CUDA or Python packages put them.
  cuda_dirs=""
  for name in libnccl.so.2 libcublas.so.13; do
    ldconfig -p | grep -q " $name " && continue
    found="$(find /usr/local /usr/lib /opt -name "$name" 2> /dev/null | head -1)"
    [ -n "$found" ] && cuda_dirs="$cuda_dirs:$(dirname "$found")"
  done
  export LD_LIBRARY_PATH="$bin/src:$bundle/lib$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Open MPI and PMIx relocated into the bundle, with Debian's settings.
  export OPAL_PREFIX="$bundle/ompi/usr" PMIX_MCA_mca_base_component_path="$bundle/ompi/usr/$pmix_lib/lib/pmix"
  export OMPI_MCA_btl='^uct,openib,ofi' OMPI_MCA_pml='^ucx' OMPI_MCA_mtl='^ofi' OMPI_MCA_osc='^ucx,pt2pt' \
    OMPI_MCA_btl_base_warn_component_unused=0
  mpirun="$OPAL_PREFIX/bin/mpirun"
else
  bin="$build_dir"
fi

if [ -z "$arch" ]; then
  arch="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d '.')"
  [ -n "$arch" ] || arch=90
fi
if [ "$dry_run" = 0 ] && [ "$only" != probe ] && ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu_check.sh: no GPU visible (nvidia-smi -L failed); use --dry-run to see what would run" >&2
  exit 2
fi

# What the checks written as shell functions read, in their child bash.
export bin mpirun work

# --- probe ------------------------------------------------------------------
probe() {
  echo "## GPU"; nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv
  echo "## OS"; grep PRETTY_NAME /etc/os-release; uname -r; ldd --version | head -1; nproc
  echo "## CUDA"; command -v nvcc && nvcc --version | tail -2
  for name in libnccl.so.2 libcublas.so.13; do
    echo "$name: $(ldconfig -p | grep " $name " | head -1) $(find /usr/local /usr/lib /opt -name "$name" 2> /dev/null | tr '\n' ' ')"
  done
  echo "## tools"; for t in compute-sanitizer nsys ncu python3; do echo "$t: $(command -v $t)"; done
  python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
  echo "## libraries of gpt_train"; ldd "$bin/examples/gpt/gpt_train"
  echo "## mpirun -np 2"; "$mpirun" -np 2 --oversubscribe --bind-to none hostname
  "$bin/examples/gpt/gpt_train" --help | head -3
}
export -f probe
if wanted probe; then
  if run_check probe 60 probe && ! grep -q "not found" "$work/probe.log"; then
    row probe PASS "$last_seconds" "$(sed -n 2p "$work/probe.log" | cut -c1-100)"
  else
    row probe FAIL "$last_seconds" "$(grep -m1 -E 'not found|rror' "$work/probe.log" | cut -c1-160)"
  fi
fi

# --- build (without --prebuilt) ----------------------------------------------
if [ -z "$prebuilt" ] && wanted build; then
  gen=()
  command -v ninja > /dev/null && gen=(-G Ninja)
  targets=(gpt_train llama_train train_throughput ht-collectives-bench cublas_api_test ops_cuda_test
           allocator_cuda_test nccl_communicator_test routing_communicator_test)
  if run_check build 360 bash -c "cmake -S . -B '$build_dir' ${gen[*]} -DCMAKE_BUILD_TYPE=Release -DHT_WITH_CUDA=ON \
      -DHT_CUDA_ARCHITECTURES=$arch && cmake --build '$build_dir' --parallel \$(nproc) --target ${targets[*]}"; then
    row build PASS "$last_seconds" "sm_$arch, $build_dir"
  else
    row build FAIL "$last_seconds" "$(fail_detail build $? 'rror')"
  fi
fi

# --- the gpu label ------------------------------------------------------------
# As ctest runs them (tests/CMakeLists.txt), without ctest: a prebuilt tree's
# test files name the paths of the machine that built it. A skip here means
# the GPU path did not run.
gpu_tests() {
  local t status=0
  for t in "tests/cublas_api_test" "tests/ops_cuda_test" "tests/allocator_cuda_test" \
           "mpi 1 tests/nccl_communicator_test" "mpi 2 tests/routing_communicator_test" \
           "mpi 4 tests/routing_communicator_test"; do
    echo "### $t"
    if [[ "$t" == mpi* ]]; then
      read -r _ np prog <<< "$t"
      "$mpirun" -np "$np" --oversubscribe --bind-to none "$bin/$prog" || { echo "### FAILED: $t"; status=1; }
    else
      "$bin/$t" || { echo "### FAILED: $t"; status=1; }
    fi
  done
  return $status
}
export -f gpu_tests
if wanted gpu-tests; then
  run_check gpu-tests 150 gpu_tests
  rc=$?
  failed_runs=$(grep -c '^### FAILED' "$work/gpu-tests.log")
  skipped=$(grep -cE '^\[  SKIPPED \] [A-Za-z]|tests skipped on rank' "$work/gpu-tests.log")
  if [ "$dry_run" = 1 ]; then row gpu-tests
  elif [ "$rc" = 0 ] && [ "$skipped" = 0 ]; then row gpu-tests PASS "$last_seconds" "6 runs passed, 0 tests skipped"
  elif [ "$rc" = 0 ]; then row gpu-tests FAIL "$last_seconds" "skips: $(grep -m1 -E '^\[  SKIPPED \] [A-Za-z]' "$work/gpu-tests.log")"
  else row gpu-tests FAIL "$last_seconds" "$failed_runs of 6 runs failed; $(fail_detail gpu-tests $rc 'FAILED  \]|^### FAILED')"
  fi
fi

# --- CPU against CUDA: the same short run, losses step by step -----------------
text="$work/text.txt"
[ "$dry_run" = 1 ] || for i in $(seq 400); do echo "sphinx of black quartz, judge my vow; pack my box $i"; done > "$text"
compare_losses() {  # compare_losses CPU_RUN CUDA_RUN TOLERANCE: prints the largest relative difference
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" << 'EOF'
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
    name="$model-$prec"
    wanted "$name" || continue
    tol=1e-4
    [ "$prec" = bf16 ] && tol=1e-2
    args=(--text "$text" --layers 2 --heads 4 --embd 128 --context 64 --seq-len 64 --micro-batch 8 --steps 20
          --eval-samples 0 --sample-tokens 0 --precision "$prec" --seed 7)
    [ "$model" = llama ] && args+=(--kv-heads 2)
    exe="$bin/examples/$model/${model}_train"
    rm -rf "$work/$name-cpu" "$work/$name-cuda"
    if run_check "$name" 90 bash -c "'$exe' ${args[*]} --device cpu --run-dir '$work/$name-cpu' \
        && '$exe' ${args[*]} --device cuda --run-dir '$work/$name-cuda'"; then
      if [ "$dry_run" = 1 ]; then row "$name"
      elif detail=$(compare_losses "$work/$name-cpu" "$work/$name-cuda" "$tol"); then row "$name" PASS "$last_seconds" "$detail"
      else row "$name" FAIL "$last_seconds" "$detail"; fi
    else
      row "$name" FAIL "$last_seconds" "$(fail_detail "$name" $? 'rror|what')"
    fi
  done
done

# --- throughput against PyTorch on the same GPU --------------------------------
throughput() {
  local run
  for run in "124m fp32" "124m bf16" "llama-124m bf16"; do
    read -r config prec <<< "$run"
    echo "### $config $prec"
    python3 bench/compare_pytorch.py --build "$bin" --device cuda --precision "$prec" --attention sdpa \
      --config "$config" --batch 8 --seq 1024 --steps 10 --warmup 3 --threads "$(nproc)" || return 1
  done
}
export -f throughput
if wanted throughput; then
  if run_check throughput 200 throughput; then
    row throughput PASS "$last_seconds" "ours/pytorch tok/s: $(awk '/^### / {run = $2 " " $3}
      /^config / {for (i = 1; i < NF; i++) if ($i == "ratio") {printf "%s%s %s", sep, run, $(i + 1); sep = ", "; break}}' \
      "$work/throughput.log")"
  else
    row throughput FAIL "$last_seconds" "$(fail_detail throughput $? 'rror|failed')"
  fi
fi

# --- NCCL collectives, every result checked --------------------------------------
if wanted nccl-bench; then
  if run_check nccl-bench 60 "$mpirun" -np 1 "$bin/bench/ht-collectives-bench" --backend nccl -o all -b 8 -e 256M -f 4 -n 5 -w 2; then
    row nccl-bench PASS "$last_seconds" "#wrong 0 in $(grep -c '^# world_size' "$work/nccl-bench.log") operations, 8 B to 256 MiB"
  else
    row nccl-bench FAIL "$last_seconds" "$(fail_detail nccl-bench $? 'wrong|rror')"
  fi
fi

# --- compute-sanitizer on the small kernel cases -----------------------------------
small_cases() {  # ops_cuda_test's cases with no dimension of 300 or more, as a gtest filter
  "$bin/tests/ops_cuda_test" --gtest_list_tests | awk '/^[^ ]/ {s = $1} /^  / {print s $1}' |
    python3 -c "import re, sys; print(':'.join(n.strip() for n in sys.stdin
      if all(int(x) < 300 for x in re.findall(r'\d+', n.strip().split('/')[-1]))))"
}
for tool in memcheck racecheck; do
  wanted "$tool" || continue
  if ! command -v compute-sanitizer > /dev/null && [ "$dry_run" = 0 ]; then
    row "$tool" SKIP 0 "compute-sanitizer not installed"
    continue
  fi
  filter="$( [ "$dry_run" = 1 ] || small_cases)"
  if run_check "$tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 9 \
      "$bin/tests/ops_cuda_test" --gtest_filter="$filter"; then
    row "$tool" PASS "$last_seconds" "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$work/$tool.log" | tail -1)"
  else
    row "$tool" FAIL "$last_seconds" "$(fail_detail "$tool" $? 'ERROR SUMMARY|RACECHECK SUMMARY|FAILED')"
  fi
done

# --- where a step's GPU time goes ---------------------------------------------------
kernels() {
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
    "$bin/bench/train_throughput" --device cuda --config 124m --batch 8 --seq 1024 --precision bf16 \
    --steps 1 --warmup 0 --peak-runs 1 --peak-size 256 > "$work/kernels.csv" || return 1
  python3 - "$work/kernels.csv" << 'EOF'
import collections, csv, re, sys
rows = list(csv.reader(line for line in open(sys.argv[1]) if line.startswith('"')))
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
name_col, time_col = rows[head].index("Kernel Name"), rows[head].index("gpu__time_duration.sum")
units = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0}
first = head + 2 if rows[head + 1][time_col] in units else head + 1  # a row of units, or none
scale = units.get(rows[head + 1][time_col], 1e-6)
total, count = collections.Counter(), collections.Counter()
for r in rows[first:]:
    name = re.sub(r"[<(].*", "", r[name_col].replace("(anonymous namespace)::", "").replace("<unnamed>::", "")).replace("void ", "").strip()
    total[name] += float(r[time_col].replace(",", "")) * scale
    count[name] += 1
whole = sum(total.values())
print(f"kernels: {sum(count.values())} launches, {whole:.1f} ms of GPU time in one step (peak GEMM included)")
for name, ms in total.most_common(20):
    print(f"{ms:9.2f} ms {100 * ms / whole:5.1f}%  {count[name]:5d}x  {name}")
EOF
}
export -f kernels
if wanted kernels; then
  if ! command -v ncu > /dev/null && [ "$dry_run" = 0 ]; then
    row kernels SKIP 0 "ncu not installed"
  elif run_check kernels 150 kernels; then
    row kernels PASS "$last_seconds" "$(grep -m1 '^kernels:' "$work/kernels.log" | cut -c10-); top: $(grep -m1 -E '^ +[0-9.]+ ms' "$work/kernels.log" | tr -s ' ')"
  else
    row kernels FAIL "$last_seconds" "$(fail_detail kernels $? 'rror|ERR')"
  fi
fi

# --- allocations and synchronisations per step, where Nsight Systems exists --------
if wanted nsys; then
  if command -v nsys > /dev/null || [ "$dry_run" = 1 ]; then
    if run_check nsys 120 bash -c "nsys profile --trace cuda --stats true -o '$work/steps' --force-overwrite true \
        '$bin/examples/gpt/gpt_train' --text '$text' --layers 2 --heads 4 --embd 128 --context 64 --seq-len 64 \
        --micro-batch 8 --steps 20 --eval-samples 0 --sample-tokens 0 --device cuda --run-dir '$work/nsys-run'"; then
      counts=$(grep -E "cudaMalloc|cudaFree|Synchronize" "$work/nsys.log" | awk '{print $NF "=" $(NF-6)}' | paste -sd' ')
      row nsys PASS "$last_seconds" "calls over 20 steps: ${counts:-none}"
    else
      row nsys FAIL "$last_seconds" "$(fail_detail nsys $? 'rror')"
    fi
  else
    row nsys SKIP 0 "nsys not on the PATH"
  fi
fi

summary
cat "$out/gpu_check.txt"
[ "$dry_run" = 1 ] && exit 0
exit $failed
