// Error conversion for NCCL.
#include "core/nccl_check.h"

namespace ht::detail {

void throw_nccl_error(ncclResult_t code, const char* expr, std::source_location where) {
  throw CommError(ErrorKind::kComm,
                  fmt::format("{} failed: {} (last NCCL message: {})", expr, ncclGetErrorString(code),
                              ncclGetLastError(nullptr)),
                  where, fmt::format("ncclResult {}", int(code)));
}

}  // namespace ht::detail
