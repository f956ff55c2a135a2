// Error conversion for MPI.
#include "core/mpi_check.h"

namespace ht::detail {

void throw_mpi_error(int code, const char* expr, std::source_location where) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, text, &len);
  int error_class = 0;
  MPI_Error_class(code, &error_class);
  throw CommError(ErrorKind::kComm, fmt::format("{} failed: {}", expr, std::string(text, len)), where,
                  fmt::format("MPI error class {}", error_class));
}

}  // namespace ht::detail
