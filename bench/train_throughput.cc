// train_throughput: end-to-end training speed of ht::train::Engine (forward,
// backward, global-norm clipping and AdamW per step) on random tokens, for the
// gpt_train default model and a GPT-2 124M-class model (and the llama_train
// default and a Llama of that class), in f32 or mixed
// precision (--precision fp32,fp16,bf16: each config runs in each, one after
// the other), with MFU measured against this machine's own GEMM peak: on the
// CPU the f32 sgemm peak in every precision; on a GPU the peak of each
// precision's compute dtype (f32, or the bf16/f16 tensor-core GEMM).
//
// Output (a contract; docs/benchmarks.md):
//   "# " preamble lines: build, threads, GEMM backend, device, OpenBLAS build
//   and the kernels it chose, peak GFLOP/s;
//   one line per config and precision:
//   train small | L6 H6 C384 V256 T256 | cpu | fp32 | batch 8 x 128 | 10 steps | 512.3 ms/step | 2.00k tok/s
//     | 136.0 GFLOP/s | MFU 45.1%
//   (one line, wrapped here; with --host-allocator it ends in
//   "| host caching | 0.0 sys allocs/step | 12 faults/step"); with more than one precision,
//   fp32 among them, a "# <config> ms/step over fp32:" line per config and
//   run; with --host-allocator system,caching, a
//   "# <config> <precision> host allocator:" line per config and precision
//   comparing the medians of the runs of each (see --repeats);
//   and with --json, after them, JSON Lines: one {"type": "run", ...} object,
//   then one {"type": "train_throughput", ...} object per config and
//   precision, which also holds every step's wall and process CPU time (all
//   threads), in ms.
// Progress of each step goes to stderr.
//
// --recompute none,selective,full measures activation recomputation
// (nn::Recompute): each config and precision runs under each mode in turn,
// each line then ends in "| recompute <mode> | act peak <MiB> MiB" (the
// highest activation bytes live during a timed step, ht::memory_stats), and
// a "# <config> <precision> recompute:" line gives each mode's wall and
// process CPU ms/step and activation peak over none's (medians over
// --repeats).
//
// --host-allocator system,caching --repeats 3 measures the host caching
// allocator (include/ht/core/allocator.h) against the C library's: each
// config runs with each allocator in turn, the pair repeated, so that both
// see the same load on a shared machine.
#include <CLI/CLI.hpp>
#include <cblas.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <map>
#include <memory>
#include <variant>
#include <vector>

#include "bench_common.h"
#include "ht/core/allocator.h"
#include "ht/core/memory.h"
#include "ht/core/error.h"
#include "ht/core/rng.h"
#include "ht/core/version.h"
#include "ht/models/gpt.h"
#include "ht/models/llama.h"
#include "ht/ops/cast.h"
#include "ht/ops/matmul.h"
#include "ht/precision/policy.h"
#include "ht/train/mfu.h"

using namespace ht;
using bench::median;

namespace {

struct Args {
  std::string config = "small";
  std::vector<std::string> precisions{"fp32"};
  std::int64_t steps = 0;   // 0: the config's default
  std::int64_t warmup = -1;  // -1: the config's default
  std::int64_t batch = 0;
  std::int64_t seq = 0;
  std::string device = "cpu";
  std::string gemm = "openblas";
  int threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS, else the core count)
  std::int64_t peak_size = 2048;
  int peak_runs = 5;
  bool json = false;
  std::vector<std::string> host_allocators;  // empty: keep the allocator HT_HOST_ALLOCATOR chose
  int repeats = 1;
  std::vector<std::string> recomputes{"none"};  // activation recomputation modes, each run in turn
};

/// A GPT or a Llama: what a config trains.
struct ModelSpec {
  std::variant<models::GPTConfig, models::LlamaConfig> config;
  std::string str() const {
    return std::visit([](const auto& c) { return c.str(); }, config);
  }
  std::int64_t vocab_size() const {
    return std::visit([](const auto& c) { return c.vocab_size; }, config);
  }
  std::int64_t context() const {
    return std::visit([](const auto& c) { return c.context; }, config);
  }
  double flops_per_token(std::int64_t seq) const {
    return std::visit([seq](const auto& c) { return c.flops_per_token(seq); }, config);
  }
};

struct Spec {
  std::string name;
  ModelSpec model;
  std::int64_t batch, seq, warmup, steps;
};

