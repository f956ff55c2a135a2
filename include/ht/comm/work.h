// ht::comm::Work: the handle of one enqueued communication operation.
//
// Contract (as c10d's Work): a collective call returns at once with a Work;
// the operation runs on the communicator's own thread (MPI) or stream
// (NCCL), overlapping the caller's compute. The output tensor must not be
// read, and the input not written, until wait() returns.
//
// wait() blocks until the operation has completed or its deadline (enqueue
// time + the communicator's timeout) has passed. On a deadline it throws
// CommTimeout naming the operation, group, sequence number, element count
// and which ranks did and did not arrive; on a failure it rethrows the
// CommError the communication thread stored. After either, the communicator
// is aborted: every later call throws. Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ht/core/error.h"

namespace ht::comm {

class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until done; throws CommTimeout or CommError as above.
  virtual void wait() = 0;
  /// Non-blocking: true once done; throws like wait() if it failed or the
  /// deadline has passed.
  virtual bool test() = 0;
  /// Orders the calling thread's current stream after the operation, for
  /// results that only device work reads next (a ZeRO-3 gather feeding the
  /// next layer): on a device backend (NCCL) the stream waits for the
  /// operation's event and the host goes on at once, so it keeps queueing
  /// kernels; a failure or deadline seen by then throws as wait() does, and
  /// a later one is reported by the communicator's next wait, test or call
  /// (a rank stuck there is the watchdog's: see resilience/rank_guard.h).
  /// On host backends the same as wait().
  virtual void stream_wait() { wait(); }
};
using WorkPtr = std::shared_ptr<Work>;

/// The time this process's threads have spent blocked in Work::wait() on
/// operations not yet done, over every communicator since the process
/// began: the communication its compute did not hide. Its heartbeats carry
/// it ("comm_wait_ms"), and htrun reports it per host. A device backend's
/// stream_wait() blocks the device, not the host, and is not counted.
std::int64_t blocked_wait_ns();
namespace detail {
void add_blocked_wait(std::chrono::steady_clock::duration blocked);
}  // namespace detail

/// A collective that missed its deadline. Recoverable by the resilience layer
/// (restart from a checkpoint), not by retrying the call.
class CommTimeout : public CommError {
 public:
  CommTimeout(const std::string& message, std::vector<int> arrived, std::vector<int> missing,
              std::vector<int> suspects = {}, std::source_location where = std::source_location::current())
      : CommError(ErrorKind::kComm, message, where),
        arrived_(std::move(arrived)),
        missing_(std::move(missing)),
        suspects_(std::move(suspects)) {}
  /// Ranks (in the communicator) that entered the operation, and those that
  /// did not or could not be asked.
  const std::vector<int>& arrived() const { return arrived_; }
  const std::vector<int>& missing() const { return missing_; }
  /// World ranks that most likely caused it: of the missing ones, those that
  /// did not answer at all (dead, hung or cut off), else all the missing
  /// ones; what the rank's exit record blames (resilience/rank_guard.h).
  const std::vector<int>& suspects() const { return suspects_; }

 private:
  std::vector<int> arrived_, missing_, suspects_;
};

}  // namespace ht::comm
