// Private: EngineOptions::trace_path at work. Records the chosen steps
// (core/trace.h) and writes this rank's Chrome trace-event file: the
// engine's phases on row "step", forward, backward and pipeline waits per
// micro-batch on row "compute", and each collective or transfer the flight
// recorder saw on a row per communicator ("comm <group>": queued, then
// running). Times are microseconds from the end of a world barrier taken
// before the first traced step, the same instant on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/trace.h"
#include "ht/comm/device_mesh.h"

namespace ht::train {

class TraceSession {
 public:
  TraceSession(std::string path, std::int64_t first, std::int64_t last, comm::DeviceMesh& mesh);
  /// Writes what was recorded when the run stopped inside the range.
  ~TraceSession();
  TraceSession(const TraceSession&) = delete;
  TraceSession& operator=(const TraceSession&) = delete;

  /// Before step `step`'s work: starts recording at the first traced step
  /// (collective: every rank traces the same steps).
  void begin_step(std::int64_t step);
  /// The engine's phase (its progress report).
  void phase(const char* phase) { phases_.enter(phase); }
  /// After step `step`: writes the file after the last traced step, or
  /// after the run's last step (`final`) inside the range.
  void end_step(std::int64_t step, bool final);

  /// This rank's file: `path` with ".rank<R>" before its extension.
  static std::string rank_path(const std::string& path, int rank);

 private:
  void write();
  void write_or_warn();

  std::string path_;
  std::int64_t first_, last_;
  comm::DeviceMesh& mesh_;
  trace::PhaseRow phases_;
  bool recording_ = false;
  std::int64_t sync_us_ = 0, first_traced_ = 0, last_traced_ = 0;
};

}  // namespace ht::train