// The gpt_train default, and GPT-2 small (124M) at a batch that fits a 2-core
// machine's patience: 512 tokens a step; the llama_train default (9.6M
// parameters), and a Llama of GPT-2 small's width and depth (grouped-query
// attention with 4 key/value heads, a 2048-wide SwiGLU, untied head: 153M
// parameters, 77M of them the embedding and head) at the same batches.
Spec spec_of(const std::string& name) {
  if (name == "small") return {"small", {models::GPTConfig{}}, 8, 128, 3, 10};
  if (name == "124m") return {"124m", {models::GPTConfig{50257, 1024, 12, 12, 768}}, 2, 256, 2, 5};
  if (name == "llama-small") return {"llama-small", {models::LlamaConfig{}}, 8, 128, 3, 10};
  if (name == "llama-124m")
    return {"llama-124m",
            {models::LlamaConfig{.vocab_size = 50257,
                                 .context = 1024,
                                 .n_layer = 12,
                                 .n_head = 12,
                                 .n_kv_head = 4,
                                 .n_embd = 768,
                                 .ffn_hidden = 2048}},
            2, 256, 2, 5};
  throw Error(ErrorKind::kConfig,
              fmt::format("unknown --config '{}': choose small, 124m, both, llama-small, llama-124m, llama or all", name));
}

/// The configs a --config names: one, or a group.
std::vector<std::string> config_names(const std::string& config) {
  if (config == "both") return {"small", "124m"};
  if (config == "llama") return {"llama-small", "llama-124m"};
  if (config == "all") return {"small", "124m", "llama-small", "llama-124m"};
  return {config};
}

/// OpenBLAS 0.3.21 does not know recent Xeons (family 6, model 207 here) and
/// falls back to its Prescott (SSE3) kernels, about 5x slower than its
/// SkylakeX ones on the same CPU; it reads OPENBLAS_CORETYPE when it loads.
std::string openblas_warning() {
  const std::string core = openblas_get_corename();
  if (core != "Prescott" && core != "prescott") return {};
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f"))
    return "OpenBLAS runs its generic Prescott kernels on this AVX-512 CPU; "
           "OPENBLAS_CORETYPE=SkylakeX may be ~5x faster";
  if (__builtin_cpu_supports("avx2"))
    return "OpenBLAS runs its generic Prescott kernels on this AVX2 CPU; OPENBLAS_CORETYPE=Haswell is faster";
#endif
  return {};
}

/// Minor page faults of this process so far (all threads).
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

void synchronize(Device device, const Tensor& t) {
  if (device.is_cuda()) (void)t.item(0);  // a one-element copy to the host waits for the queue
}

/// The GEMM peak (GFLOP/s) each precision's MFU divides by, by precision name.
using Peaks = std::map<std::string, double>;

struct Result {
  Spec spec;
  std::string precision;
  std::int64_t num_parameters = 0;
  std::vector<double> step_ms;
  std::vector<double> step_cpu_ms;  // CPU time of the whole process (all threads)
  float loss_first = 0.f, loss_last = 0.f;
  std::int64_t skipped_steps = 0;  // f16 overflows among the timed steps (no optimizer step: shorter)
  std::vector<double> step_system_allocations;  // host blocks the system gave during each step
  std::string host_allocator;  // the host allocator this run used
  int repeat = 0;              // which pass of --repeats
  std::vector<double> step_minor_faults;  // page faults (no I/O) of the process during each step
  std::string recompute = "none";          // the activation recomputation mode
  std::int64_t activation_peak_bytes = 0;  // the highest activation bytes live during a timed step

  std::int64_t tokens_per_step() const { return spec.batch * spec.seq; }
  double ms_per_step() const { return median(step_ms); }
  double cpu_ms_per_step() const { return median(step_cpu_ms); }
  double system_allocations_per_step() const { return median(step_system_allocations); }
  double minor_faults_per_step() const { return median(step_minor_faults); }
  double tokens_per_s() const { return double(tokens_per_step()) * 1000.0 / ms_per_step(); }
  double flops_per_token() const { return spec.model.flops_per_token(spec.seq); }
  double achieved_gflops() const { return flops_per_token() * tokens_per_s() * 1e-9; }
};

