// ht-parallel-bench --mode memory: bytes per rank of each ZeRO stage, in each
// precision, from ht's allocator accounting (ht/core/memory.h).
//
// For each precision (default fp32) and each ZeRO stage in turn (dp = world /
// (tp pp)), an Engine is built, runs --steps steps and is destroyed. "init
// peak" comes from a peak reset before construction, "current" after the last
// step, "step peak" from a reset after construction; figures are the maximum
// over ranks. "ratio" is parameters + gradients + optimizer state over DDP's
// in the same precision; "expected" what the stage should give with s shards
// (f32: params 1 or 1/s, gradients 1 or 1/s, AdamW's two moments 2 or 2/s,
// over DDP's 4; see expected_state() for fp16/bf16). Target: ZeRO-3 within
// 10 % of that (1/dp in f32: 0.25 at dp = 4); the exit status is 1 outside.
// Under fp16/bf16 the parameters are the 16-bit working copies and the f32
// master weights count as optimizer state (the optimizer owns them). With
// fp32 and a 16-bit precision in the list, a third table sets each 16-bit run
// against fp32 at the same stage; the target, parameters and peak
// activations halved, is reported, not enforced.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "parallel_common.h"
#include "ht/core/memory.h"
#include "ht/plan/memory_model.h"
#include "ht/precision/policy.h"

