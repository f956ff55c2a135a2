// Node health checks (ht::resilience::run_health_checks) and their report as
// JSON and as a table.
#include "ht/resilience/health.h"

#include "ht/resilience/faults.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ht/comm/communicator.h"
#include "ht/config.h"
#include "ht/core/error.h"
#include "ht/core/tensor.h"
#include "ht/ops/matmul.h"
#if HT_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda_context.h"
#endif

namespace ht::resilience {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using OrderedJson = nlohmann::ordered_json;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
double seconds_since(Clock::time_point t0) { return ms_since(t0) / 1e3; }

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// Whether HT_FAULTS (as passed in the options) marks `node` unhealthy; the
// plan's other faults belong to the training run.
bool node_marked_unhealthy(const std::string& spec, int node) {
  return !spec.empty() && FaultPlan::parse(spec).node_unhealthy(node);
}

// Deterministic inputs: small values in [-1, 1] from a 64-bit LCG.
std::vector<float> pseudo_random(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (float& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = float(std::int64_t(s >> 40) - (1 << 23)) / float(1 << 23);
  }
  return v;
}

// Compares c (m, n) = a (m, k) @ b (k, n) with a double-precision loop. An f32
// dot product of length k is within about k * 2^-24 * sum |a_iq b_qj| of the
// exact value; `slack` widens that for two computed operands (GPU vs CPU).
// Returns "" when every element is within, else what was wrong.
std::string check_gemm(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c,
                       std::int64_t m, std::int64_t n, std::int64_t k, double slack, const std::string& what) {
  const double u = std::ldexp(1.0, -24);
  std::int64_t wrong = 0, worst_i = 0, worst_j = 0;
  double worst_ratio = 0, worst_ref = 0, worst_got = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0, s_abs = 0;
      for (std::int64_t q = 0; q < k; ++q) {
        const double p = double(a[std::size_t(i * k + q)]) * double(b[std::size_t(q * n + j)]);
        s += p;
        s_abs += std::abs(p);
      }
      const double got = c[std::size_t(i * n + j)];
      const double bound = slack * double(k + 4) * u * s_abs + 1e-30;
      const double ratio = std::isfinite(got) ? std::abs(got - s) / bound : INFINITY;
      if (ratio > 1) ++wrong;
      if (ratio > worst_ratio) worst_ratio = ratio, worst_i = i, worst_j = j, worst_ref = s, worst_got = got;
    }
  if (wrong == 0) return {};
  return fmt::format("{} {}x{}x{} wrong: {} of {} elements outside the f32 error bound, worst c[{},{}] = {} vs {}", what,
                     m, k, n, wrong, m * n, worst_i, worst_j, worst_got, worst_ref);
}

// Runs `body` for a check named `name`: times it, and turns an exception into
// a failed result (a broken node throws; that is a finding, not a crash).
CheckResult run_check(const std::string& name, const std::function<void(CheckResult&)>& body) {
  CheckResult r;
  r.name = name;
  const auto t0 = Clock::now();
  try {
    body(r);
  } catch (const Error& e) {
    r.ok = false;
    r.reason = "error: " + e.message();
  } catch (const std::exception& e) {
    r.ok = false;
    r.reason = std::string("error: ") + e.what();
  }
  r.ms = ms_since(t0);
  return r;
}

// value >= threshold, or a reason naming both.
void require_min(CheckResult& r, const std::string& what) {
  if (r.threshold > 0 && !(r.value >= r.threshold)) {
    r.ok = false;
    r.reason = fmt::format("{} {:.3g} {} is below the minimum {:.3g} {}", what, r.value, r.unit, r.threshold, r.unit);
  }
}

CheckResult skipped(const std::string& name, const std::string& why, const std::string& unit) {
  CheckResult r;
  r.name = name;
  r.skipped = true;
  r.reason = why;
  r.unit = unit;
  return r;
}