Result run_config(const Spec& spec, const std::string& prec, nn::Recompute recompute, Device device, int repeat) {
  train::EngineOptions o;
  o.precision = precision::parse_policy(prec);
  o.recompute = recompute;
  o.device = device;
  o.layout.micro_batch = spec.batch;
  o.steps = spec.warmup + spec.steps;
  o.warmup_steps = 1;
  // Random tokens: speed does not depend on the data, and no dataset is needed.
  const std::int64_t n_train = std::max<std::int64_t>(spec.batch * (spec.seq + 1) * 64, 1 << 16);
  const data::TokenSplits splits = bench::random_tokens(spec.model.vocab_size(), n_train, 2 * (spec.seq + 1), 2024);

  const std::unique_ptr<bench::LmEngine> built = std::visit(
      [&](const auto& model) { return std::make_unique<bench::LmEngine>(o, model, splits, spec.seq); },
      spec.model.config);
  bench::LmEngine& engine = *built;
  Result r{spec, precision::policy_name(o.precision), engine->model().num_parameters(), {}, {},
           0.f, 0.f, 0, {}, std::string(host_allocator_name(host_allocator())), repeat, {},
           nn::recompute_name(recompute)};
  const Tensor& probe = engine->model().parameters().front()->data();
  for (std::int64_t i = 0; i < spec.warmup + spec.steps; ++i) {
    const std::int64_t allocs0 = allocator_stats(DeviceType::kCPU).system_allocations;
    const long faults0 = minor_faults();
    const std::clock_t c0 = std::clock();
    reset_memory_peaks();
    const auto t0 = std::chrono::steady_clock::now();
    const train::StepStats s = engine->step();
    synchronize(device, probe);
    const std::int64_t activation_peak = memory_stats(device.type, MemCategory::kActivations).peak_bytes;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_ms = 1000.0 * double(std::clock() - c0) / CLOCKS_PER_SEC;
    const std::int64_t allocs = allocator_stats(DeviceType::kCPU).system_allocations - allocs0;
    const long faults = minor_faults() - faults0;
    const bool timed = i >= spec.warmup;
    if (timed) {
      r.step_ms.push_back(ms);
      r.step_cpu_ms.push_back(cpu_ms);
      r.step_system_allocations.push_back(double(allocs));
      r.step_minor_faults.push_back(double(faults));
      r.activation_peak_bytes = std::max(r.activation_peak_bytes, activation_peak);
      if (r.step_ms.size() == 1) r.loss_first = s.loss;
      r.loss_last = s.loss;
      if (s.skipped) ++r.skipped_steps;
    }
    std::fprintf(stderr, "# %s %s%s %s %lld/%lld: %.1f ms, loss %.4f%s\n", spec.name.c_str(), r.precision.c_str(),
                 recompute == nn::Recompute::kNone ? "" : (" recompute " + r.recompute).c_str(), timed ? "step" : "warm-up", (long long)(timed ? i - spec.warmup + 1 : i + 1),
                 (long long)(timed ? spec.steps : spec.warmup), ms, s.loss,
                 s.skipped ? " (skipped: f16 overflow, no optimizer step)" : "");
  }
  return r;
}

/// The fp32 result of config `name` with the same host allocator, recomputation and repeat as `like`, or null.
const Result* fp32_of(const std::vector<Result>& results, const Result& like) {
  for (const Result& r : results)
    if (r.spec.name == like.spec.name && r.precision == "fp32" && r.host_allocator == like.host_allocator &&
        r.recompute == like.recompute && r.repeat == like.repeat)
      return &r;
  return nullptr;
}

/// The run without recomputation of the same config, precision, host allocator and repeat as `like`, or null.
const Result* no_recompute_of(const std::vector<Result>& results, const Result& like) {
  for (const Result& r : results)
    if (r.spec.name == like.spec.name && r.precision == like.precision && r.host_allocator == like.host_allocator &&
        r.recompute == "none" && r.repeat == like.repeat)
      return &r;
  return nullptr;
}

double mib(std::int64_t bytes) { return double(bytes) / double(1 << 20); }

std::string human(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.2f}k", v / 1e3);
  return fmt::format("{:.1f}", v);
}

