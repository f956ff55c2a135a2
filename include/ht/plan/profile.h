// ht::plan::MachineProfile: what the time and memory models know of the
// machines a job runs on — per rank: memory, matmul and attention rates per
// precision and memory bandwidth; per link (inside a node, between nodes):
// latency and bandwidth. It comes from a quick probe of this machine
// (probe_profile) or from a JSON file describing hardware not at hand, so a
// plan can be made for a cluster far larger than the machine planning it:
//
//   {"name": "H100 SXM 80GB, 8 per node, NVLink 4, 8 x 400 Gb/s InfiniBand",
//    "memory_gib": 80, "ranks_per_node": 8,
//    "rates": {"fp32": {"gemm_gflops": 50000, "attention_gflops": 30000},
//              "bf16": {"gemm_gflops": 600000, "attention_gflops": 350000}},
//    "memory_gbps": 3000, "op_overhead_us": 5, "comm_overlap": 0.9,
//    "intra_node": {"latency_us": 3, "gbps": 360},
//    "inter_node": {"latency_us": 10, "gbps": 45}}
//
// Rates are what a rank reaches at training shapes (not datasheet peaks);
// link bandwidths are what a ring collective's bus bandwidth reaches (GB/s,
// 1e9 bytes). fp16 falls back to bf16's rates and bf16 to fp32's when a file
// leaves them out. Optional: "op_overhead_us" (0), "comm_overlap" (1),
// "cores_per_node" (0: a core or GPU per rank).
#pragma once

#include <map>
#include <string>

#include "ht/core/dtype.h"

namespace ht::comm {
class Communicator;
}

namespace ht::plan {

struct Rates {
  double gemm_gflops = 0;       // large matmuls at training shapes
  double attention_gflops = 0;  // the fused attention core, forward and backward
  /// A matmul of M rows runs at gemm_gflops x M / (M + gemm_half_rows): small
  /// micro-batches use the units less well. Optional in a file (0: no penalty).
  double gemm_half_rows = 0;
  /// The GEMM rate at `rows` rows.
  double gemm_gflops_at(double rows) const { return gemm_gflops * rows / (rows + gemm_half_rows); }
};

struct Link {
  double latency_us = 0;
  double gbps = 0;  // bus bandwidth of a ring all-reduce, 1e9 bytes/s
};

struct MachineProfile {
  std::string name;
  double memory_gib = 0;  // per rank
  int ranks_per_node = 1;
  /// Cores the ranks of a node share; 0 (the default, and in a file that
  /// does not say) or ranks_per_node and above: a core (or GPU) per rank.
  /// Fewer cores than ranks (oversubscription) changes what a pipeline's
  /// bubble costs: an idle stage's core runs another rank (time_model.h).
  int cores_per_node = 0;
  std::map<std::string, Rates> rates;  // by precision: "fp32", "bf16", "fp16"
  double memory_gbps = 0;              // element-wise work
  /// Fixed cost of one op (a kernel launch, a parallel region): what makes
  /// many small micro-batches slower than few large ones. Optional in a file (0).
  double op_overhead_us = 0;
  /// Share of a collective's time that runs while the rank computes (NCCL's
  /// own kernels and copy engines: about 1; MPI on the host, which
  /// progresses non-blocking collectives only inside its calls: near 0).
  /// Optional in a file (1).
  double comm_overlap = 1;
  Link intra_node, inter_node;
  std::string source;  // "probe" or the file it came from

  /// The rates of `compute` (falling back as the header says). Throws
  /// kConfig when the profile has none that apply.
  const Rates& rates_for(DType compute) const;
  /// The link between ranks `span` apart in rank order: inside a node when a
  /// group of `span` consecutive ranks fits in one (span <= ranks_per_node).
  const Link& link(int span) const { return span <= ranks_per_node ? intra_node : inter_node; }
  /// Ranks per core of a node, at least 1.
  double oversubscription() const {
    return cores_per_node > 0 && cores_per_node < ranks_per_node ? double(ranks_per_node) / cores_per_node : 1.0;
  }
  /// Throws kConfig naming a missing or non-positive figure.
  void validate() const;
};

/// Parses the JSON above; throws kConfig saying what is missing or wrong
/// (`where` names the file in messages).
MachineProfile profile_from_json(const std::string& json, const std::string& where = "profile");
/// Reads and parses a profile file; throws kIo when it cannot be read.
MachineProfile load_profile(const std::string& path);
std::string to_json(const MachineProfile& profile);

struct ProbeOptions {
  /// Shapes of the probe's matmul (M x K times K x N) and attention (B, T, heads, head size).
  std::int64_t gemm_m = 1024, gemm_k = 768, gemm_n = 768;
  std::int64_t gemm_small_m = 64;  // a second, small M: how the rate falls with fewer rows
  std::int64_t attn_batch = 2, attn_seq = 256, attn_heads = 4, attn_head_dim = 64;
  /// Bytes of the element-wise bandwidth probe.
  std::int64_t stream_mib = 64;
  /// The all-reduce sizes of the link probe (small: latency; large: bandwidth).
  std::int64_t allreduce_small_bytes = 8, allreduce_large_mib = 8;
  int repeats = 5;  // rounds, the best kept
  double memory_gib = 0;  // per rank; 0: this machine's physical memory / ranks_per_node
};

/// Measures this machine with the library's own ops on the host (the
/// kernels training uses): matmul and fused-attention rates in fp32 and
/// bf16, element-wise bandwidth, and, when `comm` has more than one rank,
/// the link between them (all-reduce latency and bus bandwidth; both links
/// get the figure: a probe sees one node). Collective over `comm` when given.
/// `ranks_per_node` is how many ranks share this machine's cores and memory.
MachineProfile probe_profile(const ProbeOptions& options, comm::Communicator* comm, int ranks_per_node);

}  // namespace ht::plan
