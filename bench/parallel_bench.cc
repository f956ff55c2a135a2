// ht-parallel-bench: what the parallel layer of ht::train::Trainer claims,
// measured on a real mesh under mpirun — ZeRO's memory per rank, the share of
// DDP's gradient all-reduce hidden behind backward, and the pipeline bubble.
//
//   mpirun -np 4 ht-parallel-bench --mode memory   [--zero 0,1,2,3] [--precision fp32,fp16,bf16]
//   mpirun -np 2 ht-parallel-bench --mode overlap  [--bucket-bytes 1048576] [--steps 8]
//   mpirun -np 4 ht-parallel-bench --mode bubble   [--pp 4] [--schedules gpipe,1f1b] [--micro-batches 4,8]
//
// memory: for each precision (default fp32) and each ZeRO stage in turn
//   (dp = world / (tp pp)), a Trainer is built, runs --steps steps and is
//   destroyed. Bytes per category come from ht's allocator accounting
//   (ht/core/memory.h): "init peak" from a peak reset before construction,
//   "current" after the last step, "step peak" from a reset after
//   construction. Figures are the maximum over ranks. "ratio" is parameters +
//   gradients + optimizer state over DDP's in the same precision; "expected"
//   what the stage should give with s shards (f32: params 1 or 1/s, gradients
//   1 or 1/s, AdamW's two moments 2 or 2/s, over DDP's 4; see
//   expected_state() for fp16/bf16). Target: ZeRO-3 within 10 % of that
//   (1/dp in f32: 0.25 at dp = 4). Under fp16/bf16 the parameters are the
//   16-bit working copies and the f32 master weights count as optimizer
//   state (the optimizer owns them). With fp32 and a 16-bit precision in the
//   list, a third table sets each 16-bit run against fp32 at the same stage;
//   the target, parameters and peak activations halved, is reported,
//   not enforced.
// overlap: DDP (ZeRO 0) with small buckets. After each step the same bucket
//   sizes (DDP's rule: reverse registration order, a bucket closes once it
//   holds bucket_bytes) are all-reduced again on the dp group with nothing
//   else running: "serial" is that time, the reduction time the step would
//   have waited for without overlap. "exposed" is DataParallel::
//   reduction_times().exposed_ms, what finish_gradients() did wait, on the
//   rank that waited least: the rank whose backward ends last waits only for
//   the communication left, the others also for it (skew between ranks, not
//   communication; shown as "max wait"). hidden share = 1 - exposed / serial
//   (serial: maximum over ranks) per step; the median over timed steps is the
//   figure. A second trainer with one bucket (its reduction starts when
//   backward ends) runs alternately, so backward and step times with and
//   without overlap are side by side: the hidden share counts the wait, not
//   the CPU the communication thread takes from backward. Target: 70 %.
// bubble: for each schedule and micro-batch count m, a Trainer with
//   grad_accum = m on pp stages; per stage, from Trainer::pipeline().stats()
//   summed over the timed steps, idle share = idle / (idle + compute) next to
//   the theory (p - 1) / (m + p - 1) and to 1 - compute / span (span: the
//   longest idle + compute of any stage; PipelineStats counts only time inside
//   train_step, so a stage that finishes early does not see the idle time
//   after its last backward), and the peak activation bytes saved by
//   micro-batches in flight. 1F1B holds min(m, p - s) micro-batches on stage
//   s, GPipe m, so 1F1B's peak must be below GPipe's where m > p - s and
//   equal elsewhere.
//
// Output (a contract; docs/benchmarks.md): rank 0 prints a `#` preamble
// (build, layout, threads, HT_* and OMP settings) and one table per mode;
// with --json, JSON Lines instead: a {"type": "run"} object, then per mode
// "memory", "overlap_step", "bubble" objects and one "<mode>_summary" (memory:
// one per precision). Step
// progress goes to stderr. Exit: 0; 1 when a check that does not depend on
// timing fails (ZeRO-3's ratio outside its band, 1F1B's peak not below
// GPipe's); 2 on a usage error. Timing targets are reported, never enforced:
// they depend on the machine and its load.
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ht/core/version.h"
#include "ht/comm/comm_env.h"
#include "ht/comm/device_mesh.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/config.h"
#include "ht/core/error.h"
#include "ht/core/memory.h"
#include "ht/core/rng.h"
#include "ht/precision/policy.h"
#include "ht/train/metrics.h"
#include "ht/train/trainer.h"

using namespace ht;
using nlohmann::json;

namespace {

struct Args {
  std::string mode;
  bool json = false;
  // Model and batch; 0 (or empty) takes the mode's default.
  int layers = 0, heads = 0;
  std::int64_t embd = 0, vocab = 0, context = 0, seq = 0, micro_batch = 0;
  int tp = 1, pp = 0;  // pp 0: 1 for memory and overlap, the world size for bubble
  std::int64_t steps = 0;
  std::int64_t warmup = -1;
  std::vector<int> zero_stages{0, 1, 2, 3};
  std::vector<std::string> precisions{"fp32"};
  std::int64_t bucket_bytes = std::int64_t(1) << 20;
  bool one_bucket = true;
  std::vector<std::string> schedules{"gpipe", "1f1b"};
  std::vector<int> micro_batches{4, 8};
  double timeout_s = 0;
};

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kZero3Tolerance = 0.10;
constexpr double kHiddenTarget = 0.70;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Every rank's `mine` (same length everywhere), rank-major. Values travel as
/// raw 64-bit words split into two i32 (an all_gather copies bits).
std::vector<std::uint64_t> gather_words(comm::Communicator& c, const std::vector<std::uint64_t>& mine) {
  const std::int64_t n = std::int64_t(mine.size());
  Tensor in = Tensor::empty({2 * n}, DType::kI32);
  Tensor out = Tensor::empty({2 * n * c.size()}, DType::kI32);
  auto* p = in.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    p[2 * i] = std::int32_t(std::uint32_t(mine[std::size_t(i)] >> 32));
    p[2 * i + 1] = std::int32_t(std::uint32_t(mine[std::size_t(i)]));
  }
  c.all_gather(in, out)->wait();
  std::vector<std::uint64_t> all(std::size_t(n * c.size()));
  const auto* q = out.data<std::int32_t>();
  for (std::size_t i = 0; i < all.size(); ++i)
    all[i] = (std::uint64_t(std::uint32_t(q[2 * i])) << 32) | std::uint32_t(q[2 * i + 1]);
  return all;
}

std::vector<std::int64_t> gather_i64(comm::Communicator& c, const std::vector<std::int64_t>& mine) {
  std::vector<std::uint64_t> w(mine.begin(), mine.end());
  const std::vector<std::uint64_t> all = gather_words(c, w);
  return {all.begin(), all.end()};
}

