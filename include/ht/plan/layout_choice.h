// ht::plan::LayoutChoice: one way to run a model on a world of ranks — a
// parallel::Layout (mesh, ZeRO, micro-batch and accumulation, pipeline
// schedule and split) plus what the planner also chooses or must know:
// recomputation, precision and the gradient bucket size. What the memory
// and time models take and the search enumerates.
#pragma once

#include <cstdint>
#include <string>

#include "ht/nn/model_spec.h"
#include "ht/parallel/layout.h"
#include "ht/precision/policy.h"

namespace ht::plan {

struct LayoutChoice : parallel::Layout {
  nn::Recompute recompute = nn::Recompute::kNone;
  precision::Policy precision;
  std::int64_t bucket_bytes = std::int64_t(25) << 20;

  /// Layout::str() and the recomputation when there is one:
  /// "tp2 pp2 dp4 zero1/4 mb2x4 1f1b selective".
  std::string str() const;
};

}  // namespace ht::plan
