// ops_bench: kernel micro-benchmarks on Google Benchmark — matmul (OpenBLAS
// and Eigen side by side, at the shapes the GPT configs use), attention (and
// flash attention against the materialised-softmax algorithm it replaced,
// bench/attention_materialised_reference.h, forward + backward and the bytes
// saved for backward, at GPT-2 small's heads),
// LayerNorm, GELU, cross-entropy, the fused AdamW update and the gradient
// norm's sum of squares; matmul, LayerNorm and GELU also in f16 and bf16
// (f32 arithmetic; the op name gets the dtype, e.g. matmul_bf16). CUDA
// variants with the same parameters are registered when a device is present.
//
// Counters are rates over wall time: "GFLOP/s" (10^9 FLOP per second) for
// compute-bound ops, "GB/s" (10^9 bytes per second, bytes touched counted
// once: inputs read plus outputs written) for memory-bound ones.
// CUDA variants launch kCudaRepeat ops per iteration between two host
// synchronisations (a one-element copy to the host) and report the manual
// time divided by kCudaRepeat, so the synchronisation costs little.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "attention_materialised_reference.h"
#include "ht/core/memory.h"
#include "ht/core/version.h"
#include "ht/core/device.h"
#include "ht/core/rng.h"
#include "ht/core/tensor.h"
#include "ht/models/gpt.h"
#include "ht/ops/attention.h"
#include "ht/ops/cast.h"
#include "ht/ops/cross_entropy.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/layernorm.h"
#include "ht/ops/matmul.h"
#include "ht/ops/optimizer_update.h"

namespace {

using ht::Device;
using ht::DType;
using ht::Shape;
using ht::Tensor;

constexpr int kCudaRepeat = 20;

Tensor random_tensor(const Shape& shape, Device device, float scale = 1.f, std::uint64_t seed = 1,
                     DType dtype = DType::kF32) {
  Tensor host = Tensor::empty(shape, DType::kF32);
  float* p = host.data<float>();
  ht::Rng rng(seed);
  for (std::int64_t i = 0; i < host.numel(); ++i) p[i] = scale * (2.f * rng.uniform() - 1.f);
  if (dtype != DType::kF32) {
    Tensor rounded = Tensor::empty(shape, dtype);
    ht::ops::cast(host, rounded);
    host = rounded;
  }
  return device.is_cpu() ? host : host.to(device);
}

/// Bytes per element of the benchmarked dtype, for the GB/s counters.
double elem_bytes(DType dtype) { return double(ht::dtype_size(dtype)); }

/// Runs `op` once per benchmark iteration on the host; on a CUDA device,
/// kCudaRepeat times between synchronisations, with manual timing.
void run_timed(benchmark::State& state, Device device, const Tensor& sync_on, const std::function<void()>& op) {
  if (device.is_cpu()) {
    for (auto _ : state) op();
    return;
  }
  op();
  benchmark::DoNotOptimize(sync_on.item(0));  // warm-up, and an empty queue before timing
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < kCudaRepeat; ++r) op();
    benchmark::DoNotOptimize(sync_on.item(0));
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(elapsed.count() / kCudaRepeat);
  }
}

void set_rate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] = benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- matmul ---------------------------------------------------------------

struct GemmShape {
  const char* what;  // where the GPT uses it
  std::int64_t m, n, k;
  bool ta, tb;
};

void bm_matmul(benchmark::State& state, Device device, ht::ops::CpuGemmBackend backend, GemmShape s, DType dt) {
  const Tensor a = random_tensor(s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, device, 1.f, 1, dt);
  const Tensor b = random_tensor(s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, device, 1.f, 2, dt);
  Tensor c = Tensor::empty({s.m, s.n}, dt, device);
  const ht::ops::CpuGemmBackend saved = ht::ops::cpu_gemm_backend();
  ht::ops::set_cpu_gemm_backend(backend);
  run_timed(state, device, c, [&] { ht::ops::matmul(a, b, c, {.trans_a = s.ta, .trans_b = s.tb}); });
  ht::ops::set_cpu_gemm_backend(saved);
  set_rate(state, "GFLOP/s", 2.0 * double(s.m) * double(s.n) * double(s.k) * 1e-9);
}

// ---- attention ------------------------------------------------------------

struct AttnShape {
  std::int64_t b, t, c;
  int h;
};

