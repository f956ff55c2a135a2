// ht::plan::MachineProfile: the file format and the probe.
#include "ht/plan/profile.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>
#include <sstream>

#include "ht/comm/communicator.h"
#include "ht/core/error.h"
#include "ht/core/tensor.h"
#include "ht/ops/attention.h"
#include "ht/ops/elementwise.h"
#include "ht/ops/matmul.h"

namespace ht::plan {
namespace {

using nlohmann::json;

/// A host tensor of `shape` in `dtype`, every element `value`.
Tensor filled(const Shape& shape, float value, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu(), MemCategory::kOther);
  t.fill_(value);
  return t;
}

const char* precision_key(DType d) {
  switch (d) {
    case DType::kBF16: return "bf16";
    case DType::kF16: return "fp16";
    default: return "fp32";
  }
}

double number(const json& j, const char* key, const std::string& where, const std::string& path) {
  HT_CHECK(j.is_object() && j.contains(key) && j.at(key).is_number(), ErrorKind::kConfig,
           "{}: '{}{}' is missing or not a number; see include/ht/plan/profile.h for the format", where, path, key);
  return j.at(key).get<double>();
}

Link link_from(const json& j, const char* key, const std::string& where) {
  HT_CHECK(j.contains(key) && j.at(key).is_object(), ErrorKind::kConfig,
           "{}: '{}' is missing: give {{\"latency_us\": ..., \"gbps\": ...}}", where, key);
  const std::string path = std::string(key) + ".";
  return {.latency_us = number(j.at(key), "latency_us", where, path), .gbps = number(j.at(key), "gbps", where, path)};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Seconds one call of fn takes: the best of `repeats` rounds, each of
/// enough calls to last about 20 ms, after about 50 ms of warm-up (thread
/// pools, page faults, clocks ramping up); all ranks of `comm` start each
/// round together and it ends when the last is done, so shared cores are
/// measured shared.
template <typename Fn>
double best_seconds(int repeats, comm::Communicator* comm, Fn&& fn) {
  // fn may be a collective: every rank makes the same number of calls.
  const auto agreed = [&](double v) {
    if (!comm || comm->size() == 1) return v;
    Tensor in = Tensor::from_vector(std::vector<float>{float(v)}, {1});
    Tensor out = Tensor::empty({1}, DType::kF32, Device::cpu());
    comm->all_reduce(in, out, comm::ReduceOp::kMin)->wait();
    return double(out.to_vector<float>()[0]);
  };
  fn();
  auto t0 = std::chrono::steady_clock::now();
  fn();
  const int warm = int(agreed(std::clamp(0.05 / std::max(seconds_since(t0), 1e-9), 1.0, 1e5)));
  t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < warm; ++k) fn();
  const double one = seconds_since(t0) / warm;
  const int per_round = int(agreed(std::clamp(0.02 / std::max(one, 1e-9), 1.0, 1e5)));
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    if (comm) comm->barrier()->wait();
    t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < per_round; ++k) fn();
    // Until every rank is done: ranks sharing cores take turns, and a step
    // waits for the slowest.
    if (comm) comm->barrier()->wait();
    best = std::min(best, seconds_since(t0) / per_round);
  }
  return best;
}

/// The smallest of every rank's value (the slowest rank paces a step).
double world_min(double v, comm::Communicator* comm) {
  if (!comm || comm->size() == 1) return v;
  Tensor in = Tensor::from_vector(std::vector<float>{float(v)}, {1});
  Tensor out = Tensor::empty({1}, DType::kF32, Device::cpu());
  comm->all_reduce(in, out, comm::ReduceOp::kMin)->wait();
  return double(out.to_vector<float>()[0]);
}

