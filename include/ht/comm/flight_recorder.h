// ht::comm::FlightRecorder: the last N communication operations of this
// process (operation, group, sequence number, count, dtype, state, times), in
// a ring buffer, for post-mortem diagnosis of hangs.
//
// Recording is cheap (a mutex and a few stores, no allocation after
// construction). dump() writes one JSON file per rank; the tool
// `ht-flight-recorder` merges the dumps of all ranks and names the ranks that
// fell behind and the operation they were stuck in. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ht/core/dtype.h"

namespace ht::comm {

enum class OpState : std::uint8_t { kEnqueued, kStarted, kCompleted, kFailed, kTimedOut };
std::string op_state_name(OpState s);

struct FlightEntry {
  std::uint64_t seq = 0;     // per-communicator sequence number, from 1
  char op[24] = {};          // "all_reduce"
  char group[40] = {};       // communicator name
  std::int64_t count = 0;    // elements per rank
  DType dtype = DType::kF32;
  int peer = -1;             // root or peer, where there is one
  OpState state = OpState::kEnqueued;
  std::int64_t enqueue_us = 0, start_us = 0, end_us = 0;  // microseconds since the epoch; 0: not yet
};

class FlightRecorder {
 public:
  explicit FlightRecorder(int capacity = 1000);

  /// Records a new operation; returns its slot id for updates.
  std::uint64_t record(const std::string& op, const std::string& group, std::uint64_t seq, std::int64_t count,
                       DType dtype, int peer);
  /// Updates the state (and the start or end time) of a recorded operation;
  /// a no-op if it has been overwritten since.
  void update(std::uint64_t id, OpState state);
  /// The entries still held, oldest first.
  std::vector<FlightEntry> entries() const;
  /// How many entries it holds at most (the newest).
  int capacity() const;
  /// Writes `<dir>/flight_recorder_rank<rank>.json` (replacing it) with this
  /// rank's entries, its host and `reason`; returns the path. Throws IoError.
  std::string dump(const std::string& dir, int rank, const std::string& reason) const;

  /// The process-wide recorder that every communicator records into.
  static FlightRecorder& global();

 private:
  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;
  std::uint64_t next_id_ = 0;
};

/// Microseconds since the Unix epoch (system clock, comparable across hosts
/// only as far as their clocks agree).
std::int64_t now_us();

}  // namespace ht::comm