// Matmul FLOPs as counted for MFU (the masked upper triangle included):
// forward Q K^T and P V, 2 * 2 B T^2 C; backward four products, twice that.
double attention_flops(const AttnShape& s, bool backward) {
  const double fwd = 4.0 * double(s.b) * double(s.t) * double(s.t) * double(s.c);
  return backward ? 2.0 * fwd : fwd;
}

void bm_attention_forward(benchmark::State& state, Device device, AttnShape s) {
  const Tensor qkv = random_tensor({s.b, s.t, 3 * s.c}, device);
  Tensor out = Tensor::empty({s.b, s.t, s.c}, DType::kF32, device);
  Tensor lse = Tensor::empty({s.b, s.h, s.t}, DType::kF32, device);
  run_timed(state, device, out, [&] { ht::ops::attention_forward(qkv, s.h, out, lse); });
  set_rate(state, "GFLOP/s", attention_flops(s, false) * 1e-9);
}

void bm_attention_backward(benchmark::State& state, Device device, AttnShape s) {
  const Tensor qkv = random_tensor({s.b, s.t, 3 * s.c}, device);
  Tensor out = Tensor::empty({s.b, s.t, s.c}, DType::kF32, device);
  Tensor lse = Tensor::empty({s.b, s.h, s.t}, DType::kF32, device);
  ht::ops::attention_forward(qkv, s.h, out, lse);
  const Tensor dout = random_tensor({s.b, s.t, s.c}, device, 1.f, 3);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::kF32, device);
  run_timed(state, device, dqkv, [&] { ht::ops::attention_backward(dout, qkv, out, lse, s.h, dqkv); });
  set_rate(state, "GFLOP/s", attention_flops(s, true) * 1e-9);
}

// Flash attention and the materialised-softmax reference it replaced, one
// training step's worth each (forward, then backward from what the forward
// saved), host f32. The tensor the forward hands to backward is allocated in
// every iteration, as the attention layer allocates it every step, and the
// counter saved_bytes is what the library's byte accounting saw it take
// (activations, current bytes after the forward minus before): lse (B, H, T)
// against probs (B, H, T, T). out is saved by both (it is the next layer's
// input anyway) and not counted.
enum class AttnImpl { kFlash, kMaterialisedReference };

void bm_attention_step(benchmark::State& state, Device device, AttnImpl impl, AttnShape s) {
  const Tensor qkv = random_tensor({s.b, s.t, 3 * s.c}, device);
  const Tensor dout = random_tensor({s.b, s.t, s.c}, device, 1.f, 3);
  Tensor out = Tensor::empty({s.b, s.t, s.c}, DType::kF32, device);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::kF32, device);
  const auto activation_bytes = [&] {
    return ht::memory_stats(device.type, ht::MemCategory::kActivations).current_bytes;
  };
  std::int64_t saved_bytes = 0;
  run_timed(state, device, dqkv, [&] {
    const std::int64_t before = activation_bytes();
    if (impl == AttnImpl::kFlash) {
      Tensor lse = Tensor::empty({s.b, s.h, s.t}, DType::kF32, device);
      ht::ops::attention_forward(qkv, s.h, out, lse);
      saved_bytes = activation_bytes() - before;
      ht::ops::attention_backward(dout, qkv, out, lse, s.h, dqkv);
    } else {
      Tensor probs = Tensor::empty({s.b, s.h, s.t, s.t}, DType::kF32, device);
      ht::bench::materialised_attention_forward(qkv, s.h, out, probs);
      saved_bytes = activation_bytes() - before;
      ht::bench::materialised_attention_backward(dout, qkv, probs, s.h, dqkv);
    }
  });
  state.counters["saved_bytes"] = double(saved_bytes);
  set_rate(state, "GFLOP/s", attention_flops(s, false) * 3.0 * 1e-9);
}