Rates probe_rates(const ProbeOptions& o, DType dtype, comm::Communicator* comm) {
  const Device cpu = Device::cpu();
  Tensor a = filled({o.gemm_m, o.gemm_k}, 0.01f, dtype);
  Tensor b = filled({o.gemm_n, o.gemm_k}, 0.02f, dtype);
  Tensor c = Tensor::empty({o.gemm_m, o.gemm_n}, dtype, cpu);
  const double gemm_s = best_seconds(o.repeats, comm, [&] { ops::matmul(a, b, c, {.trans_b = true}); });
  const double gemm_flops = 2.0 * double(o.gemm_m) * double(o.gemm_k) * double(o.gemm_n);
  // The same at few rows: rate(M) = rate x M / (M + h) through both points gives h.
  Tensor a_small = a.slice(0, std::min(o.gemm_small_m, o.gemm_m));
  Tensor c_small = c.slice(0, a_small.size(0));
  const double small_s = best_seconds(o.repeats, comm, [&] { ops::matmul(a_small, b, c_small, {.trans_b = true}); });
  const double big = world_min(gemm_flops / gemm_s * 1e-9, comm);
  const double small = world_min(2.0 * double(a_small.size(0)) * double(o.gemm_k) * double(o.gemm_n) / small_s * 1e-9, comm);
  const double q = small / big, sm = double(a_small.size(0)), bm = double(o.gemm_m);
  const double half_rows = q < 1.0 && sm < q * bm ? sm * bm * (q - 1.0) / (sm - q * bm) : 0.0;

  const std::int64_t width = o.attn_heads * o.attn_head_dim;
  Tensor qkv = filled({o.attn_batch, o.attn_seq, 3 * width}, 0.01f, dtype);
  Tensor out = Tensor::empty({o.attn_batch, o.attn_seq, width}, dtype, cpu);
  Tensor lse = Tensor::empty({o.attn_batch, o.attn_heads, o.attn_seq}, DType::kF32, cpu);
  Tensor dout = filled({o.attn_batch, o.attn_seq, width}, 0.01f, dtype);
  Tensor dqkv = Tensor::empty(qkv.shape(), dtype, cpu);
  const double attn_s = best_seconds(o.repeats, comm, [&] {
    ops::attention_forward(qkv, int(o.attn_heads), out, lse);
    ops::attention_backward(dout, qkv, out, lse, int(o.attn_heads), dqkv);
  });
  // The causal half of Q Kᵀ and P V forward (2 T C per token), backward 2.5 times that.
  const double attn_flops = 3.5 * 2.0 * double(o.attn_seq) * double(width) * double(o.attn_batch * o.attn_seq);
  // The large shape's rate is itself below the asymptote: rate(bm) = peak x bm / (bm + h).
  return {.gemm_gflops = big * (bm + half_rows) / bm,
          .attention_gflops = world_min(attn_flops / attn_s * 1e-9, comm),
          .gemm_half_rows = half_rows};
}

}  // namespace

const Rates& MachineProfile::rates_for(DType compute) const {
  std::vector<std::string> order{precision_key(compute)};
  if (compute == DType::kF16) order.push_back("bf16");
  if (compute != DType::kF32) order.push_back("fp32");
  for (const std::string& k : order)
    if (const auto it = rates.find(k); it != rates.end()) return it->second;
  throw Error(ErrorKind::kConfig, fmt::format("machine profile '{}' gives no rates for {} (nor a fallback); add "
                                              "\"rates\": {{\"{}\": {{\"gemm_gflops\": ..., \"attention_gflops\": ...}}}}",
                                              name, precision_key(compute), precision_key(compute)));
}

void MachineProfile::validate() const {
  HT_CHECK(op_overhead_us >= 0, ErrorKind::kConfig, "machine profile '{}': op_overhead_us must not be negative", name);
  HT_CHECK(cores_per_node >= 0, ErrorKind::kConfig,
           "machine profile '{}': cores_per_node {} must not be negative (0: a core per rank)", name, cores_per_node);
  HT_CHECK(comm_overlap >= 0 && comm_overlap <= 1, ErrorKind::kConfig,
           "machine profile '{}': comm_overlap {} must lie in [0, 1]", name, comm_overlap);
  HT_CHECK(memory_gib > 0 && ranks_per_node > 0 && memory_gbps > 0, ErrorKind::kConfig,
           "machine profile '{}': memory_gib ({}), ranks_per_node ({}) and memory_gbps ({}) must be positive", name,
           memory_gib, ranks_per_node, memory_gbps);
  HT_CHECK(!rates.empty(), ErrorKind::kConfig, "machine profile '{}': no rates", name);
  for (const auto& [k, r] : rates)
    HT_CHECK(r.gemm_gflops > 0 && r.attention_gflops > 0, ErrorKind::kConfig,
             "machine profile '{}': rates.{} must have positive gemm_gflops and attention_gflops", name, k);
  for (const Link* l : {&intra_node, &inter_node})
    HT_CHECK(l->gbps > 0 && l->latency_us >= 0, ErrorKind::kConfig,
             "machine profile '{}': a link needs gbps > 0 and latency_us >= 0", name);
}

