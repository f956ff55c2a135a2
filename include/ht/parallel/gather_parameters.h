// Consolidates one rank-layout's model into full parameters on one rank:
// for checkpoint export, sampling from a distributed model, and tests that
// compare layouts.
#pragma once

#include <map>
#include <string>

#include "ht/comm/device_mesh.h"
#include "ht/nn/model.h"
#include "ht/parallel/data_parallel.h"

namespace ht::parallel {

/// Every parameter of the full model, by name, as a host f32 tensor of its
/// full shape (the working copies' values: rounded to the compute dtype under
/// mixed precision), on world rank 0 (an empty map on the other ranks). Collective over
/// the world: ZeRO-3 units are gathered, the dp-rank-0 holders of each stage
/// and tp part send theirs to rank 0, which assembles the tp parts. The last
/// stage's copy of the tied embedding is checked against the first stage's
/// (kInternal if they differ) and not listed twice.
std::map<std::string, Tensor> gather_full_parameters(nn::Model& model, DataParallel& dp, comm::DeviceMesh& mesh);

/// Copies full parameters (as gather_full_parameters returns) into a model
/// of one process; throws kInvalidArgument naming a missing or misshapen one.
void load_full_parameters(nn::Model& model, const std::map<std::string, Tensor>& full);

}  // namespace ht::parallel