// Document masking (segment ids): one step's attention, forward then
// backward, over windows cut into documents of `doc` tokens (doc = T: one
// document, which runs as without ids). Tiles between documents are
// skipped, so short documents cost less; the rate counts the causal
// window's dense FLOPs, as the other rows, so it reads as a speed-up.
void bm_attention_documents(benchmark::State& state, Device device, AttnShape s, std::int64_t doc) {
  const Tensor qkv = random_tensor({s.b, s.t, 3 * s.c}, device);
  const Tensor dout = random_tensor({s.b, s.t, s.c}, device, 1.f, 3);
  std::vector<std::int32_t> ids(std::size_t(s.b * s.t));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t(std::int64_t(i) % s.t / doc);
  const Tensor segments = Tensor::from_vector(ids, {s.b, s.t}).to(device);
  Tensor out = Tensor::empty({s.b, s.t, s.c}, DType::kF32, device);
  Tensor lse = Tensor::empty({s.b, s.h, s.t}, DType::kF32, device);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::kF32, device);
  run_timed(state, device, dqkv, [&] {
    ht::ops::attention_forward(qkv, s.h, &segments, out, lse);
    ht::ops::attention_backward(dout, qkv, out, lse, s.h, &segments, dqkv);
  });
  set_rate(state, "GFLOP/s", attention_flops(s, false) * 3.0 * 1e-9);
}

// ---- row-wise and element-wise ops (bandwidth) ----------------------------

// The bytes of the dtype's tensors are counted; mean and rstd are f32 always.
void bm_layernorm_forward(benchmark::State& state, Device device, std::int64_t n, std::int64_t c, DType dt) {
  const Tensor x = random_tensor({n, c}, device, 1.f, 1, dt);
  const Tensor w = random_tensor({c}, device, 1.f, 2, dt), b = random_tensor({c}, device, 1.f, 3, dt);
  Tensor y = Tensor::empty({n, c}, dt, device);
  Tensor mean = Tensor::empty({n}, DType::kF32, device), rstd = Tensor::empty({n}, DType::kF32, device);
  run_timed(state, device, y, [&] { ht::ops::layernorm_forward(x, w, b, y, mean, rstd); });
  // read x; write y, mean, rstd (w and b stay in cache)
  set_rate(state, "GB/s", (elem_bytes(dt) * double(2 * n * c) + 4.0 * double(2 * n)) * 1e-9);
}

void bm_layernorm_backward(benchmark::State& state, Device device, std::int64_t n, std::int64_t c, DType dt) {
  const Tensor x = random_tensor({n, c}, device, 1.f, 1, dt);
  const Tensor w = random_tensor({c}, device, 1.f, 2, dt), b = random_tensor({c}, device, 1.f, 3, dt);
  Tensor y = Tensor::empty({n, c}, dt, device);
  Tensor mean = Tensor::empty({n}, DType::kF32, device), rstd = Tensor::empty({n}, DType::kF32, device);
  ht::ops::layernorm_forward(x, w, b, y, mean, rstd);
  const Tensor dy = random_tensor({n, c}, device, 1.f, 4, dt);
  Tensor dx = Tensor::empty({n, c}, dt, device);
  Tensor dw = Tensor::zeros({c}, dt, device), db = Tensor::zeros({c}, dt, device);
  run_timed(state, device, dx, [&] { ht::ops::layernorm_backward(dy, x, w, mean, rstd, dx, dw, db); });
  // read dy, x, mean, rstd; write dx
  set_rate(state, "GB/s", (elem_bytes(dt) * double(3 * n * c) + 4.0 * double(2 * n)) * 1e-9);
}

void bm_gelu_forward(benchmark::State& state, Device device, std::int64_t n, DType dt) {
  const Tensor x = random_tensor({n}, device, 3.f, 1, dt);
  Tensor y = Tensor::empty({n}, dt, device);
  run_timed(state, device, y, [&] { ht::ops::gelu_forward(x, y); });
  set_rate(state, "GB/s", elem_bytes(dt) * double(2 * n) * 1e-9);
}

void bm_gelu_backward(benchmark::State& state, Device device, std::int64_t n, DType dt) {
  const Tensor x = random_tensor({n}, device, 3.f, 1, dt);
  const Tensor dy = random_tensor({n}, device, 1.f, 2, dt);
  Tensor dx = Tensor::empty({n}, dt, device);
  run_timed(state, device, dx, [&] { ht::ops::gelu_backward(x, dy, dx); });
  set_rate(state, "GB/s", elem_bytes(dt) * double(3 * n) * 1e-9);
}

