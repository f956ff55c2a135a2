// Private: turns NCCL return codes into ht::CommError at the call site.
#pragma once

#include <nccl.h>

#include "ht/core/error.h"

namespace ht::detail {
[[noreturn]] void throw_nccl_error(ncclResult_t code, const char* expr, std::source_location where);
}

#define HT_NCCL_CHECK(expr)                                                                        \
  do {                                                                                             \
    ncclResult_t ht_res_ = (expr);                                                                 \
    if (ht_res_ != ncclSuccess && ht_res_ != ncclInProgress)                                       \
      ::ht::detail::throw_nccl_error(ht_res_, #expr, std::source_location::current());             \
  } while (0)
