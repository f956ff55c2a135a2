// Private: how the communication thread waits for MPI requests it polls.
//
// The thread polls with MPI_Test so that it can notice an abort and answer
// status queries; it must neither add latency to small messages nor burn a
// core that another rank needs (tests run 4 ranks on 2 cores). Policy, reset
// whenever something completes or starts:
//   1. spin: MPI_Test back to back for kSpin (a small collective between
//      ranks of one host completes in a few microseconds);
//   2. yield: MPI_Test then sched_yield until the expected transfer time has
//      passed (payload / kAssumedBandwidth, at most kMaxYield), so a large
//      transfer keeps being progressed (Open MPI advances nonblocking
//      collectives only inside MPI calls) while other runnable threads of the
//      core still get it;
//   3. sleep: 10 us, doubling up to 1 ms — the peer is late, and a
//      millisecond of extra latency is nothing next to a late peer.
// An idle thread (nothing in flight) follows the same policy with no yield
// phase and sleeps growing to 5 ms: it spins for kSpin after its last
// operation completed because in a loop of small collectives the next call
// arrives within microseconds, and a sleeping thread takes tens of
// microseconds to wake on a busy machine. Sleeps are condition-variable
// waits, so an enqueue ends them at once.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace ht::comm::detail {

class PollBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Action { kSpin, kYield, kSleep };

  static constexpr auto kSpin = std::chrono::microseconds(50);
  static constexpr auto kMaxYield = std::chrono::milliseconds(100);
  static constexpr double kAssumedBandwidthBytesPerUs = 2000.0;  // 2 GB/s: slow for shared memory, on purpose
  static constexpr auto kFirstSleep = std::chrono::microseconds(10);
  static constexpr auto kMaxSleep = std::chrono::milliseconds(1);

  static constexpr auto kMaxIdleSleep = std::chrono::milliseconds(5);

  /// Restarts the policy; `payload_bytes` is the size of the largest transfer in flight.
  void reset(std::size_t payload_bytes) {
    start_ = Clock::now();
    const auto transfer = std::chrono::microseconds(std::int64_t(double(payload_bytes) / kAssumedBandwidthBytesPerUs));
    yield_for_ = std::min<std::chrono::microseconds>(kSpin + transfer, kMaxYield);
    sleep_ = kFirstSleep;
    max_sleep_ = kMaxSleep;
  }
  /// Restarts the policy for an idle thread.
  void reset_idle() {
    start_ = Clock::now();
    yield_for_ = kSpin;
    sleep_ = kFirstSleep;
    max_sleep_ = kMaxIdleSleep;
  }

  /// What to do before the next poll; for kSleep, `sleep()` says how long.
  Action next() {
    const auto elapsed = Clock::now() - start_;
    if (elapsed < kSpin) return Action::kSpin;
    if (elapsed < yield_for_) return Action::kYield;
    return Action::kSleep;
  }
  /// The next sleep, then doubles it (up to kMaxSleep, or kMaxIdleSleep when idle).
  std::chrono::microseconds sleep() {
    const auto d = sleep_;
    sleep_ = std::min<std::chrono::microseconds>(sleep_ * 2, max_sleep_);
    return d;
  }

 private:
  Clock::time_point start_ = Clock::now();
  std::chrono::microseconds yield_for_ = kSpin;
  std::chrono::microseconds sleep_ = kFirstSleep;
  std::chrono::microseconds max_sleep_ = kMaxSleep;
};

}  // namespace ht::comm::detail