// compute: correctness of a small awkward-sized sgemm, then the rate of a
// larger one (best of several, after a warm-up that pays for thread start-up).
CheckResult check_compute(const HealthOptions& o) {
  return run_check("compute", [&](CheckResult& r) {
    r.unit = "GFLOP/s";
    r.threshold = o.min_gemm_gflops;
    if (node_marked_unhealthy(o.faults, o.node)) {
      r.ok = false;
      r.reason = "fault injected: node-unhealthy";
      return;
    }
    constexpr std::int64_t m = 37, k = 53, n = 29;
    const auto av = pseudo_random(m * k, 1), bv = pseudo_random(k * n, 2);
    Tensor c = Tensor::empty({m, n}, DType::kF32);
    ops::matmul(Tensor::from_vector(av, {m, k}), Tensor::from_vector(bv, {k, n}), c);
    if (std::string bad = check_gemm(av, bv, c.to_vector<float>(), m, n, k, 1.0, "sgemm"); !bad.empty()) {
      r.ok = false;
      r.reason = bad;
      return;
    }
    const std::int64_t s = o.gemm_size;
    const Tensor a = Tensor::from_vector(pseudo_random(s * s, 3), {s, s});
    const Tensor b = Tensor::from_vector(pseudo_random(s * s, 4), {s, s});
    Tensor big = Tensor::empty({s, s}, DType::kF32);
    ops::matmul(a, b, big);
    double best_s = INFINITY;
    const auto t_all = Clock::now();
    for (int rep = 0; rep < 5 && (rep < 2 || seconds_since(t_all) < 0.3); ++rep) {
      const auto t0 = Clock::now();
      ops::matmul(a, b, big);
      best_s = std::min(best_s, seconds_since(t0));
    }
    r.value = 2.0 * double(s) * double(s) * double(s) / best_s / 1e9;
    r.reason = fmt::format("sgemm {}^3 (best of the timed runs); {}x{}x{} correct", s, m, k, n);
    require_min(r, fmt::format("sgemm {}^3 at", s));
  });
}

// memory: allocate, then for each pattern write every word and read it back.
CheckResult check_memory(const HealthOptions& o) {
  return run_check("memory", [&](CheckResult& r) {
    r.unit = "GB/s";
    r.threshold = o.min_memory_gbps;
    const std::size_t words = std::size_t(o.memory_mib) * (std::size_t(1) << 20) / sizeof(std::uint64_t);
    std::unique_ptr<std::uint64_t[]> buf(new (std::nothrow) std::uint64_t[words]);
    if (!buf) {
      r.ok = false;
      r.reason = fmt::format("could not allocate {} MiB of host memory", o.memory_mib);
      return;
    }
    // Constant patterns catch stuck bits; the address-derived one catches
    // words that alias each other (a broken address line).
    const std::uint64_t patterns[] = {0x5555555555555555ULL, 0xAAAAAAAAAAAAAAAAULL, 0, ~0ULL};
    const auto t0 = Clock::now();
    std::size_t bad = 0, first_bad = 0;
    for (int p = 0; p < 5; ++p) {
      auto expect = [&](std::size_t i) { return p < 4 ? patterns[p] : (i + 1) * 0x9E3779B97F4A7C15ULL; };
      std::uint64_t* w = buf.get();
      for (std::size_t i = 0; i < words; ++i) w[i] = expect(i);
      asm volatile("" ::: "memory");  // the reads below must go to memory
      for (std::size_t i = 0; i < words; ++i)
        if (w[i] != expect(i) && bad++ == 0) first_bad = i;
    }
    const double s = seconds_since(t0);
    r.value = 5.0 * 2.0 * double(words * sizeof(std::uint64_t)) / s / 1e9;
    if (bad > 0) {
      r.ok = false;
      r.reason = fmt::format("{} of {} words read back wrong in {} MiB (first at byte {})", bad, 5 * words,
                             o.memory_mib, first_bad * sizeof(std::uint64_t));
      return;
    }
    r.reason = fmt::format("{} MiB written and verified with 5 patterns", o.memory_mib);
    require_min(r, "write+verify bandwidth");
  });
}

// The probe file's name: unique per host and process, so that nodes sharing
// a checkpoint file system do not collide.
fs::path probe_path(const fs::path& dir) {
  return dir / fmt::format(".ht-health-probe.{}.{}", host_name(), ::getpid());
}