/// The configs asked for, with the command line's overrides.
std::vector<Spec> specs_of(const Args& a) {
  std::vector<Spec> specs;
  for (const std::string& name : config_names(a.config)) {
    Spec s = spec_of(name);
    if (a.batch > 0) s.batch = a.batch;
    if (a.seq > 0) s.seq = a.seq;
    if (a.steps > 0) s.steps = a.steps;
    if (a.warmup >= 0) s.warmup = a.warmup;
    HT_CHECK(s.seq <= s.model.context(), ErrorKind::kConfig, "--seq {} exceeds the {} config's context {}", s.seq,
             s.name, s.model.context());
    specs.push_back(s);
  }
  return specs;
}

/// The "# " preamble, with the peaks it measures between its lines; returns them.
Peaks print_preamble(const Args& a, Device device) {
  std::printf("# %s\n", ht::build_description().c_str());
  std::printf("# threads %d (OMP_NUM_THREADS=%s), gemm %s, device %s, precision %s\n", omp_get_max_threads(),
              bench::env_or("OMP_NUM_THREADS", "unset").c_str(), a.gemm.c_str(), device.str().c_str(),
              bench::join(a.precisions).c_str());
  std::printf("# %s, core %s (OPENBLAS_CORETYPE=%s)\n", openblas_get_config(), openblas_get_corename(),
              bench::env_or("OPENBLAS_CORETYPE", "unset").c_str());
  std::printf("# host allocator %s (HT_HOST_ALLOCATOR=%s, --host-allocator %s), cache limit %zu bytes\n",
              std::string(host_allocator_name(host_allocator())).c_str(),
              bench::env_or("HT_HOST_ALLOCATOR", "unset").c_str(),
              a.host_allocators.empty() ? "unset" : bench::join(a.host_allocators).c_str(), host_cache_limit_bytes());
  const std::string warning = openblas_warning();
  if (!warning.empty()) std::printf("# warning: %s\n", warning.c_str());
  std::fflush(stdout);
  // On the CPU every precision's GEMMs run in f32 (16-bit operands are
  // widened), so the f32 peak is the bound; a GPU's tensor cores run 16-bit
  // GEMMs several times faster, so each compute dtype gets its own peak.
  Peaks peaks;
  const double f32_peak = train::measure_gemm_peak_gflops(device, DType::kF32, a.peak_size, a.peak_runs);
  peaks["fp32"] = f32_peak;  // always measured: the JSON's peak_gflops
  std::printf("# peak %.1f GFLOP/s (f32 GEMM %lld^3 through ht::ops::matmul, best of %d)\n", f32_peak,
              (long long)a.peak_size, a.peak_runs);
  for (const std::string& prec : a.precisions) {
    const precision::Policy policy = precision::parse_policy(prec);
    const std::string name = precision::policy_name(policy);
    const DType dtype = train::peak_dtype(device, policy.compute);  // fit's choice: f32 on the CPU
    if (dtype == DType::kF32) {
      peaks[name] = f32_peak;
      continue;
    }
    peaks[name] = train::measure_gemm_peak_gflops(device, dtype, a.peak_size, a.peak_runs);
    std::printf("# peak %s %.1f GFLOP/s (%s GEMM %lld^3, f32 accumulation, best of %d)\n", name.c_str(),
                peaks[name], std::string(dtype_name(policy.compute)).c_str(), (long long)a.peak_size, a.peak_runs);
  }
  std::printf("# MFU = flops_per_token(seq) * tok/s / peak (%s); ms/step and tok/s\n"
              "# from the median timed step\n",
              device.is_cuda() ? "the peak of each precision's compute dtype" : "the f32 peak in every precision");
  std::fflush(stdout);
  return peaks;
}