std::vector<double> gather_f64(comm::Communicator& c, const std::vector<double>& mine) {
  std::vector<std::uint64_t> w;
  for (double v : mine) w.push_back(std::bit_cast<std::uint64_t>(v));
  std::vector<double> all;
  for (std::uint64_t u : gather_words(c, w)) all.push_back(std::bit_cast<double>(u));
  return all;
}

/// Random tokens (throughput and memory do not depend on the data).
data::TokenSplits random_tokens(std::int64_t vocab, std::int64_t train_count, std::int64_t val_count) {
  data::TokenSplits s;
  s.vocab_size = vocab;
  Rng rng(2024);
  for (std::int64_t i = 0; i < train_count; ++i) s.train.push_back(std::int32_t(rng.below(std::uint64_t(vocab))));
  for (std::int64_t i = 0; i < val_count; ++i) s.val.push_back(std::int32_t(rng.below(std::uint64_t(vocab))));
  return s;
}

train::TrainerOptions base_options(const Args& a, const nn::GPTConfig& model) {
  train::TrainerOptions o;
  o.model = model;
  o.micro_batch = a.micro_batch;
  o.seq_len = a.seq;
  o.steps = a.warmup + a.steps;
  o.warmup_steps = 1;
  o.eval_batches = 1;
  return o;
}

data::TokenSplits splits_for(const train::TrainerOptions& o, int dp) {
  const std::int64_t window = o.seq_len + 1;
  const std::int64_t train = std::max<std::int64_t>(window * o.micro_batch * dp * 64, 1 << 16);
  return random_tokens(o.model.vocab_size, train, 2 * window);
}

std::string list_str(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// ---- memory -----------------------------------------------------------------

constexpr MemCategory kCategories[] = {MemCategory::kParameters,  MemCategory::kGradients,
                                       MemCategory::kOptimizerState, MemCategory::kActivations,
                                       MemCategory::kCommunication,  MemCategory::kOther};

/// Per category (kCategories order) then the total: current or peak bytes on the host.
std::vector<std::int64_t> host_bytes(bool peak) {
  std::vector<std::int64_t> v;
  for (MemCategory c : kCategories) {
    const MemStats s = memory_stats(DeviceType::kCPU, c);
    v.push_back(peak ? s.peak_bytes : s.current_bytes);
  }
  const MemStats t = memory_stats_total(DeviceType::kCPU);
  v.push_back(peak ? t.peak_bytes : t.current_bytes);
  return v;
}

/// Bytes per parameter that ZeRO stage `z` keeps after a step in each
/// category, with `s` shards, under `p` (ht::parallel::DataParallel's
/// buffers, src/parallel/flat_group.h):
///   parameters  the working copy (compute dtype c), 1/s at stage 3;
///   gradients   stages 0-1: the full compute-dtype gradient, and under mixed
///               precision also the full reduction-dtype (r) copy the
///               all-reduce and the optimizer read; stages 2-3: only the r
///               shard;
///   optimizer   AdamW's two f32 moments, and under mixed precision the f32
///               master weights (optimizer-owned; in f32 the master is the
///               parameter itself); 1/s from stage 1.
/// f32: 4 + 4 + 8 = 16 bytes for DDP. f16/bf16 with f32 reduction:
/// 2 + (2 + 4) + (8 + 4) = 20 bytes for DDP, 18/s at stage 3.
struct StateBytes {
  double params = 0, grads = 0, optim = 0;
  double total() const { return params + grads + optim; }
};

StateBytes expected_state(int z, int s, const precision::Policy& p) {
  const double c = double(dtype_size(p.compute)), r = double(dtype_size(p.reduce));
  const double master = p.mixed() ? 4.0 : 0.0;
  const double full_grads = c + (p.compute != p.reduce ? r : 0.0);
  return {z >= 3 ? c / s : c, z >= 2 ? r / s : full_grads, (8.0 + master) / (z >= 1 ? s : 1)};
}

/// What stage `z` holds in parameters + gradients + optimizer state over DDP
/// in the same precision, with `s` shards (f32: (1 + 1 + 2) / 4 at DDP).
double expected_ratio(int z, int s, const precision::Policy& p) {
  return expected_state(z, s, p).total() / expected_state(0, s, p).total();
}

struct MemoryResult {
  std::string precision;
  precision::Policy policy;
  int zero = 0;
  // Maximum over ranks, kCategories order then the total.
  std::vector<std::int64_t> current, step_peak, init_peak;
  std::vector<std::vector<std::int64_t>> current_by_rank;
  std::int64_t leaked_bytes = 0;  // host bytes still held after the trainer was destroyed, max over ranks
  double step_ms = 0;
  std::int64_t skipped_steps = 0;  // f16 overflows (no update; the bytes held are the same)
  // What forward saved for backward at most (PipelineStats::peak_saved_bytes,
  // maximum over ranks): the activations proper, without the transient
  // buffers (an op's outputs before they are saved, gradients of
  // activations, 16-bit ops' f32 staging copies) that the allocator's
  // activations category also counts.
  std::int64_t saved_peak_bytes = 0;
  std::int64_t state_bytes() const { return current[0] + current[1] + current[2]; }
};

std::vector<std::int64_t> max_over_ranks(const std::vector<std::int64_t>& all, int ranks) {
  const std::size_t n = all.size() / std::size_t(ranks);
  std::vector<std::int64_t> m(n, 0);
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < n; ++i) m[i] = std::max(m[i], all[std::size_t(r) * n + i]);
  return m;
}

/// One trainer at ZeRO stage `z` in precision `prec`: built, stepped, destroyed.
MemoryResult measure_memory(const Args& a, comm::DeviceMesh& mesh, const train::TrainerOptions& base,
                            const data::TokenSplits& splits, const std::string& prec, int z,
                            std::int64_t& num_parameters) {
  comm::Communicator& world = mesh.world();
  const int ranks = world.size();
  const bool print = world.rank() == 0;
  train::TrainerOptions o = base;
  o.data_parallel.zero_stage = z;
  o.data_parallel.precision = precision::parse_policy(prec);
  world.barrier()->wait();
  const std::int64_t before_bytes = memory_stats_total(DeviceType::kCPU).current_bytes;
  reset_memory_peaks();
  std::vector<std::int64_t> init_peak, current, step_peak;
  double step_ms = 0;
  std::int64_t skipped = 0, saved_peak = 0;
  {
    train::Trainer trainer(o, splits, &mesh);
    num_parameters = trainer.model().num_parameters();
    init_peak = host_bytes(true);
    reset_memory_peaks();
    for (std::int64_t i = 0; i < a.warmup + a.steps; ++i) {
      const train::StepStats s = trainer.step();
      step_ms = s.ms;
      skipped = s.skipped_steps;
      saved_peak = std::max(saved_peak, trainer.pipeline().stats().peak_saved_bytes);
      if (print)
        std::fprintf(stderr, "# memory %s zero %d: step %lld/%lld %.0f ms, loss %.4f, scale %g%s\n", prec.c_str(), z,
                     (long long)(i + 1), (long long)(a.warmup + a.steps), s.ms, s.loss, double(s.loss_scale),
                     s.skipped ? " (skipped: overflow)" : "");
    }
    current = host_bytes(false);
    step_peak = host_bytes(true);
  }
  world.barrier()->wait();
  const std::int64_t leaked = memory_stats_total(DeviceType::kCPU).current_bytes - before_bytes;
  MemoryResult r;
  r.precision = precision::policy_name(o.data_parallel.precision);
  r.policy = o.data_parallel.precision;
  r.zero = z;
  const std::vector<std::int64_t> all_current = gather_i64(world, current);
  r.current = max_over_ranks(all_current, ranks);
  r.step_peak = max_over_ranks(gather_i64(world, step_peak), ranks);
  r.init_peak = max_over_ranks(gather_i64(world, init_peak), ranks);
  r.leaked_bytes = max_over_ranks(gather_i64(world, {leaked}), ranks)[0];
  const std::size_t n = current.size();
  for (int rank = 0; rank < ranks; ++rank)
    r.current_by_rank.emplace_back(all_current.begin() + std::ptrdiff_t(rank * n),
                                   all_current.begin() + std::ptrdiff_t((rank + 1) * n));
  r.step_ms = max_over_ranks(gather_i64(world, {std::int64_t(step_ms)}), ranks)[0];
  r.skipped_steps = skipped;
  r.saved_peak_bytes = max_over_ranks(gather_i64(world, {saved_peak}), ranks)[0];
  return r;
}