// disk: the checkpoint directory exists or can be created, takes a new file,
// and has the free space. Returns whether the directory is usable.
CheckResult check_disk(const HealthOptions& o, bool& usable) {
  usable = false;
  return run_check("disk", [&](CheckResult& r) {
    r.unit = "GiB";
    r.threshold = o.min_free_disk_gib;
    const fs::path dir = o.ckpt_dir;
    std::error_code ec;
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
      r.ok = false;
      r.reason = fmt::format("checkpoint directory '{}' is not a directory", o.ckpt_dir);
      return;
    }
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir)) {
      r.ok = false;
      r.reason = fmt::format("checkpoint directory '{}' does not exist and cannot be created: {}", o.ckpt_dir,
                             ec ? ec.message() : "unknown error");
      return;
    }
    const fs::path probe = probe_path(dir);
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
      r.ok = false;
      r.reason = fmt::format("checkpoint directory '{}' is not writable: {}", o.ckpt_dir, std::strerror(errno));
      return;
    }
    ::close(fd);
    fs::remove(probe, ec);
    usable = true;
    const fs::space_info space = fs::space(dir, ec);
    if (ec) {
      r.ok = false;
      r.reason = fmt::format("cannot read the free space of '{}': {}", o.ckpt_dir, ec.message());
      return;
    }
    r.value = double(space.available) / double(1ULL << 30);
    r.reason = fmt::format("'{}' writable", o.ckpt_dir);
    require_min(r, fmt::format("free space in '{}':", o.ckpt_dir));
  });
}

// disk_write: writes disk_write_mib (non-constant bytes: no file system
// compresses them away) and fsyncs; the rate includes the fsync, as a
// checkpoint's commit does. The file is read back and removed.
CheckResult check_disk_write(const HealthOptions& o) {
  return run_check("disk_write", [&](CheckResult& r) {
    r.unit = "MB/s";
    r.threshold = o.min_disk_write_mbps;
    const fs::path probe = probe_path(o.ckpt_dir);
    const std::vector<float> chunk = pseudo_random((1 << 20) / sizeof(float), 5);
    const auto fail = [&](const char* what) {
      r.ok = false;
      r.reason = fmt::format("{} probe file '{}': {}", what, probe.string(), std::strerror(errno));
    };
    const auto t0 = Clock::now();
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return fail("cannot create");
    bool ok = true;
    for (std::int64_t i = 0; i < o.disk_write_mib && ok; ++i)
      ok = ::write(fd, chunk.data(), 1 << 20) == (1 << 20);
    ok = ok && ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    const double s = seconds_since(t0);
    std::error_code ec;
    if (!ok) {
      fs::remove(probe, ec);
      errno = saved;
      return fail("cannot write");
    }
    // Read back (from the page cache, mostly: this catches a file system that
    // loses data on the way, not a failing platter).
    std::vector<char> back(1 << 20);
    const int rfd = ::open(probe.c_str(), O_RDONLY);
    std::int64_t mismatched = rfd < 0 ? o.disk_write_mib : 0;
    for (std::int64_t i = 0; rfd >= 0 && i < o.disk_write_mib; ++i)
      if (::read(rfd, back.data(), back.size()) != ssize_t(back.size()) ||
          std::memcmp(back.data(), chunk.data(), back.size()) != 0)
        ++mismatched;
    if (rfd >= 0) ::close(rfd);
    fs::remove(probe, ec);
    r.value = double(o.disk_write_mib) * double(1 << 20) / 1e6 / s;
    if (mismatched > 0) {
      r.ok = false;
      r.reason = fmt::format("{} of {} MiB read back wrong from '{}'", mismatched, o.disk_write_mib, probe.string());
      return;
    }
    r.reason = fmt::format("{} MiB written with fsync and read back", o.disk_write_mib);
    require_min(r, "write rate");
  });
}