namespace ht::bench {
namespace {

using nlohmann::json;

constexpr double kZero3Tolerance = 0.10;
/// 16-bit against f32 at the same stage: the target is half, within this share.
constexpr double kHalfTolerance = 0.10;

constexpr MemCategory kCategories[] = {MemCategory::kParameters,  MemCategory::kGradients,
                                       MemCategory::kOptimizerState, MemCategory::kActivations,
                                       MemCategory::kCommunication,  MemCategory::kOther};
// Positions in host_bytes(): the categories in kCategories order, then the total.
constexpr std::size_t kParams = 0, kGrads = 1, kOptim = 2, kActiv = 3, kComm = 4, kTotal = 6;

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
/// category, with `s` shards, under `p`: the plan layer's memory model
/// (plan::state_bytes_per_parameter, ht/plan/memory_model.h, from
/// DataParallel's buffers in src/parallel/flat_group.h). f32: 4 + 4 + 8 =
/// 16 bytes for DDP; f16/bf16 with f32 reduction: 2 + (2 + 4) + (8 + 4) = 20
/// bytes for DDP, 18/s at stage 3.
using plan::StateBytes;
StateBytes expected_state(int z, int s, const precision::Policy& p) { return plan::state_bytes_per_parameter(z, s, p); }

/// What stage `z` holds in parameters + gradients + optimizer state over DDP
/// in the same precision, with `s` shards (f32: (1 + 1 + 2) / 4 at DDP).
double expected_ratio(int z, int s, const precision::Policy& p) {
  return expected_state(z, s, p).total() / expected_state(0, s, p).total();
}

double ratio_of(std::int64_t x, std::int64_t ref) { return ref > 0 ? double(x) / double(ref) : 0.0; }

struct MemoryResult {
  std::string precision;
  precision::Policy policy;
  int zero = 0;
  // Maximum over ranks, kCategories order then the total.
  std::vector<std::int64_t> current, step_peak, init_peak;
  std::vector<std::vector<std::int64_t>> current_by_rank;
  std::int64_t leaked_bytes = 0;  // host bytes still held after the engine was destroyed, max over ranks
  double step_ms = 0;
  std::int64_t skipped_steps = 0;  // f16 overflows (no update; the bytes held are the same)
  // What forward saved for backward at most (PipelineStats::peak_saved_bytes,
  // maximum over ranks): the activations proper, without the transient
  // buffers (an op's outputs before they are saved, gradients of
  // activations, 16-bit ops' f32 staging copies) that the allocator's
  // activations category also counts.
  std::int64_t saved_peak_bytes = 0;
  std::int64_t state_bytes() const { return current[kParams] + current[kGrads] + current[kOptim]; }
};

/// One rank's figures of one engine, before they are gathered.
struct RankMemory {
  std::vector<std::int64_t> init_peak, current, step_peak;
  double step_ms = 0;
  std::int64_t skipped = 0, saved_peak = 0, leaked = 0;
};

/// Builds an engine with options `o`, steps it and destroys it, measuring
/// this rank's bytes; `num_parameters` gets the model's (this stage's) count.
RankMemory step_engine(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model,
                       const data::TokenSplits& splits, const train::EngineOptions& o, const std::string& prec,
                       std::int64_t& num_parameters) {
  const bool print = mesh.world().rank() == 0;
  mesh.world().barrier()->wait();
  const std::int64_t before_bytes = memory_stats_total(DeviceType::kCPU).current_bytes;
  reset_memory_peaks();
  RankMemory m;
  {
    LmEngine engine(o, model, splits, a.seq, &mesh);
    num_parameters = engine->model().num_parameters();
    m.init_peak = host_bytes(true);
    reset_memory_peaks();
    for (std::int64_t i = 0; i < a.warmup + a.steps; ++i) {
      const train::StepStats s = engine->step();
      m.step_ms = s.ms;
      m.skipped = s.skipped_steps;
      m.saved_peak = std::max(m.saved_peak, engine->pipeline().stats().peak_saved_bytes);
      if (print)
        std::fprintf(stderr, "# memory %s zero %d: step %lld/%lld %.0f ms, loss %.4f, scale %g%s\n", prec.c_str(),
                     o.layout.zero, (long long)(i + 1), (long long)(a.warmup + a.steps), s.ms, s.loss,
                     double(s.loss_scale), s.skipped ? " (skipped: overflow)" : "");
    }
    m.current = host_bytes(false);
    m.step_peak = host_bytes(true);
  }
  mesh.world().barrier()->wait();
  m.leaked = memory_stats_total(DeviceType::kCPU).current_bytes - before_bytes;
  return m;
}

/// One engine at ZeRO stage `z` in precision `prec`: built, stepped,
/// destroyed; its figures gathered from every rank.
MemoryResult measure_memory(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model,
                            const data::TokenSplits& splits, const std::string& prec, int z,
                            std::int64_t& num_parameters) {
  comm::Communicator& world = mesh.world();
  const int ranks = world.size();
  train::EngineOptions o = base_options(a);
  o.layout.zero = z;
  o.precision = precision::parse_policy(prec);
  const RankMemory m = step_engine(a, mesh, model, splits, o, prec, num_parameters);
  MemoryResult r;
  r.precision = precision::policy_name(o.precision);
  r.policy = o.precision;
  r.zero = z;
  const std::vector<std::int64_t> all_current = gather_i64(world, m.current);
  r.current = max_over_ranks(all_current, ranks);
  r.step_peak = max_over_ranks(gather_i64(world, m.step_peak), ranks);
  r.init_peak = max_over_ranks(gather_i64(world, m.init_peak), ranks);
  r.leaked_bytes = max_over_ranks(gather_i64(world, {m.leaked}), ranks)[0];
  const std::size_t n = m.current.size();
  for (int rank = 0; rank < ranks; ++rank)
    r.current_by_rank.emplace_back(all_current.begin() + std::ptrdiff_t(rank * n),
                                   all_current.begin() + std::ptrdiff_t((rank + 1) * n));
  r.step_ms = double(max_over_ranks(gather_i64(world, {std::int64_t(m.step_ms)}), ranks)[0]);
  r.skipped_steps = m.skipped;
  r.saved_peak_bytes = max_over_ranks(gather_i64(world, {m.saved_peak}), ranks)[0];
  return r;
}

/// ZeRO-3 against DDP in one precision: within 10 % of what sharding
/// predicts (1/dp in f32, 0.9/dp under mixed precision: the full f16/bf16
/// gradient that DDP also keeps is not kept at stage 3).
struct Zero3Check {
  std::string precision;
  double ratio = -1, target = 0;
  bool met = false;
};

/// A 16-bit run against fp32 at the same stage: the working copies of the
/// parameters and the peak activations should be at most half (+10 %).
/// Reported, not enforced: which tensors an op keeps or stages in f32 is the
/// ops' choice, not this layer's.
struct HalfCheck {
  std::string precision;
  int zero = 0;
  double params = 0, activations_peak = 0, saved_peak = 0, state = 0, total_peak = 0;
  bool met = false, saved_met = false;
};

/// Every result of the run, and how they compare.
struct MemoryReport {
  std::vector<MemoryResult> results;
  int shards = 1;  // dp: no hybrid sharding in this benchmark
  std::int64_t num_parameters = 0;
  std::vector<Zero3Check> z3_checks;
  std::vector<HalfCheck> half_checks;