double ratio_of(std::int64_t x, std::int64_t ref) { return ref > 0 ? double(x) / double(ref) : 0.0; }

/// 16-bit against f32 at the same stage: the target is half, within this share.
constexpr double kHalfTolerance = 0.10;

int run_memory(const Args& a, comm::DeviceMesh& mesh, const nn::GPTConfig& model) {
  comm::Communicator& world = mesh.world();
  const int dp = mesh.layout().dp_size();
  const bool print = world.rank() == 0;
  const train::TrainerOptions base = base_options(a, model);
  const data::TokenSplits splits = splits_for(base, dp);
  std::vector<MemoryResult> results;
  std::int64_t num_parameters = 0;
  for (const std::string& prec : a.precisions)
    for (int z : a.zero_stages) results.push_back(measure_memory(a, mesh, base, splits, prec, z, num_parameters));

  const int shards = dp;  // no hybrid sharding in this benchmark
  // ZeRO ratios are within one precision: against that precision's DDP if it
  // ran, else its first stage measured.
  auto find = [&](const std::string& prec, int z) -> const MemoryResult* {
    for (const MemoryResult& r : results)
      if (r.precision == prec && r.zero == z) return &r;
    return nullptr;
  };
  auto ddp_of = [&](const MemoryResult& r) -> const MemoryResult& {
    if (const MemoryResult* d = find(r.precision, 0)) return *d;
    for (const MemoryResult& x : results)
      if (x.precision == r.precision) return x;
    return r;
  };
  auto ratio_to_ddp = [&](const MemoryResult& r) { return ratio_of(r.state_bytes(), ddp_of(r).state_bytes()); };
  // ZeRO-3 against DDP per precision: within 10 % of what sharding predicts
  // (1/dp in f32, 0.9/dp under mixed precision: the full f16/bf16 gradient
  // that DDP also keeps is not kept at stage 3).
  struct Zero3Check {
    std::string precision;
    double ratio = -1, target = 0;
    bool met = false;
  };
  std::vector<Zero3Check> z3_checks;
  bool z3_ok = true;
  for (const std::string& prec : a.precisions) {
    const precision::Policy p = precision::parse_policy(prec);
    const MemoryResult *d = find(precision::policy_name(p), 0), *z3 = find(precision::policy_name(p), 3);
    if (!d || !z3) continue;
    Zero3Check c{precision::policy_name(p), ratio_to_ddp(*z3), expected_ratio(3, shards, p)};
    c.met = std::abs(c.ratio / c.target - 1.0) <= kZero3Tolerance;
    z3_ok = z3_ok && c.met;
    z3_checks.push_back(c);
  }
  // 16-bit against f32, stage by stage (when fp32 ran): the working copies of
  // the parameters and the peak activations should be at most half (+10 %).
  // Reported, not enforced: which tensors an op keeps or stages in f32 is the
  // ops' choice, not this layer's.
  auto ref_of = [&](const MemoryResult& r) { return r.policy.mixed() ? find("fp32", r.zero) : nullptr; };
  struct HalfCheck {
    std::string precision;
    int zero = 0;
    double params = 0, activations_peak = 0, saved_peak = 0, state = 0, total_peak = 0;
    bool met = false, saved_met = false;
  };
  const auto halved = [](double x) { return x > 0 && x <= 0.5 * (1.0 + kHalfTolerance); };
  std::vector<HalfCheck> half_checks;
  for (const MemoryResult& r : results) {
    const MemoryResult* f = ref_of(r);
    if (!f) continue;
    HalfCheck h{r.precision,
                r.zero,
                ratio_of(r.current[0], f->current[0]),
                ratio_of(r.step_peak[3], f->step_peak[3]),
                ratio_of(r.saved_peak_bytes, f->saved_peak_bytes),
                ratio_of(r.state_bytes(), f->state_bytes()),
                ratio_of(r.step_peak[6], f->step_peak[6])};
    h.met = halved(h.params) && halved(h.activations_peak);
    h.saved_met = halved(h.params) && halved(h.saved_peak);
    half_checks.push_back(h);
  }

  if (print && !a.json) {
    std::printf("# memory: %s, %lld parameters on this stage of the model, batch %lld x %lld, dp %d, %lld step(s)\n",
                model.str().c_str(), (long long)num_parameters, (long long)a.micro_batch, (long long)a.seq, dp,
                (long long)(a.warmup + a.steps));
    std::printf("# MiB per rank (maximum over ranks), host allocator accounting; current = after the last step;\n"
                "# ratio and expected against DDP in the same precision; optimizer includes the f32 master\n"
                "# weights under fp16/bf16 (params are then the 16-bit working copies)\n");
    std::printf("#%5s %5s %10s %10s %10s %10s %8s %9s %8s\n", "prec", "zero", "params", "grads", "optimizer", "total",
                "ratio", "expected", "target");
    for (const MemoryResult& r : results)
      std::printf(" %5s %5d %10.1f %10.1f %10.1f %10.1f %8.3f %9.3f %8s\n", r.precision.c_str(), r.zero,
                  r.current[0] / kMiB, r.current[1] / kMiB, r.current[2] / kMiB, r.state_bytes() / kMiB,
                  ratio_to_ddp(r), expected_ratio(r.zero, shards, r.policy),
                  r.zero == 3 ? fmt::format("{:.3f}", expected_ratio(3, shards, r.policy)).c_str() : "-");
    std::printf("#\n# peaks, MiB per rank: during the step (reset after construction) and during construction\n");
    std::printf("#%5s %5s %10s %10s %10s %10s %10s %10s | %10s %10s | %8s %8s\n", "prec", "zero", "params", "grads",
                "optimizer", "activ.", "comm.", "total", "init par.", "init tot.", "leaked", "step ms");
    for (const MemoryResult& r : results)
      std::printf(" %5s %5d %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f | %10.1f %10.1f | %8.1f %8lld\n",
                  r.precision.c_str(), r.zero, r.step_peak[0] / kMiB, r.step_peak[1] / kMiB, r.step_peak[2] / kMiB,
                  r.step_peak[3] / kMiB, r.step_peak[4] / kMiB, r.step_peak[6] / kMiB, r.init_peak[0] / kMiB,
                  r.init_peak[6] / kMiB, r.leaked_bytes / kMiB, (long long)r.step_ms);
    for (const Zero3Check& c : z3_checks)
      std::printf("# ZeRO-3 / DDP (params + grads + optimizer, current), %s: %.4f, target %.4f +- %.0f %%: %s\n",
                  c.precision.c_str(), c.ratio, c.target, kZero3Tolerance * 100, c.met ? "met" : "NOT MET");
    if (!half_checks.empty()) {
      std::printf("#\n# 16-bit against fp32 at the same ZeRO stage: MiB per rank and the ratio to fp32 (x); state =\n"
                  "# params + grads + optimizer after the step; activ. = the activations category after the step,\n"
                  "# act.peak = its peak during the step (transient buffers and 16-bit ops' f32 staging copies\n"
                  "# included); saved = the most forward saved for backward (PipelineStats::peak_saved_bytes)\n");
      std::printf("#%5s %5s %8s %6s %8s %6s %9s %6s %8s %6s | %7s %8s %6s %7s %6s | %8s %6s\n", "prec", "zero",
                  "params", "x", "grads", "x", "optimizer", "x", "state", "x", "activ.", "act.peak", "x", "saved", "x",
                  "tot.peak", "x");
      for (const MemoryResult& r : results) {
        const MemoryResult* f = ref_of(r);
        if (!f && r.precision != "fp32") continue;
        if (!f) f = &r;
        std::printf(" %5s %5d %8.1f %6.3f %8.1f %6.3f %9.1f %6.3f %8.1f %6.3f | %7.2f %8.2f %6.3f %7.2f %6.3f | %8.1f "
                    "%6.3f\n",
                    r.precision.c_str(), r.zero, r.current[0] / kMiB, ratio_of(r.current[0], f->current[0]),
                    r.current[1] / kMiB, ratio_of(r.current[1], f->current[1]), r.current[2] / kMiB,
                    ratio_of(r.current[2], f->current[2]), r.state_bytes() / kMiB,
                    ratio_of(r.state_bytes(), f->state_bytes()), r.current[3] / kMiB, r.step_peak[3] / kMiB,
                    ratio_of(r.step_peak[3], f->step_peak[3]), r.saved_peak_bytes / kMiB,
                    ratio_of(r.saved_peak_bytes, f->saved_peak_bytes), r.step_peak[6] / kMiB,
                    ratio_of(r.step_peak[6], f->step_peak[6]));
      }
      for (const HalfCheck& h : half_checks)
        std::printf("# %s / fp32, ZeRO %d: parameters %.3f, peak activations %.3f (saved %.3f); target at most 0.5 "
                    "+ %.0f %%: %s (saved: %s)\n",
                    h.precision.c_str(), h.zero, h.params, h.activations_peak, h.saved_peak, kHalfTolerance * 100,
                    h.met ? "met" : "not met", h.saved_met ? "met" : "not met");
    }
  }
  if (print && a.json) {
    for (const MemoryResult& r : results) {
      json by_rank = json::array();
      for (const auto& v : r.current_by_rank)
        by_rank.push_back({{"params_bytes", v[0]}, {"grads_bytes", v[1]}, {"optimizer_bytes", v[2]}});
      json j{{"type", "memory"},
             {"precision", r.precision},
             {"zero_stage", r.zero},
             {"dp", dp},
             {"num_parameters", num_parameters},
             {"params_bytes", r.current[0]},
             {"grads_bytes", r.current[1]},
             {"optimizer_bytes", r.current[2]},
             {"activations_bytes", r.current[3]},
             {"communication_bytes", r.current[4]},
             {"state_bytes", r.state_bytes()},
             {"total_bytes", r.current[6]},
             {"ratio_to_ddp", ratio_to_ddp(r)},
             {"expected_ratio", expected_ratio(r.zero, shards, r.policy)},
             {"step_peak_params_bytes", r.step_peak[0]},
             {"step_peak_grads_bytes", r.step_peak[1]},
             {"step_peak_optimizer_bytes", r.step_peak[2]},
             {"step_peak_activations_bytes", r.step_peak[3]},
             {"step_peak_communication_bytes", r.step_peak[4]},
             {"step_peak_total_bytes", r.step_peak[6]},
             {"saved_activations_peak_bytes", r.saved_peak_bytes},
             {"init_peak_params_bytes", r.init_peak[0]},
             {"init_peak_total_bytes", r.init_peak[6]},
             {"leaked_bytes", r.leaked_bytes},
             {"skipped_steps", r.skipped_steps},
             {"step_ms", r.step_ms},
             {"per_rank", by_rank}};
      if (const MemoryResult* f = ref_of(r)) {
        j["params_ratio_to_fp32"] = ratio_of(r.current[0], f->current[0]);
        j["activations_peak_ratio_to_fp32"] = ratio_of(r.step_peak[3], f->step_peak[3]);
        j["saved_activations_peak_ratio_to_fp32"] = ratio_of(r.saved_peak_bytes, f->saved_peak_bytes);
        j["state_ratio_to_fp32"] = ratio_of(r.state_bytes(), f->state_bytes());
        j["total_peak_ratio_to_fp32"] = ratio_of(r.step_peak[6], f->step_peak[6]);
      }
      std::printf("%s\n", j.dump().c_str());
    }
    // One summary per precision; zero3_ratio -1 where stage 0 or 3 did not run.
    for (const std::string& prec : a.precisions) {
      const std::string name = precision::policy_name(precision::parse_policy(prec));
      Zero3Check c{name, -1.0, expected_ratio(3, shards, precision::parse_policy(prec)), false};
      for (const Zero3Check& x : z3_checks)
        if (x.precision == name) c = x;
      json halves = json::array();
      for (const HalfCheck& h : half_checks)
        if (h.precision == name)
          halves.push_back({{"zero_stage", h.zero},
                            {"params_ratio_to_fp32", h.params},
                            {"activations_peak_ratio_to_fp32", h.activations_peak},
                            {"saved_activations_peak_ratio_to_fp32", h.saved_peak},
                            {"half_met", h.met},
                            {"half_met_saved", h.saved_met}});
      std::printf("%s\n", json{{"type", "memory_summary"},
                               {"precision", name},
                               {"zero3_ratio", c.ratio},
                               {"target_ratio", c.target},
                               {"tolerance", kZero3Tolerance},
                               {"met", c.met},
                               {"against_fp32", halves}}
                              .dump()
                              .c_str());
    }
  }
  return z3_ok ? 0 : 1;
}