// collectives: an all_reduce of small integers whose sum is exact (rank r
// contributes (r + 1) * (i % 13 + 1) at index i, so the sum is
// n(n+1)/2 * (i % 13 + 1)); then an out-of-place all_reduce of allreduce_mib,
// timed between barriers, every rank reporting the slowest rank's time so that
// all ranks reach the same verdict.
CheckResult check_collectives(const HealthOptions& o, comm::Communicator& comm) {
  return run_check("collectives", [&](CheckResult& r) {
    r.unit = "GB/s";
    r.threshold = o.min_allreduce_busbw_gbps;
    const int n = comm.size(), rank = comm.rank();
    const Device dev = comm.device();
    const auto on_dev = [&](const Tensor& t) { return dev.is_cpu() ? t : t.to(dev); };

    constexpr std::int64_t small = 1237;  // a prime: no block size divides it
    std::vector<float> in(small);
    for (std::int64_t i = 0; i < small; ++i) in[std::size_t(i)] = float((rank + 1) * (i % 13 + 1));
    const Tensor small_in = on_dev(Tensor::from_vector(in, {small}));
    Tensor small_out = on_dev(Tensor::empty({small}, DType::kF32));
    comm.all_reduce(small_in, small_out, comm::ReduceOp::kSum)->wait();
    const std::vector<float> got = small_out.to_vector<float>();
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < small; ++i)
      if (got[std::size_t(i)] != float(std::int64_t(n) * (n + 1) / 2 * (i % 13 + 1))) ++wrong;

    const std::int64_t count = o.allreduce_mib * (1 << 20) / std::int64_t(sizeof(float));
    Tensor big_in = on_dev(Tensor::empty({count}, DType::kF32));
    Tensor big_out = on_dev(Tensor::empty({count}, DType::kF32));
    big_in.fill_(float(rank + 1));
    comm.all_reduce(big_in, big_out, comm::ReduceOp::kSum)->wait();  // warm-up: connections, buffers
    constexpr int reps = 3;
    comm.barrier()->wait();
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) comm.all_reduce(big_in, big_out, comm::ReduceOp::kSum)->wait();
    Tensor elapsed = on_dev(Tensor::from_vector(std::vector<float>{float(seconds_since(t0))}, {1}));
    comm.all_reduce(elapsed, elapsed, comm::ReduceOp::kMax)->wait();
    const double s = elapsed.item(0) / reps;
    const std::vector<float> big = big_out.to_vector<float>();
    const float expect = float(std::int64_t(n) * (n + 1) / 2);
    wrong += std::count_if(big.begin(), big.end(), [&](float v) { return v != expect; });

    const double bytes = double(count) * sizeof(float);
    r.value = bytes / s / 1e9 * 2.0 * (n - 1) / n;
    if (wrong > 0) {
      r.ok = false;
      r.reason = fmt::format("all_reduce over {} ranks of group '{}' gave {} wrong elements (of {})", n, comm.name(),
                             wrong, small + count);
      return;
    }
    r.reason = fmt::format("all_reduce over {} ranks of group '{}' correct; {} MiB in {:.2f} ms (bus bandwidth)", n,
                           comm.name(), o.allreduce_mib, s * 1e3);
    require_min(r, fmt::format("all_reduce of {} MiB over {} ranks: bus bandwidth", o.allreduce_mib, n));
  });
}