MachineProfile profile_from_json(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::kConfig, fmt::format("{}: not valid JSON ({})", where, e.what()));
  }
  HT_CHECK(j.is_object(), ErrorKind::kConfig, "{}: a machine profile is a JSON object", where);
  MachineProfile p;
  p.name = j.value("name", std::string("unnamed"));
  p.memory_gib = number(j, "memory_gib", where, "");
  p.ranks_per_node = int(number(j, "ranks_per_node", where, ""));
  p.memory_gbps = number(j, "memory_gbps", where, "");
  if (j.contains("op_overhead_us")) p.op_overhead_us = number(j, "op_overhead_us", where, "");
  if (j.contains("comm_overlap")) p.comm_overlap = number(j, "comm_overlap", where, "");
  if (j.contains("cores_per_node")) p.cores_per_node = int(number(j, "cores_per_node", where, ""));
  HT_CHECK(j.contains("rates") && j.at("rates").is_object(), ErrorKind::kConfig,
           "{}: 'rates' is missing: give {{\"bf16\": {{\"gemm_gflops\": ..., \"attention_gflops\": ...}}}}", where);
  for (const auto& [k, v] : j.at("rates").items()) {
    HT_CHECK(k == "fp32" || k == "bf16" || k == "fp16", ErrorKind::kConfig,
             "{}: rates.{} is not a precision: use fp32, bf16 or fp16", where, k);
    const std::string path = "rates." + k + ".";
    p.rates[k] = {.gemm_gflops = number(v, "gemm_gflops", where, path),
                  .attention_gflops = number(v, "attention_gflops", where, path),
                  .gemm_half_rows = v.contains("gemm_half_rows") ? number(v, "gemm_half_rows", where, path) : 0.0};
  }
  p.intra_node = link_from(j, "intra_node", where);
  p.inter_node = link_from(j, "inter_node", where);
  p.source = where;
  try {
    p.validate();
  } catch (const Error& e) {
    throw Error(ErrorKind::kConfig, fmt::format("{}: {}", where, e.what()));
  }
  return p;
}

