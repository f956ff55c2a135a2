// ht::nn::ExpertParallel: the group a mixture-of-experts layer (nn::MoE)
// splits its routed experts over (comm::DeviceMesh::ep_group). Rank r of
// ep holds experts [r E/ep, (r + 1) E/ep), named by their global index, and
// the tokens that chose an expert travel to its rank and back by
// all-to-alls with uneven splits.
#pragma once

#include "ht/comm/communicator.h"

namespace ht::nn {

struct ExpertParallel {
  /// The expert-parallel group; null: every expert on this rank (a group of one).
  comm::Communicator* group = nullptr;

  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
};

}  // namespace ht::nn
