// The one error hierarchy of hypertrain. Every failure is an ht::Error with a
// kind, the rank and host it happened on, where in the source it was raised,
// and, for a failed library call, the native code and its name.
//
// Subclasses exist only where callers catch differently:
//   CommError — a peer failed, a collective timed out or was aborted; the
//               resilience layer recovers from these.
//   IoError   — filesystem or HDF5 failure.
#pragma once

#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>

namespace ht {

enum class ErrorKind {
  kInvalidArgument,  // a value the caller passed is wrong
  kShapeMismatch,
  kDTypeMismatch,
  kDeviceMismatch,
  kOutOfRange,
  kOutOfMemory,
  kNotSupported,  // valid, but this build or device cannot do it
  kConfig,        // a configuration (flags, environment, model config) is wrong
  kIo,
  kComm,
  kCuda,
  kDivergence,  // training diverged: the loss stayed non-finite
  kCorruption,  // silent data corruption: replicas that must agree do not
  kInternal,    // a bug in hypertrain
};

std::string_view error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  /// `message` says what was wrong, with the values involved, and what to do.
  /// `native` is the failing library's code and name ("cudaErrorMemoryAllocation (2)"), if any.
  Error(ErrorKind kind, const std::string& message,
        std::source_location where = std::source_location::current(), std::string native = {});

  ErrorKind kind() const noexcept { return kind_; }
  /// The message alone, without the rank/host/location decoration of what().
  const std::string& message() const noexcept { return message_; }
  const std::string& native() const noexcept { return native_; }
  const std::source_location& where() const noexcept { return where_; }

 private:
  ErrorKind kind_;
  std::string message_;
  std::string native_;
  std::source_location where_;
};

// Constructors are spelled out rather than inherited (`using Error::Error`):
// nvcc 13's front end crashes on an inherited constructor whose default
// argument is std::source_location::current().
class CommError : public Error {
 public:
  CommError(ErrorKind kind, const std::string& message, std::source_location where = std::source_location::current(),
            std::string native = {})
      : Error(kind, message, where, std::move(native)) {}
};

class IoError : public Error {
 public:
  IoError(ErrorKind kind, const std::string& message, std::source_location where = std::source_location::current(),
          std::string native = {})
      : Error(kind, message, where, std::move(native)) {}
};

/// Sets the rank and host that every later error names (the comm layer calls
/// this once the process knows its rank). Thread-safe.
void set_error_identity(int rank, std::string host);

}  // namespace ht

/// Throws ht::Error of `kind` with a fmt-formatted message unless `cond` holds.
#define HT_CHECK(cond, kind, ...)                                          \
  do {                                                                     \
    if (!(cond)) throw ::ht::Error((kind), ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define HT_CHECK_ARG(cond, ...) HT_CHECK(cond, ::ht::ErrorKind::kInvalidArgument, __VA_ARGS__)
