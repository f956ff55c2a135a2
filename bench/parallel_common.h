// What the modes of ht-parallel-bench share (parallel_bench.cc holds main):
// its arguments, the engine options and data every mode starts from, and
// gathering figures from every rank. Each mode lives in its own file:
// parallel_memory.cc, parallel_overlap.cc, parallel_bubble.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.h"
#include "ht/comm/communicator.h"
#include "ht/comm/device_mesh.h"
#include "ht/data/token_dataset.h"
#include "ht/models/gpt.h"
#include "ht/train/engine.h"

namespace ht::bench {

struct ParallelArgs {
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
  int virtual_stages = 2;  // chunks per rank of the interleaved schedule
  double timeout_s = 0;
};

inline constexpr double kMiB = 1024.0 * 1024.0;

/// The options every mode starts from: the batch, warm-up + timed steps, one
/// warm-up step of the learning rate, one validation micro-batch.
train::EngineOptions base_options(const ParallelArgs& a);

/// Random tokens enough for every step of `dp` ranks (at least 64 global
/// batches, 65536 tokens) and two validation windows.
data::TokenSplits splits_for(const ParallelArgs& a, const models::GPTConfig& model, int dp);

/// Every rank's `mine` (the same length everywhere), rank-major; collective over `c`.
std::vector<std::int64_t> gather_i64(comm::Communicator& c, const std::vector<std::int64_t>& mine);
std::vector<double> gather_f64(comm::Communicator& c, const std::vector<double>& mine);

/// The element-wise maximum over `ranks` rank-major rows of `all`.
std::vector<std::int64_t> max_over_ranks(const std::vector<std::int64_t>& all, int ranks);

/// The modes: each prints its table (or JSON Lines) on world rank 0 and
/// returns the exit status (1: a check that does not depend on timing failed).
int run_memory(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model);
int run_overlap(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model);
int run_bubble(const ParallelArgs& a, comm::DeviceMesh& mesh, const models::GPTConfig& model);

}  // namespace ht::bench