void check_gpus(const HealthOptions& o, std::vector<CheckResult>& out) {
#if !HT_HAVE_CUDA
  const std::string why = "no GPU: skipped (this build has no CUDA backend)";
  CheckResult devices = skipped("gpu_devices", why, "devices");
  if (o.expect_gpus > 0) {
    devices.ok = false;
    devices.skipped = false;
    devices.threshold = o.expect_gpus;
    devices.reason = fmt::format("{} GPUs expected, but this build has no CUDA backend", o.expect_gpus);
  }
  out.push_back(devices);
  out.push_back(skipped("gpu_ecc", why, "devices"));
  out.push_back(skipped("gpu_gemm", why, "GFLOP/s"));
#else
  int count = 0;
  std::string query_error;
  CheckResult devices = run_check("gpu_devices", [&](CheckResult& r) {
    r.unit = "devices";
    r.threshold = o.expect_gpus;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      cudaGetLastError();  // clear the error, so that later CUDA calls do not see it
      count = 0;
      query_error = fmt::format(" (cudaGetDeviceCount: {})", cudaGetErrorName(e));
    }
    r.value = count;
    if (count == 0) {
      r.skipped = o.expect_gpus == 0;
      r.ok = r.skipped;
      r.reason = r.skipped ? "no GPU: skipped" + query_error
                           : fmt::format("{} GPUs expected, none visible{}", o.expect_gpus, query_error);
      return;
    }
    std::string list;
    for (int d = 0; d < count; ++d) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
        cudaGetLastError();
        list += fmt::format("{}{}: properties unreadable", d ? "; " : "", d);
        continue;
      }
      list += fmt::format("{}{}: {} ({:.1f} GiB)", d ? "; " : "", d, p.name, double(p.totalGlobalMem) / (1ULL << 30));
    }
    r.reason = list;
    if (count < o.expect_gpus) {
      r.ok = false;
      r.reason = fmt::format("{} GPUs visible, {} expected: {}", count, o.expect_gpus, list);
    }
  });
  out.push_back(devices);
  if (count == 0) {
    out.push_back(skipped("gpu_ecc", "no GPU: skipped", "devices"));
    out.push_back(skipped("gpu_gemm", "no GPU: skipped", "GFLOP/s"));
    return;
  }
  // ECC: the runtime says whether it is on, not how many errors were seen;
  // the counters need NVML, which hypertrain does not link.
  out.push_back(run_check("gpu_ecc", [&](CheckResult& r) {
    r.unit = "devices";
    int enabled = 0;
    for (int d = 0; d < count; ++d) {
      int on = 0;
      if (cudaDeviceGetAttribute(&on, cudaDevAttrEccEnabled, d) != cudaSuccess) cudaGetLastError();
      enabled += on != 0;
    }
    r.value = enabled;
    r.reason = fmt::format("ECC enabled on {} of {} devices; error counts not checked: they need NVML, which is not "
                           "available to hypertrain",
                           enabled, count);
  }));
  // gemm: on each device, an f32 GEMM checked against the host's sgemm of the
  // same operands, then the rate of a large one (cuBLAS, true f32, no TF32).
  out.push_back(run_check("gpu_gemm", [&](CheckResult& r) {
    r.unit = "GFLOP/s";
    r.threshold = o.min_gpu_gemm_gflops;
    constexpr std::int64_t m = 200, k = 256, n = 72;
    const auto av = pseudo_random(m * k, 6), bv = pseudo_random(k * n, 7);
    const Tensor a_host = Tensor::from_vector(av, {m, k}), b_host = Tensor::from_vector(bv, {k, n});
    const std::int64_t s = o.gpu_gemm_size;
    double slowest = INFINITY;
    std::string rates;
    for (int d = 0; d < count; ++d) {
      const Device dev = Device::cuda(d);
      Tensor c = Tensor::empty({m, n}, DType::kF32, dev);
      ops::matmul(a_host.to(dev), b_host.to(dev), c);
      if (std::string bad = check_gemm(av, bv, c.to_vector<float>(), m, n, k, 1.0, fmt::format("cuda:{} gemm", d));
          !bad.empty()) {
        r.ok = false;
        r.reason = bad;
        return;
      }
      const Tensor a = Tensor::from_vector(pseudo_random(s * s, 8), {s, s}).to(dev);
      const Tensor b = Tensor::from_vector(pseudo_random(s * s, 9), {s, s}).to(dev);
      Tensor big = Tensor::empty({s, s}, DType::kF32, dev);
      const ht::cuda::DeviceGuard guard(dev);
      ops::matmul(a, b, big);  // warm-up: cuBLAS handle and kernel selection
      if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
        throw Error(ErrorKind::kCuda, fmt::format("cuda:{}: {}", d, cudaGetErrorString(e)));
      constexpr int reps = 3;
      const auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) ops::matmul(a, b, big);
      if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
        throw Error(ErrorKind::kCuda, fmt::format("cuda:{}: {}", d, cudaGetErrorString(e)));
      const double gflops = reps * 2.0 * double(s) * double(s) * double(s) / seconds_since(t0) / 1e9;
      slowest = std::min(slowest, gflops);
      rates += fmt::format("{}cuda:{} {:.0f}", d ? ", " : "", d, gflops);
    }
    r.value = slowest;
    r.reason = fmt::format("f32 gemm {}^3: {} GFLOP/s; {}x{}x{} matches the host", s, rates, m, k, n);
    require_min(r, fmt::format("f32 gemm {}^3 on the slowest device:", s));
  }));
