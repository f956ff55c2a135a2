// Private: turns MPI return codes into ht::CommError at the call site.
#pragma once

#include <mpi.h>

#include "ht/core/error.h"

namespace ht::detail {
[[noreturn]] void throw_mpi_error(int code, const char* expr, std::source_location where);
}

#define HT_MPI_CHECK(expr)                                                                         \
  do {                                                                                             \
    int ht_rc_ = (expr);                                                                           \
    if (ht_rc_ != MPI_SUCCESS)                                                                     \
      ::ht::detail::throw_mpi_error(ht_rc_, #expr, std::source_location::current());               \
  } while (0)
