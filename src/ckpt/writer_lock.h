// ht::ckpt::detail::WriterLock: one writing run per checkpoint directory, by
// an flock on <dir>/.writer.lock that names its holder.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace ht::ckpt::detail {

inline constexpr const char* kWriterLockName = ".writer.lock";

/// Who holds a directory's writer lock, as its lock file says (fields empty
/// or 0 where the file does not say: a holder that has not written it yet).
struct WriterLockHolder {
  std::string host;
  long pid = 0;
  std::string run_dir;  // empty when the holder did not know it
  std::string since;    // UTC, ISO 8601
};

/// Reads <dir>/.writer.lock. Never throws; readers take no lock.
WriterLockHolder read_writer_lock(const std::string& dir);

/// "checkpoint directory 'X' is being written by pid P on host H (run dir R)
/// since T: stop that run or give another --ckpt-dir".
std::string writer_lock_message(const std::string& dir, const WriterLockHolder& holder);

/// An exclusive flock(2) on <dir>/.writer.lock, held until destruction. The
/// kernel releases it when the holding process dies, however it dies (kill
/// -9 included), so a relaunch after a crash finds it free. The descriptor
/// is close-on-exec: a child program never keeps it.
class WriterLock {
 public:
  /// Takes the lock without waiting and writes this process as its holder
  /// (host, pid, `run_dir`, now). nullopt when another process (or another
  /// WriterLock of this process) holds it. Throws kIo when the lock file
  /// cannot be created.
  static std::optional<WriterLock> try_acquire(const std::string& dir, const std::string& run_dir);

  WriterLock(WriterLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  WriterLock& operator=(WriterLock&& other) noexcept;
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;
  ~WriterLock();

 private:
  explicit WriterLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace ht::ckpt::detail