// ---- overlap ----------------------------------------------------------------

/// DDP's buckets for `model` (element counts), by DataParallel's rule:
/// parameters in reverse registration order, a bucket closed once it holds at
/// least `bucket_bytes`. Only for one stage without tied copies (pp = 1).
std::vector<std::int64_t> ddp_bucket_numels(nn::GPT& model, std::int64_t bucket_bytes) {
  std::vector<std::int64_t> buckets;
  std::int64_t numel = 0;
  const std::vector<nn::Parameter*> params = model.parameters();
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    numel += shape_numel((*it)->shape());
    if (numel * std::int64_t(sizeof(float)) >= bucket_bytes) {
      buckets.push_back(numel);
      numel = 0;
    }
  }
  if (numel > 0) buckets.push_back(numel);
  return buckets;
}

/// Milliseconds to all-reduce (avg, f32, in place) every bucket of `flat`
/// back to back on `dp`, all enqueued at once as DDP does, after a barrier.
double time_serial(comm::Communicator& dp, Tensor& flat, const std::vector<std::int64_t>& buckets) {
  dp.barrier()->wait();
  const double t0 = now_ms();
  std::vector<comm::WorkPtr> works;
  std::int64_t at = 0;
  std::vector<Tensor> views;
  for (std::int64_t n : buckets) {
    views.push_back(flat.slice(at, at + n));
    at += n;
  }
  for (Tensor& v : views) works.push_back(dp.all_reduce(v, v, comm::ReduceOp::kAvg));
  for (auto& w : works) w->wait();
  return now_ms() - t0;
}

