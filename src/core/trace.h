// Private: this rank's timeline of chosen steps (times: epoch_us(), the
// flight recorder's clock, so spans and collectives share one axis). Spans
// (forward and backward per micro-batch, the engine's phases, pipeline
// waits) are recorded only while a trace is on; train/trace_session.cc
// writes them, with the flight recorder's collectives, as Chrome
// trace-event JSON.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ht::trace {

/// One finished span: [begin_us, end_us] on the system clock, on `row`
/// (Chrome's thread: "step", "compute"), in category `cat` ("phase",
/// "compute", "wait").
struct Event {
  std::string name, cat, row;
  std::int64_t begin_us = 0, end_us = 0;
  int micro_batch = -1;  // -1: not about one micro-batch
  std::int64_t step = 0;
  int chunk = -1;  // the model chunk of an interleaved pipeline; -1: none
};

/// The process-wide recorder. Off until start(); on(), which every span
/// asks, is one relaxed atomic load, so tracing costs nothing when off.
class Recorder {
 public:
  static Recorder& global();

  bool on() const { return on_.load(std::memory_order_relaxed); }
  /// Clears what was recorded and records from now on; `step` tags the events.
  void start(std::int64_t step);
  void set_step(std::int64_t step) { step_ = step; }
  /// Stops recording and returns what was recorded, oldest first.
  std::vector<Event> stop();
  void add(Event e);
  std::int64_t step() const { return step_; }

 private:
  std::atomic<bool> on_{false};
  std::atomic<std::int64_t> step_{0};
  std::mutex mu_;
  std::vector<Event> events_;
};

inline bool on() { return Recorder::global().on(); }

/// A span from construction to destruction, recorded when tracing is on.
/// `row`, `cat` and `name` must outlive the span (string literals).
class Span {
 public:
  Span(const char* row, const char* cat, const char* name, int micro_batch = -1, int chunk = -1);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char *row_, *cat_, *name_;
  int micro_batch_, chunk_;
  std::int64_t begin_us_ = -1;  // -1: tracing was off at the start
};

/// The engine's phases ("data", "forward-backward", ...) as consecutive
/// spans on the "step" row: each call ends the previous phase's span.
class PhaseRow {
 public:
  /// Ends the open phase (if any) and, unless `phase` is null, opens `phase`.
  void enter(const char* phase);

 private:
  const char* phase_ = nullptr;
  std::int64_t begin_us_ = 0;
};

}  // namespace ht::trace
