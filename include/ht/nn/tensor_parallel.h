// ht::nn::TensorParallel: the tensor-parallel group a layer splits over, and
// the two conversions between a full tensor and one rank's part of it.
//
// Megatron-style layers hold a slice of each split weight: a column-parallel
// Linear holds rows [r*n/tp, (r+1)*n/tp) of its (out, in) weight, a
// row-parallel one columns of it, a vocab-parallel embedding rows of the
// vocabulary. A weight made of `parts` stacked pieces (GPT-2's packed
// [Q | K | V] projection, parts = 3) is split piece by piece, so that each
// rank holds whole heads of Q, K and V. ParamLayout records which; the
// functions below turn a full tensor into a rank's part and parts back into
// the full tensor, so initialisation, checkpoints and tests never depend on
// how a layer was split.
#pragma once

#include <vector>

#include "ht/comm/communicator.h"
#include "ht/nn/parameter.h"

namespace ht::nn {

struct TensorParallel {
  /// The tensor-parallel group; null: no tensor parallelism (a group of one).
  comm::Communicator* group = nullptr;

  int rank() const { return group ? group->rank() : 0; }
  int size() const { return group ? group->size() : 1; }
  /// t = sum of t over the group, in place; waits. Nothing for a group of one.
  void all_reduce_sum(Tensor& t) const;
};

/// The shape of one rank's part of a tensor of shape `full`; throws kConfig
/// when the split dimension does not divide into parts x tp.
Shape tp_part_shape(const Shape& full, const ParamLayout& layout);
/// The part of `full` (host or device) that rank `layout.tp_rank` of
/// `layout.tp_size` holds; a copy unless the tensor is replicated.
Tensor tp_part_of(const Tensor& full, const ParamLayout& layout);
/// The full tensor from every rank's part (index = tp rank), on the parts' device.
Tensor tp_assemble(const std::vector<Tensor>& parts, const ParamLayout& layout);

}  // namespace ht::nn
