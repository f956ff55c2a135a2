// The NCCL entry points of a build without NCCL: they say so, so that callers
// need no #if around them.
#include "ht/comm/nccl_communicator.h"

namespace ht::comm {

std::unique_ptr<Communicator> make_nccl_world(Communicator& host_world, int device, const CommOptions&) {
  throw Error(ErrorKind::kNotSupported,
              fmt::format("make_nccl_world over '{}' (device {}): this build of hypertrain has no NCCL backend; "
                          "rebuild with the CUDA toolkit and NCCL installed (-DHT_WITH_CUDA=ON), or use the MPI "
                          "communicator with host tensors",
                          host_world.name(), device));
}

bool nccl_compiled() { return false; }

std::string nccl_version() { return {}; }

}  // namespace ht::comm
