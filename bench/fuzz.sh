#!/usr/bin/env bash
# Fuzzes every reader of damaged input (tests/fuzz: the checkpoint manifest,
# rank files and their assembly, token files, flight-recorder dumps,
# HT_FAULTS, Open MPI hostfiles, SLURM_TASKS_PER_NODE, launcher output lines) with libFuzzer under
# the address and undefined-behaviour sanitizers, for a set time each.
#   bench/fuzz.sh [SECONDS_PER_TARGET (60)] [TARGET ...]   (default: every target)
# Builds in build-fuzz (clang 16, -DHT_FUZZ=ON; HT_FUZZ_BUILD_DIR to move it),
# fuzzing a copy of tests/fuzz/corpus/<target> (the seeds stay as they are)
# with -rss_limit_mb=2048 -timeout=10. Leak detection is off: a leak is not
# what this looks for. A crash, timeout or out-of-memory input lands in
# <build>/findings/<target>/ (libFuzzer stops that target at its first one);
# fix the reader and add the input to tests/fuzz/corpus/<target>/ as a
# regression case. One line per target, then a total:
#   target manifest: 60 s, 1234567 runs, cov 1234, ft 5678, corpus 96, findings 0
# Exit status: 1 when anything was found.
set -euo pipefail
seconds="${1:-60}"
shift || true
all=(manifest rank_file token_file flight_dump faults hostfile slurm_tasks launcher_line)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${HT_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${HT_FUZZ_JOBS:-2}"

# Debian's clang 16 (bookworm's default clang 14 lacks __builtin_source_location,
# which libstdc++ 12's <source_location> needs), libFuzzer and the sanitizer
# runtimes (libclang-rt), and OpenMP for it.
missing=()
for p in clang-16 libclang-rt-16-dev libomp-16-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "# fuzz: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

mkdir -p "$build"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-16 \
  -DCMAKE_CXX_COMPILER=clang++-16 "${launcher[@]}" -DHT_FUZZ=ON -DHT_WITH_CUDA=OFF -DHT_BUILD_TESTS=ON \
  -DHT_BUILD_EXAMPLES=OFF -DHT_BUILD_BENCHMARKS=OFF > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 2; }
programs=()
for t in "${targets[@]}"; do programs+=("${t}_fuzzer"); done
ninja -C "$build" -j "$jobs" "${programs[@]}" > "$build/build.log" 2>&1 || { tail -40 "$build/build.log"; exit 2; }

echo "# fuzz: $(clang++-16 --version | head -1), git $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# fuzz: ${seconds} s per target, -rss_limit_mb=2048 -timeout=10, findings in $build/findings"
export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}"
[ -x /usr/lib/llvm-16/bin/llvm-symbolizer ] && export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-16/bin/llvm-symbolizer
total_runs=0
total_findings=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  log="$build/findings/$t.log"
  mkdir -p "$corpus" "$findings"
  cp -n "$root/tests/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
  before=$(find "$findings" -type f | wc -l)
  set +e
  "$build/tests/fuzz/${t}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" > "$log" 2>&1
  rc=$?
  set -e
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [ -z "$runs" ] && runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || true)
  found=$(( $(find "$findings" -type f | wc -l) - before ))
  [ "$rc" -ne 0 ] && [ "$found" -eq 0 ] && found=1  # died without writing an input (see the log)
  echo "target $t: ${seconds} s, ${runs:-0} runs, cov ${cov:-?}, ft ${ft:-?}, corpus $(ls "$corpus" | wc -l), findings $found"
  if [ "$found" -gt 0 ]; then
    grep -m3 -E "ERROR: |runtime error:|terminate called|what\(\)" "$log" | sed 's/^/#   /' || true
    echo "#   log $log"
  fi
  total_runs=$((total_runs + ${runs:-0}))
  total_findings=$((total_findings + found))
done
echo "total: ${#targets[@]} targets, $total_runs runs, findings $total_findings"
[ "$total_findings" -eq 0 ]