/// With several recomputation modes: per precision, each mode's median
/// wall and CPU ms/step over the repeats (and host allocators) and its
/// activation peak, against none's (CPU time is the steadier figure on a
/// shared machine).
void print_recompute_comparison(const Args& a, const Spec& s, const std::vector<Result>& results,
                                std::size_t first) {
  if (a.recomputes.size() < 2) return;
  for (const std::string& prec : a.precisions) {
    const std::string precision = precision::policy_name(precision::parse_policy(prec));
    // Median wall and process CPU ms/step, and the activation peak, of one mode's runs.
    struct Figures {
      double ms = 0, cpu_ms = 0;
      std::int64_t peak = 0;
    };
    const auto figures = [&](const std::string& mode) {
      std::vector<double> ms, cpu_ms;
      Figures f;
      for (std::size_t i = first; i < results.size(); ++i)
        if (results[i].precision == precision && results[i].recompute == mode) {
          ms.push_back(results[i].ms_per_step());
          cpu_ms.push_back(results[i].cpu_ms_per_step());
          f.peak = std::max(f.peak, results[i].activation_peak_bytes);
        }
      if (!ms.empty()) f.ms = median(ms), f.cpu_ms = median(cpu_ms);
      return f;
    };
    const Figures none = figures("none");
    std::string line;
    for (const std::string& mode : a.recomputes) {
      const Figures f = figures(mode);
      line += fmt::format("{}{} {:.1f} ms/step, cpu {:.1f} ms/step, act peak {:.2f} MiB", line.empty() ? "" : "; ",
                          mode, f.ms, f.cpu_ms, mib(f.peak));
      if (mode != "none" && none.ms > 0)
        line += fmt::format(" ({:.2f}x time, {:.2f}x cpu, {:.2f}x act peak)", f.ms / none.ms, f.cpu_ms / none.cpu_ms,
                            double(f.peak) / double(std::max<std::int64_t>(none.peak, 1)));
    }
    std::printf("# %s %s recompute (median of %d runs each): %s\n", s.name.c_str(), precision.c_str(),
                int(a.repeats * std::max<std::size_t>(a.host_allocators.size(), 1)), line.c_str());
  }
  std::fflush(stdout);
}

/// Runs `s` in each precision (and each recomputation mode), printing a line
/// for each (and the ratios to fp32 when it ran with others, to none when
/// recomputation modes were compared); appends the results.
void run_spec(const Args& a, const Spec& s, Device device, const Peaks& peaks, int repeat,
              std::vector<Result>& results) {
  const std::size_t first = results.size();
  const bool show_recompute = a.recomputes.size() > 1 || a.recomputes.front() != "none";
  for (const std::string& prec : a.precisions)
    for (const std::string& mode : a.recomputes) {
      const Result r = run_config(s, prec, nn::parse_recompute(mode), device, repeat);
      const std::string host = a.host_allocators.empty() ? std::string()
                                                          : fmt::format(" | host {} | {:.1f} sys allocs/step | {:.0f} faults/step", r.host_allocator,
                                                                        r.system_allocations_per_step(),
                                                                        r.minor_faults_per_step());
      const std::string recompute =
          show_recompute ? fmt::format(" | recompute {} | act peak {:.2f} MiB", r.recompute, mib(r.activation_peak_bytes))
                         : std::string();
      std::printf("train %s | %s | %s | %s | batch %lld x %lld | %lld steps | %.1f ms/step | %s tok/s | "
                  "%.1f GFLOP/s | MFU %.1f%%%s%s\n",
                  s.name.c_str(), s.model.str().c_str(), device.str().c_str(), r.precision.c_str(), (long long)s.batch,
                  (long long)s.seq, (long long)s.steps, r.ms_per_step(), human(r.tokens_per_s()).c_str(),
                  r.achieved_gflops(), 100.0 * r.achieved_gflops() / peaks.at(r.precision), host.c_str(),
                  recompute.c_str());
      std::fflush(stdout);
      results.push_back(r);
    }
  // Each 16-bit precision against fp32 on the same config, run just before or after.
  const Result* f32 = fp32_of(results, results[first]);
  if (f32 && a.precisions.size() > 1) {
    std::string line;
    for (std::size_t i = first; i < results.size(); ++i)
      if (results[i].precision != "fp32" && results[i].recompute == f32->recompute)
        line += fmt::format("{}{} {:.2f}", line.empty() ? "" : ", ", results[i].precision,
                            results[i].ms_per_step() / f32->ms_per_step());
    std::printf("# %s ms/step over fp32: %s\n", s.name.c_str(), line.c_str());
    std::fflush(stdout);
  }
}

/// With both host allocators measured: per precision, the median over the
/// repeats of each allocator's ms/step, and caching over system.
void print_allocator_comparison(const Args& a, const Spec& s, const std::vector<Result>& results, std::size_t first) {
  if (a.host_allocators.size() < 2) return;
  for (const std::string& prec : a.precisions) {
    std::string line;
    double system_ms = 0.0, caching_ms = 0.0;
    for (const std::string& host : a.host_allocators) {
      std::vector<double> runs;
      for (std::size_t i = first; i < results.size(); ++i)
        if (results[i].precision == precision::policy_name(precision::parse_policy(prec)) &&
            results[i].host_allocator == host)
          runs.push_back(results[i].ms_per_step());
      const double ms = median(runs);
      (host == "system" ? system_ms : caching_ms) = ms;
      line += fmt::format("{}{} {:.1f} ms/step", line.empty() ? "" : ", ", host, ms);
    }
    std::printf("# %s %s host allocator (median of %d runs each): %s; caching/system %.3f\n", s.name.c_str(),
                prec.c_str(), a.repeats, line.c_str(), system_ms > 0 ? caching_ms / system_ms : 0.0);
  }
  std::fflush(stdout);
}