void bm_cross_entropy(benchmark::State& state, Device device, std::int64_t n, std::int64_t v) {
  const Tensor logits = random_tensor({n, v}, device, 4.f);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[std::size_t(i)] = std::int32_t((i * 7919) % v);
  const Tensor targets = Tensor::from_vector(ids, {n}).to(device);
  Tensor losses = Tensor::empty({n}, DType::kF32, device), lse = Tensor::empty({n}, DType::kF32, device);
  Tensor dlogits = Tensor::empty({n, v}, DType::kF32, device);
  run_timed(state, device, dlogits, [&] {
    ht::ops::cross_entropy_forward(logits, targets, losses, lse);
    ht::ops::cross_entropy_backward(logits, targets, lse, 1.f / float(n), dlogits);
  });
  // forward reads the logits; backward reads them again and writes dlogits
  set_rate(state, "GB/s", double(4 * 3 * n * v) * 1e-9);
}

void bm_adamw(benchmark::State& state, Device device, std::int64_t n) {
  Tensor param = random_tensor({n}, device, 1.f, 1);
  const Tensor grad = random_tensor({n}, device, 1.f, 2);
  Tensor m = Tensor::zeros({n}, DType::kF32, device), v = Tensor::zeros({n}, DType::kF32, device);
  ht::ops::AdamWHyper h{.lr = 1e-4f, .beta2 = 0.95f, .weight_decay = 0.1f};
  run_timed(state, device, param, [&] {
    ht::ops::adamw_update(param, grad, m, v, h);
    ++h.step;
  });
  // read param, grad, m, v; write param, m, v
  set_rate(state, "GB/s", double(4 * 7 * n) * 1e-9);
}

void bm_sum_squares(benchmark::State& state, Device device, std::int64_t n) {
  const Tensor grad = random_tensor({n}, device);
  Tensor acc = Tensor::zeros({1}, DType::kF32, device);
  run_timed(state, device, acc, [&] { ht::ops::sum_squares(grad, acc); });
  set_rate(state, "GB/s", double(4 * n) * 1e-9);  // reads the gradient once
}

// ---- registration ---------------------------------------------------------

std::string bench_name(const std::string& op, const std::string& device, const std::string& shape) {
  return op + "/" + device + "/" + shape;
}

template <typename Fn, typename... Args>
void reg(const std::string& name, Device device, Fn fn, Args... args) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(), fn, device, args...);
  b->Unit(benchmark::kMicrosecond);
  if (device.is_cuda()) b->UseManualTime(); else b->UseRealTime();
}