int run_overlap(const Args& a, comm::DeviceMesh& mesh, const nn::GPTConfig& model) {
  comm::Communicator& world = mesh.world();
  const bool print = world.rank() == 0;
  train::TrainerOptions o = base_options(a, model);
  o.data_parallel.zero_stage = 0;
  o.data_parallel.bucket_bytes = a.bucket_bytes;
  const data::TokenSplits splits = splits_for(o, mesh.layout().dp_size());
  train::Trainer trainer(o, splits, &mesh);
  std::unique_ptr<train::Trainer> single;
  if (a.one_bucket) {
    train::TrainerOptions one = o;
    one.data_parallel.bucket_bytes = std::int64_t(1) << 62;
    single = std::make_unique<train::Trainer>(one, splits, &mesh);
  }
  const std::vector<std::int64_t> buckets = ddp_bucket_numels(trainer.model(), a.bucket_bytes);
  std::int64_t total_numel = 0;
  for (std::int64_t n : buckets) total_numel += n;
  Tensor flat = Tensor::zeros({total_numel}, DType::kF32, Device::cpu(), MemCategory::kOther);
  const std::vector<std::int64_t> one_bucket{total_numel};

  struct Step {
    double backward_ms, exposed_ms, max_wait_ms, serial_ms, single_ms, step_ms, one_backward_ms, one_exposed_ms,
        one_step_ms, hidden;
  };
  std::vector<Step> steps;
  const int ranks = world.size();
  auto max_of = [&](const std::vector<double>& all, std::size_t i, std::size_t n) {
    double m = all[i];
    for (int r = 1; r < ranks; ++r) m = std::max(m, all[std::size_t(r) * n + i]);
    return m;
  };
  auto min_of = [&](const std::vector<double>& all, std::size_t i, std::size_t n) {
    double m = all[i];
    for (int r = 1; r < ranks; ++r) m = std::min(m, all[std::size_t(r) * n + i]);
    return m;
  };
  for (std::int64_t i = 0; i < a.warmup + a.steps; ++i) {
    const train::StepStats s = trainer.step();
    const parallel::ReductionTimes t = trainer.data_parallel().reduction_times();
    const double serial_ms = time_serial(mesh.dp_group(), flat, buckets);
    const double single_ms = time_serial(mesh.dp_group(), flat, one_bucket);
    double one_backward_ms = 0, one_exposed_ms = 0, one_step_ms = 0;
    if (single) {
      one_step_ms = single->step().ms;
      one_backward_ms = single->data_parallel().reduction_times().backward_ms;
      one_exposed_ms = single->data_parallel().reduction_times().exposed_ms;
    }
    constexpr std::size_t n = 8;
    const std::vector<double> all = gather_f64(
        world, {t.backward_ms, t.exposed_ms, serial_ms, single_ms, s.ms, one_exposed_ms, one_step_ms, one_backward_ms});
    Step st{};
    st.backward_ms = max_of(all, 0, n);
    st.exposed_ms = min_of(all, 1, n);
    st.max_wait_ms = max_of(all, 1, n);
    st.serial_ms = max_of(all, 2, n);
    st.single_ms = max_of(all, 3, n);
    st.step_ms = max_of(all, 4, n);
    st.one_exposed_ms = min_of(all, 5, n);
    st.one_step_ms = max_of(all, 6, n);
    st.one_backward_ms = max_of(all, 7, n);
    st.hidden = st.serial_ms > 0 ? 1.0 - st.exposed_ms / st.serial_ms : 0.0;
    const bool timed = i >= a.warmup;
    if (print)
      std::fprintf(stderr, "# overlap %s %lld: step %.0f ms, exposed %.1f ms of %.1f ms serial (hidden %.1f %%)\n",
                   timed ? "step" : "warm-up", (long long)(timed ? i - a.warmup + 1 : i + 1), st.step_ms,
                   st.exposed_ms, st.serial_ms, 100 * st.hidden);
    if (timed) steps.push_back(st);
  }
  auto med = [&](double Step::*field) {
    std::vector<double> v;
    for (const Step& st : steps) v.push_back(st.*field);
    return median(v);
  };
  const double hidden = med(&Step::hidden);
  const bool met = hidden >= kHiddenTarget;
  const std::int64_t grad_bytes = total_numel * std::int64_t(sizeof(float));
  if (print && !a.json) {
    std::printf("# overlap: %s, batch %lld x %lld, dp %d, DDP buckets of >= %lld bytes: %zu buckets, %.1f MiB of "
                "gradients\n",
                model.str().c_str(), (long long)a.micro_batch, (long long)a.seq, mesh.layout().dp_size(),
                (long long)a.bucket_bytes, buckets.size(), grad_bytes / kMiB);
    std::printf("# ms; exposed = finish_gradients()' wait on the rank that waited least, max wait = on the rank\n"
                "# that waited most (skew between ranks included); serial = the same buckets all-reduced after the\n"
                "# step with nothing else running, single = one all_reduce of all the gradients (maxima over\n"
                "# ranks); 1-bkt = a second trainer with one bucket, which starts when backward ends; backward =\n"
                "# from the last micro-batch's backward to finish_gradients() (maxima over ranks)\n");
    std::printf("#%5s %9s %9s %9s %9s %9s %8s %9s | %9s %9s %9s\n", "step", "backward", "exposed", "max wait",
                "serial", "single", "hidden", "step", "1-bkt bwd", "1-bkt exp", "1-bkt stp");
    const char* row = " %5s %9.1f %9.1f %9.1f %9.1f %9.1f %7.1f%% %9.1f | %9.1f %9.1f %9.1f\n";
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Step& st = steps[i];
      std::printf(row, std::to_string(i + 1).c_str(), st.backward_ms, st.exposed_ms, st.max_wait_ms, st.serial_ms,
                  st.single_ms, 100 * st.hidden, st.step_ms, st.one_backward_ms, st.one_exposed_ms, st.one_step_ms);
    }
    std::printf(row, "med", med(&Step::backward_ms), med(&Step::exposed_ms), med(&Step::max_wait_ms),
                med(&Step::serial_ms), med(&Step::single_ms), 100 * hidden, med(&Step::step_ms),
                med(&Step::one_backward_ms), med(&Step::one_exposed_ms), med(&Step::one_step_ms));
    std::printf("# hidden share (median over %zu steps): %.1f %%, target >= %.0f %%: %s\n", steps.size(),
                100 * hidden, 100 * kHiddenTarget, met ? "met" : "not met");
  }
  if (print && a.json) {
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Step& st = steps[i];
      std::printf("%s\n", json{{"type", "overlap_step"},
                               {"step", i + 1},
                               {"backward_ms", st.backward_ms},
                               {"exposed_ms", st.exposed_ms},
                               {"max_wait_ms", st.max_wait_ms},
                               {"serial_ms", st.serial_ms},
                               {"single_ms", st.single_ms},
                               {"hidden_share", st.hidden},
                               {"step_ms", st.step_ms},
                               {"one_bucket_backward_ms", st.one_backward_ms},
                               {"one_bucket_exposed_ms", st.one_exposed_ms},
                               {"one_bucket_step_ms", st.one_step_ms}}
                              .dump()
                              .c_str());
    }
    std::printf("%s\n", json{{"type", "overlap_summary"},
                             {"model", model.str()},
                             {"dp", mesh.layout().dp_size()},
                             {"bucket_bytes", a.bucket_bytes},
                             {"buckets", buckets.size()},
                             {"grad_bytes", grad_bytes},
                             {"steps", steps.size()},
                             {"backward_ms", med(&Step::backward_ms)},
                             {"exposed_ms", med(&Step::exposed_ms)},
                             {"max_wait_ms", med(&Step::max_wait_ms)},
                             {"serial_ms", med(&Step::serial_ms)},
                             {"single_ms", med(&Step::single_ms)},
                             {"step_ms", med(&Step::step_ms)},
                             {"one_bucket_backward_ms", med(&Step::one_backward_ms)},
                             {"one_bucket_exposed_ms", med(&Step::one_exposed_ms)},
                             {"one_bucket_step_ms", med(&Step::one_step_ms)},
                             {"hidden_share", hidden},
                             {"target_hidden_share", kHiddenTarget},
                             {"met", met}}
                            .dump()
                            .c_str());
  }
  return 0;
}