nlohmann::json run_json(const Args& a, Device device, const Peaks& peaks) {
  nlohmann::json run = bench::build_json();
  run.update({{"type", "run"},
              {"threads", omp_get_max_threads()},
              {"omp_num_threads_env", bench::env_or("OMP_NUM_THREADS", "")},
              {"gemm", a.gemm},
              {"openblas", openblas_get_config()},
              {"openblas_core", openblas_get_corename()},
              {"openblas_coretype_env", bench::env_or("OPENBLAS_CORETYPE", "")},
              {"device", device.str()},
              {"precisions", a.precisions},
              {"host_allocators", a.host_allocators},
              {"recomputes", a.recomputes},
              {"repeats", a.repeats},
              {"host_allocator_env", bench::env_or("HT_HOST_ALLOCATOR", "")},
              {"host_cache_limit_bytes", host_cache_limit_bytes()},
              {"peak_gflops", peaks.at("fp32")},
              {"peak_gflops_by_precision", peaks},
              {"peak_gemm_size", a.peak_size}});
  return run;
}

nlohmann::json result_json(const Result& r, const std::vector<Result>& results, Device device, double peak) {
  double sum_ms = 0.0;
  for (double ms : r.step_ms) sum_ms += ms;
  nlohmann::json j{{"type", "train_throughput"},
                   {"config", r.spec.name},
                   {"precision", r.precision},
                   {"model", r.spec.model.str()},
                   {"num_parameters", r.num_parameters},
                   {"device", device.str()},
                   {"threads", omp_get_max_threads()},
                   {"batch", r.spec.batch},
                   {"seq_len", r.spec.seq},
                   {"warmup_steps", r.spec.warmup},
                   {"steps", r.spec.steps},
                   {"tokens_per_step", r.tokens_per_step()},
                   {"ms_per_step", r.ms_per_step()},
                   {"ms_per_step_min", *std::min_element(r.step_ms.begin(), r.step_ms.end())},
                   {"ms_per_step_mean", sum_ms / double(r.step_ms.size())},
                   {"step_ms", r.step_ms},
                   {"cpu_ms_per_step", r.cpu_ms_per_step()},
                   {"step_cpu_ms", r.step_cpu_ms},
                   {"tokens_per_s", r.tokens_per_s()},
                   {"flops_per_token", r.flops_per_token()},
                   {"achieved_gflops", r.achieved_gflops()},
                   {"peak_gflops", peak},
                   {"mfu_pct", 100.0 * r.achieved_gflops() / peak},
                   {"loss_first", r.loss_first},
                   {"loss_last", r.loss_last},
                   {"skipped_steps", r.skipped_steps},
                   {"host_allocator", r.host_allocator},
                   {"repeat", r.repeat},
                   {"system_allocations_per_step", r.system_allocations_per_step()},
                   {"step_system_allocations", r.step_system_allocations},
                   {"minor_faults_per_step", r.minor_faults_per_step()},
                   {"step_minor_faults", r.step_minor_faults},
                   {"recompute", r.recompute},
                   {"activation_peak_bytes", r.activation_peak_bytes}};
  if (const Result* f32 = fp32_of(results, r))
    j["ms_per_step_ratio_to_fp32"] = r.ms_per_step() / f32->ms_per_step();
  if (const Result* none = no_recompute_of(results, r); none && none != &r) {
    j["ms_per_step_ratio_to_none"] = r.ms_per_step() / none->ms_per_step();
    j["activation_peak_ratio_to_none"] =
        double(r.activation_peak_bytes) / double(std::max<std::int64_t>(none->activation_peak_bytes, 1));
  }
  return j;
}

