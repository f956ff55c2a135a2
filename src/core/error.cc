// ht::Error: message decoration with rank, host and source location.
#include "ht/core/error.h"

#include <unistd.h>

#include <mutex>

namespace ht {
namespace {

struct Identity {
  std::mutex mu;
  int rank = -1;
  std::string host;
};

Identity& identity() {
  static Identity id;
  return id;
}

std::string local_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string decorate(ErrorKind kind, const std::string& message, const std::source_location& where,
                     const std::string& native) {
  Identity& id = identity();
  int rank;
  std::string host;
  {
    std::lock_guard lock(id.mu);
    rank = id.rank;
    host = id.host.empty() ? local_host() : id.host;
  }
  std::string file = where.file_name();
  if (auto pos = file.rfind("/src/"); pos != std::string::npos) file = file.substr(pos + 1);
  if (auto pos = file.rfind("/kernels/"); pos != std::string::npos) file = file.substr(pos + 1);
  std::string out = fmt::format("{}: {}", error_kind_name(kind), message);
  if (!native.empty()) out += fmt::format(" [{}]", native);
  out += rank >= 0 ? fmt::format(" (rank {} on {}, {}:{})", rank, host, file, where.line())
                   : fmt::format(" ({}, {}:{})", host, file, where.line());
  return out;
}

}  // namespace

std::string_view error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kShapeMismatch: return "shape mismatch";
    case ErrorKind::kDTypeMismatch: return "dtype mismatch";
    case ErrorKind::kDeviceMismatch: return "device mismatch";
    case ErrorKind::kOutOfRange: return "out of range";
    case ErrorKind::kOutOfMemory: return "out of memory";
    case ErrorKind::kNotSupported: return "not supported";
    case ErrorKind::kConfig: return "configuration error";
    case ErrorKind::kIo: return "I/O error";
    case ErrorKind::kComm: return "communication error";
    case ErrorKind::kCuda: return "CUDA error";
    case ErrorKind::kDivergence: return "divergence";
    case ErrorKind::kCorruption: return "data corruption";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

Error::Error(ErrorKind kind, const std::string& message, std::source_location where, std::string native)
    : std::runtime_error(decorate(kind, message, where, native)),
      kind_(kind),
      message_(message),
      native_(std::move(native)),
      where_(where) {}

void set_error_identity(int rank, std::string host) {
  Identity& id = identity();
  std::lock_guard lock(id.mu);
  id.rank = rank;
  id.host = std::move(host);
}

}  // namespace ht