#endif
}

OrderedJson check_json(const CheckResult& c) {
  return OrderedJson{{"name", c.name},   {"ok", c.ok},       {"skipped", c.skipped},     {"reason", c.reason},
                     {"value", c.value}, {"unit", c.unit},   {"threshold", c.threshold}, {"ms", c.ms}};
}

OrderedJson report_json(const HealthReport& r) {
  OrderedJson checks = OrderedJson::array();
  for (const CheckResult& c : r.checks) checks.push_back(check_json(c));
  return OrderedJson{{"host", r.host},           {"node", r.node},
                     {"rank", r.rank},           {"ok", r.ok},
                     {"version", HT_VERSION},    {"git_commit", HT_GIT_COMMIT},
                     {"checks", std::move(checks)}};
}

}  // namespace

HealthChecks parse_health_checks(std::string_view names) {
  if (names == "all") return {};
  HealthChecks c{false, false, false, false, false};
  std::istringstream in{std::string(names)};
  for (std::string name; std::getline(in, name, ',');) {
    if (name == "compute")
      c.compute = true;
    else if (name == "memory")
      c.memory = true;
    else if (name == "disk")
      c.disk = true;
    else if (name == "collectives")
      c.collectives = true;
    else if (name == "gpu")
      c.gpu = true;
    else
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("unknown health check '{}' in '{}': use all or a comma-separated list of compute, "
                              "memory, disk, collectives, gpu",
                              name, names));
  }
  return c;
}

HealthReport run_health_checks(const HealthOptions& o, comm::Communicator* comm) {
  HT_CHECK_ARG(o.gemm_size > 0 && o.memory_mib > 0 && o.disk_write_mib > 0 && o.allreduce_mib > 0 &&
                   o.gpu_gemm_size > 0,
               "health check sizes must be positive: gemm_size {}, memory_mib {}, disk_write_mib {}, allreduce_mib "
               "{}, gpu_gemm_size {}",
               o.gemm_size, o.memory_mib, o.disk_write_mib, o.allreduce_mib, o.gpu_gemm_size);
  node_marked_unhealthy(o.faults, o.node);  // a malformed plan is a configuration error, whatever is checked

  HealthReport report;
  report.host = host_name();
  report.node = o.node;
  report.rank = comm ? comm->rank() : 0;
  const HealthChecks& c = o.checks;
  if (c.compute) report.checks.push_back(check_compute(o));
  if (c.memory) report.checks.push_back(check_memory(o));
  if (c.disk) {
    if (o.ckpt_dir.empty()) {
      report.checks.push_back(skipped("disk", "no checkpoint directory given: skipped", "GiB"));
      report.checks.push_back(skipped("disk_write", "no checkpoint directory given: skipped", "MB/s"));
    } else {
      bool usable = false;
      report.checks.push_back(check_disk(o, usable));
      if (usable) {
        report.checks.push_back(check_disk_write(o));
      } else {
        CheckResult r;
        r.name = "disk_write";
        r.ok = false;
        r.unit = "MB/s";
        r.threshold = o.min_disk_write_mbps;
        r.reason = "not run: the checkpoint directory is unusable (see the disk check)";
        report.checks.push_back(r);
      }
    }
  }
  if (c.collectives) {
    if (comm == nullptr)
      report.checks.push_back(skipped("collectives", "no communicator: skipped", "GB/s"));
    else if (comm->size() < 2)
      report.checks.push_back(skipped("collectives", "a group of one rank: skipped", "GB/s"));
    else
      report.checks.push_back(check_collectives(o, *comm));
  }
  if (c.gpu) check_gpus(o, report.checks);
  report.ok = std::all_of(report.checks.begin(), report.checks.end(), [](const CheckResult& r) { return r.ok; });
  return report;
}

std::string to_json(const HealthReport& report) { return report_json(report).dump(2) + "\n"; }