int run(const Args& a) {
  const Device device = parse_device(a.device);
  HT_CHECK(!a.precisions.empty(), ErrorKind::kConfig, "--precision needs at least one of fp32, fp16, bf16");
  for (const std::string& p : a.precisions) (void)precision::parse_policy(p);
  HT_CHECK(!a.recomputes.empty(), ErrorKind::kConfig, "--recompute needs at least one of none, selective, full");
  for (const std::string& m : a.recomputes) (void)nn::parse_recompute(m);
  HT_CHECK(a.gemm == "openblas" || a.gemm == "eigen", ErrorKind::kConfig,
           "unknown --gemm '{}': choose openblas or eigen", a.gemm);
  ops::set_cpu_gemm_backend(a.gemm == "eigen" ? ops::CpuGemmBackend::kEigen : ops::CpuGemmBackend::kOpenBlas);
  if (a.threads > 0) omp_set_num_threads(a.threads);
  const std::vector<Spec> specs = specs_of(a);
  const Peaks peaks = print_preamble(a, device);
  std::vector<Result> results;
  for (const Spec& s : specs) {
    const std::size_t first = results.size();
    for (int rep = 0; rep < a.repeats; ++rep) {
      if (a.host_allocators.empty()) {
        run_spec(a, s, device, peaks, rep, results);
        continue;
      }
      for (const std::string& host : a.host_allocators) {
        set_host_allocator(parse_host_allocator(host));
        empty_cache(DeviceType::kCPU);  // each run starts from the same empty cache
        run_spec(a, s, device, peaks, rep, results);
      }
    }
    print_allocator_comparison(a, s, results, first);
    print_recompute_comparison(a, s, results, first);
  }
  if (a.json) {
    bench::print_json_line(run_json(a, device, peaks));
    for (const Result& r : results)
      bench::print_json_line(result_json(r, results, device, peaks.at(r.precision)));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Training throughput (tokens/s, ms/step, MFU) of hypertrain's GPT on random tokens."};
  app.option_defaults()->always_capture_default();
  app.add_option("--config", a.config,
                 "model: small (GPT L6 H6 C384 V256, batch 8 x 128), 124m (GPT-2 small, batch 2 x 256), both; "
                 "llama-small (Llama L6 H6 KV2 C384 F1024 V256), llama-124m (L12 H12 KV4 C768 F2048 V50257), llama "
                 "(both Llamas); all")
      ->check(CLI::IsMember({"small", "124m", "both", "llama-small", "llama-124m", "llama", "all"}));
  app.add_option("--precision", a.precisions,
                 "fp32, fp16 or bf16 (compute dtype; f32 master weights and optimizer); a comma list runs each "
                 "config in each, in order")
      ->delimiter(',');
  app.add_option("--steps", a.steps, "timed steps (0: 10 for small, 5 for 124m)")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", a.warmup, "untimed steps first (-1: 3 for small, 2 for 124m)");
  app.add_option("--batch", a.batch, "sequences per step (0: the config's)")->check(CLI::NonNegativeNumber);
  app.add_option("--seq", a.seq, "tokens per sequence (0: the config's)")->check(CLI::NonNegativeNumber);
  app.add_option("--device", a.device, "cpu, cuda or cuda:N");
  app.add_option("--gemm", a.gemm, "host GEMM library: openblas or eigen");
  app.add_option("--threads", a.threads, "OpenMP threads (0: OMP_NUM_THREADS or the core count)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--peak-size", a.peak_size, "side of the square sgemm that measures the peak")
      ->check(CLI::PositiveNumber);
  app.add_option("--peak-runs", a.peak_runs, "sgemm runs for the peak (the best counts)")->check(CLI::PositiveNumber);
  app.add_option("--host-allocator", a.host_allocators,
                 "host allocator(s), system or caching (default: HT_HOST_ALLOCATOR, else caching); a comma list runs "
                 "each config with each, in turn, --repeats times")
      ->delimiter(',')
      ->check(CLI::IsMember({"system", "caching"}));
  app.add_option("--repeats", a.repeats, "passes over the configs (and host allocators), alternating")
      ->check(CLI::PositiveNumber);
  app.add_option("--recompute", a.recomputes,
                 "activation recomputation: none, selective or full; a comma list runs each config and precision "
                 "under each, in order, and compares them with none (ms/step, activation peak)")
      ->delimiter(',');
  app.add_flag("--json", a.json, "also print JSON Lines (a run object, then one object per config)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_throughput: %s\n", e.what());
    return 2;
  }
}
