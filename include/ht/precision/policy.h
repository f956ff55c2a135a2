// ht::precision::Policy: which dtype each kind of tensor is kept in.
//
// Mixed precision keeps two copies of every weight: the f32 master (this
// rank's shard, updated by the optimizer along with its f32 state) and a
// working copy in the compute dtype that forward and backward read.
// Activations and gradients are in the compute dtype; gradients are converted
// to the reduction dtype for their data-parallel reduction and the
// optimizer.
#pragma once

#include <string>

#include "ht/core/dtype.h"

namespace ht::precision {

struct Policy {
  /// Working copies of parameters, activations and gradients.
  DType compute = DType::kF32;
  /// Gradient reduction over dp, and the gradients the optimizer reads.
  DType reduce = DType::kF32;

  bool mixed() const { return compute != DType::kF32; }
  /// Whether gradients need loss scaling to survive: f16's range (6e-8 to
  /// 65504) loses small gradients; bf16 has f32's range.
  bool needs_loss_scaling() const { return compute == DType::kF16; }
};

/// "fp32", "fp16" or "bf16" (also "f32", "f16"); throws kConfig naming the choices.
Policy parse_policy(const std::string& precision);
/// "fp32", "fp16", "bf16".
std::string policy_name(const Policy& p);

}  // namespace ht::precision
