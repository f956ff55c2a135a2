// ht::comm::SelfCommunicator: the group of one process, without MPI.
//
// A single-process run uses the same parallel code paths as a distributed
// one (a mesh of size 1), and needs no MPI for it: every collective over one
// rank is a copy (or nothing), done at once on the caller's thread. Point-to-
// point calls have no peer and throw. Tensors may live on any device.
#pragma once

#include <memory>

#include "ht/comm/communicator.h"

namespace ht::comm {

std::unique_ptr<Communicator> make_self_communicator(const std::string& name = "self");

}  // namespace ht::comm