// ---- bubble -----------------------------------------------------------------

struct BubbleRow {
  std::string schedule;
  int m = 0, stage = 0;
  double compute_ms = 0, idle_ms = 0, step_ms = 0;
  std::int64_t peak_saved_bytes = 0;
  double span_ms = 0;  // the longest compute + idle of any stage: the pipeline's wall time
  double idle_share() const { return idle_ms + compute_ms > 0 ? idle_ms / (idle_ms + compute_ms) : 0.0; }
  double span_idle_share() const { return span_ms > 0 ? 1.0 - compute_ms / span_ms : 0.0; }
};

int run_bubble(const Args& a, comm::DeviceMesh& mesh, const nn::GPTConfig& model) {
  comm::Communicator& world = mesh.world();
  const bool print = world.rank() == 0;
  const int p = mesh.layout().pp_size(), ranks = world.size();
  std::vector<BubbleRow> rows;
  for (const std::string& name : a.schedules) {
    for (int m : a.micro_batches) {
      train::TrainerOptions o = base_options(a, model);
      o.schedule = parallel::parse_schedule(name);
      o.grad_accum = m;
      const data::TokenSplits splits = splits_for(o, mesh.layout().dp_size());
      train::Trainer trainer(o, splits, &mesh);
      double compute_ms = 0, idle_ms = 0;
      std::int64_t peak = 0;
      std::vector<double> step_ms;
      for (std::int64_t i = 0; i < a.warmup + a.steps; ++i) {
        const train::StepStats s = trainer.step();
        const parallel::PipelineStats& ps = trainer.pipeline().stats();
        const bool timed = i >= a.warmup;
        if (timed) {
          compute_ms += ps.compute_ms;
          idle_ms += ps.idle_ms;
          step_ms.push_back(s.ms);
        }
        peak = std::max(peak, ps.peak_saved_bytes);
        if (print)
          std::fprintf(stderr, "# bubble %s m %d %s %lld: %.0f ms (stage 0: compute %.0f ms, idle %.0f ms)\n",
                       name.c_str(), m, timed ? "step" : "warm-up", (long long)(timed ? i - a.warmup + 1 : i + 1),
                       s.ms, ps.compute_ms, ps.idle_ms);
      }
      const std::vector<double> all = gather_f64(
          world, {double(mesh.coord().pp_rank), double(mesh.coord().dp_rank), double(mesh.coord().tp_rank), compute_ms, idle_ms,
                  double(peak), median(step_ms)});
      // The span is the longest stage; one row per stage: its dp 0, tp 0 rank.
      double span_ms = 0;
      for (int r = 0; r < ranks; ++r)
        span_ms = std::max(span_ms, all[std::size_t(r) * 7 + 3] + all[std::size_t(r) * 7 + 4]);
      for (int r = 0; r < ranks; ++r) {
        const double* v = &all[std::size_t(r) * 7];
        if (v[1] != 0 || v[2] != 0) continue;
        rows.push_back({name, m, int(v[0]), v[3], v[4], v[6], std::int64_t(v[5]), span_ms});
      }
    }
  }
  std::sort(rows.begin(), rows.end(), [](const BubbleRow& x, const BubbleRow& y) {
    return std::tie(x.m, x.stage, x.schedule) < std::tie(y.m, y.stage, y.schedule);
  });
  // 1F1B against GPipe, stage by stage: below where m > p - s, never above.
  bool saved_ok = true;
  std::vector<std::string> saved_notes;
  for (const BubbleRow& f : rows) {
    if (f.schedule != "1f1b") continue;
    for (const BubbleRow& g : rows) {
      if (g.schedule != "gpipe" || g.m != f.m || g.stage != f.stage) continue;
      const bool must_be_below = f.m > p - f.stage;
      const bool ok =
          must_be_below ? f.peak_saved_bytes < g.peak_saved_bytes : f.peak_saved_bytes <= g.peak_saved_bytes;
      if (!ok) {
        saved_ok = false;
        saved_notes.push_back(fmt::format("m {} stage {}: 1f1b {} bytes, gpipe {}", f.m, f.stage, f.peak_saved_bytes,
                                          g.peak_saved_bytes));
      }
    }
  }
  auto theory = [p](int m) { return double(p - 1) / double(m + p - 1); };
  if (print && !a.json) {
    std::printf("# bubble: %s, micro-batch %lld x %lld, pp %d, dp %d, %lld timed step(s) after %lld warm-up\n",
                model.str().c_str(), (long long)a.micro_batch, (long long)a.seq, p, mesh.layout().dp_size(),
                (long long)a.steps, (long long)a.warmup);
    std::printf("# ms summed over the timed steps; idle%% = idle / (idle + compute) (PipelineStats: the stage's own\n"
                "# time inside train_step); span%% = 1 - compute / span, span = the longest compute + idle of any\n"
                "# stage; theory = (p-1)/(m+p-1); saved = peak activation bytes held by micro-batches in flight;\n"
                "# step = median step ms\n");
    std::printf("#%4s %6s %8s %10s %10s %8s %8s %8s %12s %10s %9s\n", "m", "stage", "schedule", "compute", "idle",
                "idle%", "span%", "theory%", "ms/micro-b.", "saved MiB", "step ms");
    for (const BubbleRow& r : rows)
      std::printf(" %4d %6d %8s %10.1f %10.1f %7.1f%% %7.1f%% %7.1f%% %12.1f %10.2f %9.1f\n", r.m, r.stage,
                  r.schedule.c_str(), r.compute_ms, r.idle_ms, 100 * r.idle_share(), 100 * r.span_idle_share(),
                  100 * theory(r.m), r.compute_ms / double(r.m * a.steps), r.peak_saved_bytes / kMiB, r.step_ms);
    std::printf("# 1F1B peak saved bytes below GPipe's wherever m > p - stage (equal elsewhere): %s\n",
                saved_ok ? "yes" : "NO");
    for (const std::string& n : saved_notes) std::printf("#   %s\n", n.c_str());
  }
  if (print && a.json) {
    for (const BubbleRow& r : rows)
      std::printf("%s\n", json{{"type", "bubble"},
                               {"pp", p},
                               {"schedule", r.schedule},
                               {"micro_batches", r.m},
                               {"stage", r.stage},
                               {"compute_ms", r.compute_ms},
                               {"idle_ms", r.idle_ms},
                               {"idle_share", r.idle_share()},
                               {"span_ms", r.span_ms},
                               {"span_idle_share", r.span_idle_share()},
                               {"theory_idle_share", theory(r.m)},
                               {"peak_saved_bytes", r.peak_saved_bytes},
                               {"step_ms", r.step_ms}}
                              .dump()
                              .c_str());
    std::printf("%s\n", json{{"type", "bubble_summary"},
                             {"model", model.str()},
                             {"pp", p},
                             {"steps", a.steps},
                             {"saved_1f1b_below_gpipe", saved_ok}}
                            .dump()
                            .c_str());
  }
  return saved_ok ? 0 : 1;
}