std::string to_json(const std::vector<HealthReport>& reports) {
  OrderedJson all = OrderedJson::array();
  for (const HealthReport& r : reports) all.push_back(report_json(r));
  const bool ok = std::all_of(reports.begin(), reports.end(), [](const HealthReport& r) { return r.ok; });
  return OrderedJson{{"ok", ok}, {"world_size", reports.size()}, {"reports", std::move(all)}}.dump(2) + "\n";
}

HealthReport health_report_from_json(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    HealthReport r;
    r.host = j.at("host").get<std::string>();
    r.node = j.at("node").get<int>();
    r.rank = j.at("rank").get<int>();
    r.ok = j.at("ok").get<bool>();
    for (const auto& c : j.at("checks")) {
      CheckResult x;
      x.name = c.at("name").get<std::string>();
      x.ok = c.at("ok").get<bool>();
      x.skipped = c.at("skipped").get<bool>();
      x.reason = c.at("reason").get<std::string>();
      x.value = c.at("value").get<double>();
      x.unit = c.at("unit").get<std::string>();
      x.threshold = c.at("threshold").get<double>();
      x.ms = c.at("ms").get<double>();
      r.checks.push_back(std::move(x));
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("malformed health report: {}", e.what()));
  }
}

std::string format_health_report(const HealthReport& r) {
  const auto failed = std::count_if(r.checks.begin(), r.checks.end(), [](const CheckResult& c) { return !c.ok; });
  const std::string node = r.node >= 0 ? fmt::format("node {} ", r.node) : "";
  std::string out = fmt::format("# ht-health: {}(host {}, rank {}): {}", node, r.host, r.rank,
                                r.ok ? "HEALTHY" : "UNHEALTHY");
  if (!r.ok) out += fmt::format(" ({} of {} checks failed)", failed, r.checks.size());
  out += fmt::format("\n{:<12} {:<6} {:>20} {:>20} {:>8}  {}\n", "check", "result", "value", "minimum", "ms", "reason");
  for (const CheckResult& c : r.checks) {
    const char* result = !c.ok ? "FAIL" : c.skipped ? "skip" : "ok";
    const std::string value = c.skipped ? "-" : fmt::format("{:.4g} {}", c.value, c.unit);
    const std::string minimum = c.threshold > 0 ? fmt::format("{:.4g} {}", c.threshold, c.unit) : "-";
    out += fmt::format("{:<12} {:<6} {:>20} {:>20} {:>8.1f}  {}\n", c.name, result, value, minimum, c.ms, c.reason);
  }
  return out;
}

std::vector<HealthReport> gather_health_reports(const HealthReport& local, comm::Communicator& comm) {
  // Strings travel as i32 words (the communicators carry numeric dtypes):
  // first every rank's length, then every rank's text padded to the longest.
  const int n = comm.size();
  const Device dev = comm.device();
  const auto on_dev = [&](const Tensor& t) { return dev.is_cpu() ? t : t.to(dev); };
  const std::string text = to_json(local);
  const Tensor len = on_dev(Tensor::from_vector(std::vector<std::int32_t>{std::int32_t(text.size())}, {1}));
  Tensor lens = on_dev(Tensor::empty({n}, DType::kI32));
  comm.all_gather(len, lens)->wait();
  const std::vector<std::int32_t> sizes = lens.to_vector<std::int32_t>();
  const std::int64_t words = (*std::max_element(sizes.begin(), sizes.end()) + 3) / 4;
  std::vector<std::int32_t> mine(std::size_t(words), 0);
  std::memcpy(mine.data(), text.data(), text.size());
  const Tensor block = on_dev(Tensor::from_vector(mine, {words}));
  Tensor blocks = on_dev(Tensor::empty({n * words}, DType::kI32));
  comm.all_gather(block, blocks)->wait();
  const std::vector<std::int32_t> all = blocks.to_vector<std::int32_t>();
  std::vector<HealthReport> reports;
  for (int r = 0; r < n; ++r) {
    const char* bytes = reinterpret_cast<const char*>(all.data() + std::size_t(r) * std::size_t(words));
    reports.push_back(health_report_from_json(std::string(bytes, std::size_t(sizes[std::size_t(r)]))));
  }
  return reports;
}

}  // namespace ht::resilience
