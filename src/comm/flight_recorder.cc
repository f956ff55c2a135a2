// FlightRecorder: a fixed ring of the last N communication operations, and
// its JSON dump for post-mortem merging across ranks.
#include "ht/comm/flight_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/flight_entry_json.h"
#include "core/clock.h"
#include "core/files.h"
#include "ht/core/error.h"

namespace ht::comm {
namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

std::string op_state_name(OpState s) {
  switch (s) {
    case OpState::kEnqueued: return "enqueued";
    case OpState::kStarted: return "started";
    case OpState::kCompleted: return "completed";
    case OpState::kFailed: return "failed";
    case OpState::kTimedOut: return "timed_out";
  }
  return "?";
}

std::int64_t now_us() { return epoch_us(); }

int FlightRecorder::capacity() const { return int(ring_.size()); }

FlightRecorder::FlightRecorder(int capacity) {
  HT_CHECK_ARG(capacity > 0, "flight recorder capacity must be positive, got {}", capacity);
  ring_.resize(std::size_t(capacity));
}

// Ids are handed out consecutively; id lives in slot id % capacity until
// `capacity` newer records have been made, which is how update() knows
// whether its entry is still there without storing the id in the entry.
std::uint64_t FlightRecorder::record(const std::string& op, const std::string& group, std::uint64_t seq,
                                     std::int64_t count, DType dtype, int peer) {
  const std::int64_t t = now_us();
  std::lock_guard lock(mu_);
  const std::uint64_t id = next_id_++;
  FlightEntry& e = ring_[id % ring_.size()];
  e = FlightEntry{};
  e.seq = seq;
  detail::copy_field(e.op, op);
  detail::copy_field(e.group, group);
  e.count = count;
  e.dtype = dtype;
  e.peer = peer;
  e.state = OpState::kEnqueued;
  e.enqueue_us = t;
  return id;
}

void FlightRecorder::update(std::uint64_t id, OpState state) {
  const std::int64_t t = now_us();
  std::lock_guard lock(mu_);
  if (id >= next_id_ || next_id_ - id > ring_.size()) return;  // overwritten (or never recorded)
  FlightEntry& e = ring_[id % ring_.size()];
  e.state = state;
  if (state == OpState::kStarted)
    e.start_us = t;
  else if (state != OpState::kEnqueued)
    e.end_us = t;
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard lock(mu_);
  const std::uint64_t n = std::min<std::uint64_t>(next_id_, ring_.size());
  std::vector<FlightEntry> out;
  out.reserve(n);
  for (std::uint64_t id = next_id_ - n; id < next_id_; ++id) out.push_back(ring_[id % ring_.size()]);
  return out;
}

std::string FlightRecorder::dump(const std::string& dir, int rank, const std::string& reason) const {
  nlohmann::ordered_json entries_json = nlohmann::ordered_json::array();
  for (const FlightEntry& e : entries()) {
    entries_json.push_back(detail::flight_entry_json(e));
  }
  // Ordered: the header fields first, the entries last, as a reader expects.
  const nlohmann::ordered_json doc{{"rank", rank},     {"host", host_name()}, {"pid", int(getpid())},
                                   {"reason", reason}, {"dump_us", now_us()}, {"entries", std::move(entries_json)}};

  namespace fs = std::filesystem;
  const fs::path folder = dir.empty() ? fs::path(".") : fs::path(dir);
  std::error_code ec = ht::detail::make_directories(folder);
  if (ec)
    throw IoError(ErrorKind::kIo, fmt::format("cannot create flight-recorder directory '{}': {}", folder.string(),
                                              ec.message()));
  const fs::path path = folder / fmt::format("flight_recorder_rank{}.json", rank);
  const fs::path tmp = folder / fmt::format(".flight_recorder_rank{}.json.tmp{}", rank, getpid());
  ht::detail::write_file(tmp.string(), doc.dump(1) + "\n", /*sync=*/false, "flight-recorder dump");
  fs::rename(tmp, path, ec);
  if (ec)
    throw IoError(ErrorKind::kIo,
                  fmt::format("cannot rename '{}' to '{}': {}", tmp.string(), path.string(), ec.message()));
  return path.string();
}

FlightRecorder& FlightRecorder::global() {
  static FlightRecorder recorder(1000);
  return recorder;
}

}  // namespace ht::comm