  const MemoryResult* find(const std::string& prec, int z) const {
    for (const MemoryResult& r : results)
      if (r.precision == prec && r.zero == z) return &r;
    return nullptr;
  }
  /// ZeRO ratios are within one precision: against that precision's DDP if
  /// it ran, else its first stage measured.
  const MemoryResult& ddp_of(const MemoryResult& r) const {
    if (const MemoryResult* d = find(r.precision, 0)) return *d;
    for (const MemoryResult& x : results)
      if (x.precision == r.precision) return x;
    return r;
  }
  double ratio_to_ddp(const MemoryResult& r) const { return ratio_of(r.state_bytes(), ddp_of(r).state_bytes()); }
  /// The fp32 run at the same stage, for a 16-bit run; else null.
  const MemoryResult* ref_of(const MemoryResult& r) const { return r.policy.mixed() ? find("fp32", r.zero) : nullptr; }
};

void check_zero3(MemoryReport& m, const std::vector<std::string>& precisions) {
  for (const std::string& prec : precisions) {
    const precision::Policy p = precision::parse_policy(prec);
    const MemoryResult *d = m.find(precision::policy_name(p), 0), *z3 = m.find(precision::policy_name(p), 3);
    if (!d || !z3) continue;
    Zero3Check c{precision::policy_name(p), m.ratio_to_ddp(*z3), expected_ratio(3, m.shards, p)};
    c.met = std::abs(c.ratio / c.target - 1.0) <= kZero3Tolerance;
    m.z3_checks.push_back(c);
  }
}

void check_halves(MemoryReport& m) {
  const auto halved = [](double x) { return x > 0 && x <= 0.5 * (1.0 + kHalfTolerance); };
  for (const MemoryResult& r : m.results) {
    const MemoryResult* f = m.ref_of(r);
    if (!f) continue;
    HalfCheck h{r.precision,
                r.zero,
                ratio_of(r.current[kParams], f->current[kParams]),
                ratio_of(r.step_peak[kActiv], f->step_peak[kActiv]),
                ratio_of(r.saved_peak_bytes, f->saved_peak_bytes),
                ratio_of(r.state_bytes(), f->state_bytes()),
                ratio_of(r.step_peak[kTotal], f->step_peak[kTotal])};
    h.met = halved(h.params) && halved(h.activations_peak);
    h.saved_met = halved(h.params) && halved(h.saved_peak);
    m.half_checks.push_back(h);
  }
}

// ---- the tables ---------------------------------------------------------------

void print_state_table(const ParallelArgs& a, const models::GPTConfig& model, const MemoryReport& m) {
  std::printf("# memory: %s, %lld parameters on this stage of the model, batch %lld x %lld, dp %d, %lld step(s)\n",
              model.str().c_str(), (long long)m.num_parameters, (long long)a.micro_batch, (long long)a.seq, m.shards,
              (long long)(a.warmup + a.steps));
  std::printf("# MiB per rank (maximum over ranks), host allocator accounting; current = after the last step;\n"
              "# ratio and expected against DDP in the same precision; optimizer includes the f32 master\n"
              "# weights under fp16/bf16 (params are then the 16-bit working copies)\n");
  std::printf("#%5s %5s %10s %10s %10s %10s %8s %9s %8s\n", "prec", "zero", "params", "grads", "optimizer", "total",
              "ratio", "expected", "target");
  for (const MemoryResult& r : m.results)
    std::printf(" %5s %5d %10.1f %10.1f %10.1f %10.1f %8.3f %9.3f %8s\n", r.precision.c_str(), r.zero,
                r.current[kParams] / kMiB, r.current[kGrads] / kMiB, r.current[kOptim] / kMiB,
                r.state_bytes() / kMiB, m.ratio_to_ddp(r), expected_ratio(r.zero, m.shards, r.policy),
                r.zero == 3 ? fmt::format("{:.3f}", expected_ratio(3, m.shards, r.policy)).c_str() : "-");
}

void print_peak_table(const MemoryReport& m) {
  std::printf("#\n# peaks, MiB per rank: during the step (reset after construction) and during construction\n");
  std::printf("#%5s %5s %10s %10s %10s %10s %10s %10s | %10s %10s | %8s %8s\n", "prec", "zero", "params", "grads",
              "optimizer", "activ.", "comm.", "total", "init par.", "init tot.", "leaked", "step ms");
  for (const MemoryResult& r : m.results)
    std::printf(" %5s %5d %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f | %10.1f %10.1f | %8.1f %8lld\n",
                r.precision.c_str(), r.zero, r.step_peak[kParams] / kMiB, r.step_peak[kGrads] / kMiB,
                r.step_peak[kOptim] / kMiB, r.step_peak[kActiv] / kMiB, r.step_peak[kComm] / kMiB,
                r.step_peak[kTotal] / kMiB, r.init_peak[kParams] / kMiB, r.init_peak[kTotal] / kMiB,
                r.leaked_bytes / kMiB, (long long)r.step_ms);
  for (const Zero3Check& c : m.z3_checks)
    std::printf("# ZeRO-3 / DDP (params + grads + optimizer, current), %s: %.4f, target %.4f +- %.0f %%: %s\n",
                c.precision.c_str(), c.ratio, c.target, kZero3Tolerance * 100, c.met ? "met" : "NOT MET");
}

/// One row of the 16-bit table: `r` against `f` (itself for an fp32 row).
void print_half_row(const MemoryResult& r, const MemoryResult& f) {
  std::printf(" %5s %5d %8.1f %6.3f %8.1f %6.3f %9.1f %6.3f %8.1f %6.3f | %7.2f %8.2f %6.3f %7.2f %6.3f | %8.1f "
              "%6.3f\n",
              r.precision.c_str(), r.zero, r.current[kParams] / kMiB, ratio_of(r.current[kParams], f.current[kParams]),
              r.current[kGrads] / kMiB, ratio_of(r.current[kGrads], f.current[kGrads]), r.current[kOptim] / kMiB,
              ratio_of(r.current[kOptim], f.current[kOptim]), r.state_bytes() / kMiB,
              ratio_of(r.state_bytes(), f.state_bytes()), r.current[kActiv] / kMiB, r.step_peak[kActiv] / kMiB,
              ratio_of(r.step_peak[kActiv], f.step_peak[kActiv]), r.saved_peak_bytes / kMiB,
              ratio_of(r.saved_peak_bytes, f.saved_peak_bytes), r.step_peak[kTotal] / kMiB,
              ratio_of(r.step_peak[kTotal], f.step_peak[kTotal]));
}

void print_half_table(const MemoryReport& m) {
  if (m.half_checks.empty()) return;
  std::printf("#\n# 16-bit against fp32 at the same ZeRO stage: MiB per rank and the ratio to fp32 (x); state =\n"
              "# params + grads + optimizer after the step; activ. = the activations category after the step,\n"
              "# act.peak = its peak during the step (transient buffers and 16-bit ops' f32 staging copies\n"
              "# included); saved = the most forward saved for backward (PipelineStats::peak_saved_bytes)\n");
  std::printf("#%5s %5s %8s %6s %8s %6s %9s %6s %8s %6s | %7s %8s %6s %7s %6s | %8s %6s\n", "prec", "zero", "params",
              "x", "grads", "x", "optimizer", "x", "state", "x", "activ.", "act.peak", "x", "saved", "x", "tot.peak",
              "x");
  for (const MemoryResult& r : m.results) {
    const MemoryResult* f = m.ref_of(r);
    if (!f && r.precision != "fp32") continue;
    print_half_row(r, f ? *f : r);
  }
  for (const HalfCheck& h : m.half_checks)
    std::printf("# %s / fp32, ZeRO %d: parameters %.3f, peak activations %.3f (saved %.3f); target at most 0.5 "
                "+ %.0f %%: %s (saved: %s)\n",
                h.precision.c_str(), h.zero, h.params, h.activations_peak, h.saved_peak, kHalfTolerance * 100,
                h.met ? "met" : "not met", h.saved_met ? "met" : "not met");
}

// ---- JSON Lines ---------------------------------------------------------------

json memory_json(const MemoryReport& m, const MemoryResult& r) {
  json by_rank = json::array();
  for (const auto& v : r.current_by_rank)
    by_rank.push_back({{"params_bytes", v[kParams]}, {"grads_bytes", v[kGrads]}, {"optimizer_bytes", v[kOptim]}});
  json j{{"type", "memory"},
         {"precision", r.precision},
         {"zero_stage", r.zero},
         {"dp", m.shards},
         {"num_parameters", m.num_parameters},
         {"params_bytes", r.current[kParams]},
         {"grads_bytes", r.current[kGrads]},
         {"optimizer_bytes", r.current[kOptim]},
         {"activations_bytes", r.current[kActiv]},
         {"communication_bytes", r.current[kComm]},
         {"state_bytes", r.state_bytes()},
         {"total_bytes", r.current[kTotal]},
         {"ratio_to_ddp", m.ratio_to_ddp(r)},
         {"expected_ratio", expected_ratio(r.zero, m.shards, r.policy)},
         {"step_peak_params_bytes", r.step_peak[kParams]},
         {"step_peak_grads_bytes", r.step_peak[kGrads]},
         {"step_peak_optimizer_bytes", r.step_peak[kOptim]},
         {"step_peak_activations_bytes", r.step_peak[kActiv]},
         {"step_peak_communication_bytes", r.step_peak[kComm]},
         {"step_peak_total_bytes", r.step_peak[kTotal]},
         {"saved_activations_peak_bytes", r.saved_peak_bytes},
         {"init_peak_params_bytes", r.init_peak[kParams]},
         {"init_peak_total_bytes", r.init_peak[kTotal]},
         {"leaked_bytes", r.leaked_bytes},
         {"skipped_steps", r.skipped_steps},
         {"step_ms", r.step_ms},
         {"per_rank", by_rank}};
  if (const MemoryResult* f = m.ref_of(r)) {
    j["params_ratio_to_fp32"] = ratio_of(r.current[kParams], f->current[kParams]);
    j["activations_peak_ratio_to_fp32"] = ratio_of(r.step_peak[kActiv], f->step_peak[kActiv]);
    j["saved_activations_peak_ratio_to_fp32"] = ratio_of(r.saved_peak_bytes, f->saved_peak_bytes);
    j["state_ratio_to_fp32"] = ratio_of(r.state_bytes(), f->state_bytes());
    j["total_peak_ratio_to_fp32"] = ratio_of(r.step_peak[kTotal], f->step_peak[kTotal]);
  }
  return j;
}

/// One summary per precision; zero3_ratio -1 where stage 0 or 3 did not run.
json summary_json(const MemoryReport& m, const std::string& prec) {
  const std::string name = precision::policy_name(precision::parse_policy(prec));
  Zero3Check c{name, -1.0, expected_ratio(3, m.shards, precision::parse_policy(prec)), false};
  for (const Zero3Check& x : m.z3_checks)
    if (x.precision == name) c = x;
  json halves = json::array();
  for (const HalfCheck& h : m.half_checks)
    if (h.precision == name)
      halves.push_back({{"zero_stage", h.zero},
                        {"params_ratio_to_fp32", h.params},
                        {"activations_peak_ratio_to_fp32", h.activations_peak},
                        {"saved_activations_peak_ratio_to_fp32", h.saved_peak},
                        {"half_met", h.met},
                        {"half_met_saved", h.saved_met}});
  return {{"type", "memory_summary"}, {"precision", name},  {"zero3_ratio", c.ratio}, {"target_ratio", c.target},
          {"tolerance", kZero3Tolerance}, {"met", c.met}, {"against_fp32", halves}};
}

}  // namespace

int run_memory(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model) {
  MemoryReport m;
  m.shards = mesh.shape().dp_size();
  const data::TokenSplits splits = splits_for(a, model, m.shards);
  for (const std::string& prec : a.precisions)
    for (int z : a.zero_stages) m.results.push_back(measure_memory(a, mesh, model, splits, prec, z, m.num_parameters));
  check_zero3(m, a.precisions);
  check_halves(m);
  if (mesh.world().rank() == 0 && !a.json) {
    print_state_table(a, model, m);
    print_peak_table(m);
    print_half_table(m);
  }
  if (mesh.world().rank() == 0 && a.json) {
    for (const MemoryResult& r : m.results) print_json_line(memory_json(m, r));
    for (const std::string& prec : a.precisions) print_json_line(summary_json(m, prec));
  }
  for (const Zero3Check& c : m.z3_checks)
    if (!c.met) return 1;
  return 0;
}

}  // namespace ht::bench