MachineProfile load_profile(const std::string& path) {
  std::ifstream in(path);
  HT_CHECK(in.good(), ErrorKind::kIo, "cannot read the machine profile '{}': check the path (--profile)", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return profile_from_json(ss.str(), path);
}

std::string to_json(const MachineProfile& p) {
  json rates = json::object();
  for (const auto& [k, r] : p.rates)
    rates[k] = {{"gemm_gflops", r.gemm_gflops}, {"attention_gflops", r.attention_gflops},
                {"gemm_half_rows", r.gemm_half_rows}};
  const auto link = [](const Link& l) { return json{{"latency_us", l.latency_us}, {"gbps", l.gbps}}; };
  return json{{"name", p.name},
              {"memory_gib", p.memory_gib},
              {"ranks_per_node", p.ranks_per_node},
              {"cores_per_node", p.cores_per_node},
              {"rates", rates},
              {"memory_gbps", p.memory_gbps},
              {"op_overhead_us", p.op_overhead_us},
              {"comm_overlap", p.comm_overlap},
              {"intra_node", link(p.intra_node)},
              {"inter_node", link(p.inter_node)}}
      .dump(2);
}

MachineProfile probe_profile(const ProbeOptions& o, comm::Communicator* comm, int ranks_per_node) {
  HT_CHECK_ARG(ranks_per_node > 0, "probe_profile: ranks_per_node must be positive, got {}", ranks_per_node);
  MachineProfile p;
  p.name = fmt::format("this machine ({} rank{} probed together)", comm ? comm->size() : 1,
                       comm && comm->size() > 1 ? "s" : "");
  p.source = "probe";
  p.ranks_per_node = ranks_per_node;
  p.cores_per_node = int(std::thread::hardware_concurrency());
  p.rates["fp32"] = probe_rates(o, DType::kF32, comm);
  p.rates["bf16"] = probe_rates(o, DType::kBF16, comm);
  // Element-wise bandwidth: out = a + b reads two buffers and writes one.
  const std::int64_t n = o.stream_mib * (std::int64_t(1) << 20) / 4 / 3;
  Tensor a = filled({n}, 1.f, DType::kF32), b = filled({n}, 2.f, DType::kF32);
  Tensor out = Tensor::empty({n}, DType::kF32, Device::cpu());
  const double add_s = best_seconds(o.repeats, comm, [&] { ops::add(a, b, out); });
  p.memory_gbps = world_min(3.0 * double(n) * 4.0 / add_s * 1e-9, comm);
  // One op's fixed cost: a tiny add.
  Tensor ta = filled({64}, 1.f, DType::kF32), tb = filled({64}, 2.f, DType::kF32), tout = filled({64}, 0.f, DType::kF32);
  const double tiny_s = best_seconds(o.repeats, comm, [&] { ops::add(ta, tb, tout); });
  p.op_overhead_us = -world_min(-(tiny_s * 1e6), comm);
  if (o.memory_gib > 0) {
    p.memory_gib = o.memory_gib;
  } else {
    const double phys = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    p.memory_gib = phys / double(1 << 30) / ranks_per_node;
  }
  if (comm && comm->size() > 1) {
    Tensor small = filled({std::max<std::int64_t>(o.allreduce_small_bytes / 4, 1)}, 1.f, DType::kF32);
    Tensor small_out = Tensor::empty(small.shape(), DType::kF32, Device::cpu());
    const double lat_s = best_seconds(o.repeats, comm, [&] {
      comm->all_reduce(small, small_out, comm::ReduceOp::kSum)->wait();
    });
    const std::int64_t big_n = o.allreduce_large_mib * (std::int64_t(1) << 20) / 4;
    Tensor big = filled({big_n}, 1.f, DType::kF32), big_out = Tensor::empty({big_n}, DType::kF32, Device::cpu());
    const double big_s = best_seconds(o.repeats, comm, [&] {
      comm->all_reduce(big, big_out, comm::ReduceOp::kSum)->wait();
    });
    const int g = comm->size();
    // A collective in a step follows compute, and ranks reach it apart (and,
    // with more ranks than cores, must be scheduled first): its latency is
    // measured so, after a matmul, beside the matmul alone.
    Tensor la = filled({128, 128}, 0.01f, DType::kF32), lb = filled({128, 128}, 0.02f, DType::kF32);
    Tensor lc = Tensor::empty({128, 128}, DType::kF32, Device::cpu(), MemCategory::kOther);
    const double alone_s = best_seconds(o.repeats, comm, [&] { ops::matmul(la, lb, lc, {.trans_b = true}); });
    const double mixed_s = best_seconds(o.repeats, comm, [&] {
      ops::matmul(la, lb, lc, {.trans_b = true});
      comm->all_reduce(small, small_out, comm::ReduceOp::kSum)->wait();
    });
    const double latency_us = std::max(lat_s, mixed_s - alone_s) / (2.0 * (g - 1)) * 1e6;
    const double bus = 2.0 * (g - 1) / g * double(big_n) * 4.0 / std::max(big_s - lat_s, 1e-9) * 1e-9;
    // Every rank must plan with the same figures: rank 0's slowest view.
    p.intra_node = {.latency_us = -world_min(-latency_us, comm), .gbps = world_min(bus, comm)};
    // Overlap: the large all-reduce started, matmuls run for about as long,
    // then waited for. Hidden time over the shorter of the two.
    Tensor ga = filled({256, 256}, 0.01f, DType::kF32), gb = filled({256, 256}, 0.02f, DType::kF32);
    Tensor gc = Tensor::empty({256, 256}, DType::kF32, Device::cpu(), MemCategory::kOther);
    const double mm_s = best_seconds(o.repeats, comm, [&] { ops::matmul(ga, gb, gc, {.trans_b = true}); });
    const int k = int(world_min(float(std::clamp(big_s / mm_s, 1.0, 1e5)), comm));
    const double together_s = best_seconds(o.repeats, comm, [&] {
      comm::WorkPtr w = comm->all_reduce(big, big_out, comm::ReduceOp::kSum);
      for (int i = 0; i < k; ++i) ops::matmul(ga, gb, gc, {.trans_b = true});
      w->wait();
    });
    const double compute_s = k * mm_s;
    const double hidden = big_s + compute_s - together_s;
    p.comm_overlap = world_min(std::clamp(hidden / std::min(big_s, compute_s), 0.0, 1.0), comm);
  } else {
    // One rank sees no link: shared memory's typical figures, marked in the name.
    p.intra_node = {.latency_us = 2.0, .gbps = std::max(1.0, p.memory_gbps / 4)};
    p.name += ", links not measured";
  }
  p.inter_node = p.intra_node;
  return p;
}

}  // namespace ht::plan