// ---- main -------------------------------------------------------------------

/// Fills the mode's defaults into what the command line left at 0.
nn::GPTConfig resolve(Args& a, int world_size) {
  nn::GPTConfig m;
  std::int64_t seq = 0, micro = 0, steps = 0, warmup = 0;
  if (a.mode == "memory") {
    // GPT-2 small's shapes at the padded vocabulary; a short context keeps one step quick.
    m = {.vocab_size = 50304, .context = 64, .n_layer = 12, .n_head = 12, .n_embd = 768};
    seq = 32, micro = 1, steps = 1, warmup = 0;
  } else if (a.mode == "overlap") {
    // gpt_train's default model: backward long enough to hide 41 MiB of gradients.
    m = {.vocab_size = 256, .context = 128, .n_layer = 6, .n_head = 6, .n_embd = 384};
    seq = 128, micro = 4, steps = 8, warmup = 2;
  } else {
    // Blocks dominate (small vocabulary): stages differ by the embedding and the head only.
    m = {.vocab_size = 256, .context = 128, .n_layer = 8, .n_head = 4, .n_embd = 256};
    seq = 128, micro = 4, steps = 3, warmup = 1;
  }
  if (a.layers > 0) m.n_layer = a.layers;
  if (a.heads > 0) m.n_head = a.heads;
  if (a.embd > 0) m.n_embd = a.embd;
  if (a.vocab > 0) m.vocab_size = a.vocab;
  if (a.context > 0) m.context = a.context;
  if (a.seq == 0) a.seq = seq;
  if (a.micro_batch == 0) a.micro_batch = micro;
  if (a.steps == 0) a.steps = steps;
  if (a.warmup < 0) a.warmup = warmup;
  if (a.pp == 0) a.pp = a.mode == "bubble" ? world_size / a.tp : 1;
  return m;
}