void register_all(Device device) {
  const std::string dev = device.is_cpu() ? "cpu" : "cuda";
  using Backend = ht::ops::CpuGemmBackend;
  // (B*T, C) rows at B*T = 1024 for both model widths, as Linear runs them:
  // forward x W^T (NT), input gradient dy W (NN), weight gradient dy^T x (TN).
  std::vector<GemmShape> shapes;
  for (std::int64_t c : {384, 768}) {
    shapes.push_back({"fc_fwd", 1024, 4 * c, c, false, true});
    shapes.push_back({"fc_dx", 1024, c, 4 * c, false, false});
    shapes.push_back({"fc_dw", 4 * c, c, 1024, true, false});
    shapes.push_back({"qkv_fwd", 1024, 3 * c, c, false, true});
  }
  // The 124M config's tied output head at 512 tokens: x (512, 768) wte^T.
  shapes.push_back({"lm_head_fwd", 512, 50257, 768, false, true});
  shapes.push_back({"square", 1024, 1024, 1024, false, false});
  // f32 names as they were; 16-bit rows name the dtype after the op.
  const auto op_name = [](const char* op, DType dt) {
    return dt == DType::kF32 ? std::string(op) : std::string(op) + "_" + std::string(ht::dtype_name(dt));
  };
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  for (DType dt : dtypes)
    for (const GemmShape& s : shapes) {
      const std::string rest = std::string(s.what) + "/M" + std::to_string(s.m) + "_N" + std::to_string(s.n) +
                               "_K" + std::to_string(s.k);
      const std::string op = op_name("matmul", dt);
      if (device.is_cpu()) {
        reg(bench_name(op, "cpu_openblas", rest), device, bm_matmul, Backend::kOpenBlas, s, dt);
        // Eigen against OpenBLAS is an f32 question; 16-bit adds the same conversions to both.
        if (dt == DType::kF32) reg(bench_name(op, "cpu_eigen", rest), device, bm_matmul, Backend::kEigen, s, dt);
      } else {
        reg(bench_name(op, dev, rest), device, bm_matmul, Backend::kOpenBlas, s, dt);
      }
    }
  for (std::int64_t t : {128, 256}) {
    const AttnShape s{8, t, 384, 6};
    const std::string rest = "B8_T" + std::to_string(t) + "_C384_H6";
    reg(bench_name("attention_fwd", dev, rest), device, bm_attention_forward, s);
    reg(bench_name("attention_bwd", dev, rest), device, bm_attention_backward, s);
  }
  // GPT-2 small's attention (12 heads of 64), B 4: flash attention and the
  // materialised reference side by side (host only: the reference has no
  // CUDA version).
  if (device.is_cpu())
    for (std::int64_t t : {256, 1024}) {
      const AttnShape s{4, t, 768, 12};
      const std::string rest = "B4_T" + std::to_string(t) + "_C768_H12";
      reg(bench_name("attention_fwd_bwd", "cpu_flash", rest), device, bm_attention_step, AttnImpl::kFlash, s);
      reg(bench_name("attention_fwd_bwd", "cpu_materialised_reference", rest), device, bm_attention_step,
          AttnImpl::kMaterialisedReference, s);
    }
  // Packed documents (GPT-2 small's heads, T 1024): one, then 256 and 64 tokens each.
  for (std::int64_t doc : {1024, 256, 64}) {
    const AttnShape s{4, 1024, 768, 12};
    reg(bench_name("attention_fwd_bwd_documents", dev, "B4_T1024_C768_H12_doc" + std::to_string(doc)), device,
        bm_attention_documents, s, doc);
  }
  for (DType dt : dtypes)
    for (std::int64_t c : {384, 768}) {
      const std::string rest = "N1024_C" + std::to_string(c);
      reg(bench_name(op_name("layernorm_fwd", dt), dev, rest), device, bm_layernorm_forward, std::int64_t{1024}, c, dt);
      reg(bench_name(op_name("layernorm_bwd", dt), dev, rest), device, bm_layernorm_backward, std::int64_t{1024}, c,
          dt);
    }
  // The MLP hidden activation of the small config: (B*T, 4C) = (1024, 1536).
  for (DType dt : dtypes) {
    reg(bench_name(op_name("gelu_fwd", dt), dev, "n1572864"), device, bm_gelu_forward, std::int64_t{1024 * 1536}, dt);
    reg(bench_name(op_name("gelu_bwd", dt), dev, "n1572864"), device, bm_gelu_backward, std::int64_t{1024 * 1536},
        dt);
  }
  // The 124M config's head: 512 rows of the GPT-2 vocabulary.
  reg(bench_name("cross_entropy_fwd_bwd", dev, "N512_V50257"), device, bm_cross_entropy, std::int64_t{512},
      std::int64_t{50257});
  // One small-config parameter block (4C x C) and the whole 124M model's state.
  const std::int64_t gpt2_params = ht::models::GPTConfig{50257, 1024, 12, 12, 768}.num_parameters();
  reg(bench_name("adamw", dev, "n589824"), device, bm_adamw, std::int64_t{589824});
  reg(bench_name("adamw", dev, "n" + std::to_string(gpt2_params)), device, bm_adamw, gpt2_params);
  // The global gradient norm's pass over the 124M model's gradients.
  reg(bench_name("sum_squares", dev, "n" + std::to_string(gpt2_params)), device, bm_sum_squares, gpt2_params);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("hypertrain", ht::build_description());
  benchmark::AddCustomContext("omp_threads", std::to_string(omp_get_max_threads()));
  const char* omp_env = std::getenv("OMP_NUM_THREADS");
  benchmark::AddCustomContext("OMP_NUM_THREADS", omp_env ? omp_env : "(unset)");
  // OpenBLAS picks its kernels by CPU model when it loads; 0.3.21 falls back
  // to Prescott (SSE3) on CPUs it does not know unless OPENBLAS_CORETYPE is set.
  const char* coretype_env = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("openblas", openblas_get_config());
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", coretype_env ? coretype_env : "(unset)");
  const int cuda_devices = ht::cuda_device_count();
  benchmark::AddCustomContext("cuda_devices", std::to_string(cuda_devices));
  register_all(Device::cpu());
  if (cuda_devices > 0) register_all(Device::cuda(0));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
