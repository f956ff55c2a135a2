// ht::comm::make_routing_communicator: one group of ranks over two
// communicators, a host plane and a device plane.
//
// On CUDA devices a training job needs both: MPI for the host-side control
// traffic (agreeing on a checkpoint, comparing replica checksums, a rank
// waiting for rank 0's verdict) and NCCL for the tensors that live on the
// GPU (gradients, ZeRO gathers and scatters, tensor-parallel reductions,
// pipeline activations). The routing communicator lets every caller keep one
// Communicator per group: each call goes to the plane that moves its
// tensors, host tensors to `host` and CUDA tensors to `device`, so no host
// copy is made and no caller tests which backend it holds.
//
// Both planes span the same ranks in the same order (make_nccl_world numbers
// NCCL ranks as the host world's; split() splits both with the same colour
// and key). Each plane keeps its own order of calls; since every rank makes
// the same calls in the same order, each plane sees the same sequence on
// every rank, as the Communicator contract requires.
//
// - Tensors of one call must all be host tensors or all CUDA tensors
//   (kDeviceMismatch otherwise, naming both).
// - barrier() synchronises the hosts (the host plane).
// - device() is the device plane's: where data-plane tensors live.
// - split() splits the host plane, then the device plane; a negative colour
//   joins no group on either (nullptr).
// - finalize() finalises the device plane, then the host plane; abort()
//   aborts both. An aborted or failed plane fails its calls as it would
//   alone (CommError, CommTimeout), whichever plane the deadline hit.
#pragma once

#include <memory>

#include "ht/comm/communicator.h"

namespace ht::comm {

/// Takes over `host` and `device`, which must have the same size and rank
/// (kInvalidArgument otherwise, naming both). The group's name is the host
/// plane's.
std::unique_ptr<Communicator> make_routing_communicator(std::unique_ptr<Communicator> host,
                                                        std::unique_ptr<Communicator> device);

}  // namespace ht::comm