int bench(int argc, char** argv, const comm::MpiRuntime& runtime) {
  const bool print = runtime.world_rank() == 0;
  Args a;
  CLI::App app{"ht-parallel-bench: ZeRO memory per rank, DDP all-reduce overlap and pipeline bubbles of "
               "ht::train::Trainer under mpirun"};
  app.option_defaults()->always_capture_default();
  app.add_option("--mode", a.mode, "memory (ZeRO 0-3 bytes per rank), overlap (DDP), bubble (pipeline)")
      ->required()
      ->check(CLI::IsMember({"memory", "overlap", "bubble"}));
  app.add_option("--layers", a.layers, "n_layer (0: the mode's model)");
  app.add_option("--heads", a.heads, "n_head (0: the mode's model)");
  app.add_option("--embd", a.embd, "n_embd (0: the mode's model)");
  app.add_option("--vocab", a.vocab, "vocab_size (0: the mode's model)");
  app.add_option("--context", a.context, "context (0: the mode's model)");
  app.add_option("--seq", a.seq, "tokens per sequence (0: the mode's)");
  app.add_option("--micro-batch", a.micro_batch, "sequences per micro-batch and dp rank (0: the mode's)");
  app.add_option("--tp", a.tp, "tensor-parallel size")->check(CLI::PositiveNumber);
  app.add_option("--pp", a.pp, "pipeline stages (0: the world size for bubble, 1 otherwise)");
  app.add_option("--steps", a.steps, "timed steps (0: memory 1, overlap 8, bubble 3)");
  app.add_option("--warmup", a.warmup, "untimed steps first (-1: memory 0, overlap 2, bubble 1)");
  app.add_option("--zero", a.zero_stages, "memory: ZeRO stages, in order")->delimiter(',');
  app.add_option("--precision", a.precisions, "memory: precisions (fp32, fp16, bf16), in order; each runs every stage")
      ->delimiter(',');
  app.add_option("--bucket-bytes", a.bucket_bytes, "overlap: DDP bucket size in bytes")->check(CLI::PositiveNumber);
  app.add_flag("!--no-one-bucket", a.one_bucket, "overlap: skip the one-bucket comparison trainer");
  app.add_option("--schedules", a.schedules, "bubble: schedules (gpipe, 1f1b)")->delimiter(',');
  app.add_option("--micro-batches", a.micro_batches, "bubble: micro-batch counts m")->delimiter(',');
  app.add_option("-T,--timeout", a.timeout_s, "deadline of each collective in seconds (0: HT_COMM_TIMEOUT or 300)");
  app.add_flag("--json", a.json, "JSON Lines instead of the tables");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    if (!print) return err.get_exit_code() == 0 ? 0 : 2;
    return app.exit(err) == 0 ? 0 : 2;
  }
  const nn::GPTConfig model = resolve(a, runtime.world_size());
  for (int z : a.zero_stages)
    HT_CHECK(z >= 0 && z <= 3, ErrorKind::kConfig, "--zero {} is not a ZeRO stage: choose from 0,1,2,3", z);
  for (int m : a.micro_batches)
    HT_CHECK(m > 0, ErrorKind::kConfig, "--micro-batches {}: every count must be positive", m);
  for (const std::string& s : a.schedules) (void)parallel::parse_schedule(s);
  for (const std::string& p : a.precisions) (void)precision::parse_policy(p);
  HT_CHECK(a.mode == "memory" || a.precisions == std::vector<std::string>{"fp32"}, ErrorKind::kConfig,
           "--precision applies to --mode memory only (got --mode {})", a.mode);
  HT_CHECK(a.steps > 0 && a.warmup >= 0, ErrorKind::kConfig, "--steps ({}) must be positive, --warmup ({}) >= 0",
           a.steps, a.warmup);
  HT_CHECK(!a.zero_stages.empty() && !a.micro_batches.empty() && !a.schedules.empty() && !a.precisions.empty(),
           ErrorKind::kConfig, "--zero, --precision, --schedules and --micro-batches need at least one value each");

  const int world_size = runtime.world_size();
  HT_CHECK(a.mode != "overlap" || (a.tp == 1 && a.pp == 1 && world_size > 1), ErrorKind::kConfig,
           "--mode overlap measures DDP: run with --tp 1 --pp 1 on at least 2 ranks (got tp {}, pp {}, {} ranks)",
           a.tp, a.pp, world_size);
  HT_CHECK(a.mode != "bubble" || a.pp > 1, ErrorKind::kConfig,
           "--mode bubble needs a pipeline: --pp 2 or more (got --pp {} on {} ranks)", a.pp, world_size);

  comm::CommOptions copts = comm::comm_options_from_env();
  if (a.timeout_s > 0) copts.timeout = std::chrono::milliseconds(std::int64_t(a.timeout_s * 1000));
  comm::DeviceMesh mesh(comm::make_mpi_world(copts), a.tp, a.pp);
  const comm::MeshLayout& layout = mesh.layout();
  if (print) {
    const double timeout_s = std::chrono::duration<double>(copts.timeout).count();
    if (a.json) {
      std::printf("%s\n", json{{"type", "run"},
                               {"version", HT_VERSION},
                               {"git_commit", HT_GIT_COMMIT},
                               {"build_type", HT_BUILD_TYPE},
                               {"build", ht::build_description()},
                               {"mode", a.mode},
                               {"world_size", runtime.world_size()},
                               {"tp", layout.tp_size()},
                               {"pp", layout.pp_size()},
                               {"dp", layout.dp_size()},
                               {"precisions", a.precisions},
                               {"model", model.str()},
                               {"micro_batch", a.micro_batch},
                               {"seq_len", a.seq},
                               {"steps", a.steps},
                               {"warmup_steps", a.warmup},
                               {"host", runtime.host()},
                               {"timeout_s", timeout_s},
                               {"comm_debug", copts.debug},
                               {"omp_num_threads_env", env_or("OMP_NUM_THREADS", "")},
                               {"omp_wait_policy_env", env_or("OMP_WAIT_POLICY", "")},
                               {"openblas_coretype_env", env_or("OPENBLAS_CORETYPE", "")}}
                              .dump()
                              .c_str());
    } else {
      std::printf("# ht-parallel-bench %s: %s\n", a.mode.c_str(), ht::build_description().c_str());
      std::printf("# world %d = pp %d x dp %d x tp %d, host %s; model %s, micro-batch %lld x %lld\n",
                  runtime.world_size(), layout.pp_size(), layout.dp_size(), layout.tp_size(), runtime.host().c_str(),
                  model.str().c_str(), (long long)a.micro_batch, (long long)a.seq);
      if (a.mode == "memory") {
        std::string precisions;
        for (const std::string& p : a.precisions) precisions += (precisions.empty() ? "" : ",") + p;
        std::printf("# precision %s (working copies, activations and gradients; f32 masters and reduction)\n",
                    precisions.c_str());
      }
      std::printf("# HT_COMM_TIMEOUT %g s  HT_COMM_DEBUG %d  OMP_NUM_THREADS %s  OMP_WAIT_POLICY %s  "
                  "OPENBLAS_CORETYPE %s\n",
                  timeout_s, int(copts.debug), env_or("OMP_NUM_THREADS", "(unset)").c_str(),
                  env_or("OMP_WAIT_POLICY", "(unset)").c_str(), env_or("OPENBLAS_CORETYPE", "(unset)").c_str());
    }
    std::fflush(stdout);
  }
  int rc = 0;
  if (a.mode == "memory")
    rc = run_memory(a, mesh, model);
  else if (a.mode == "overlap")
    rc = run_overlap(a, mesh, model);
  else
    rc = run_bubble(a, mesh, model);
  std::fflush(stdout);
  mesh.finalize(copts.timeout);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<comm::MpiRuntime> runtime;
  try {
    runtime.emplace(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-parallel-bench: %s\n", e.what());
    return 2;
  }
  try {
    return bench(argc, argv, *runtime);
  } catch (const Error& e) {
    std::fprintf(stderr, "ht-parallel-bench: rank %d: %s\n", runtime->world_rank(), e.what());
    std::fflush(stderr);
    // Every rank checks the same configuration, so a kConfig error is raised
    // everywhere; anything else may leave peers waiting in a collective.
    if (e.kind() == ErrorKind::kConfig) return 2;
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ht-parallel-bench: rank %d: %s\n", runtime->world_rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
