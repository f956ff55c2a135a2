// The process-wide trace recorder and its spans.
#include "core/trace.h"

#include "core/clock.h"

namespace ht::trace {

Recorder& Recorder::global() {
  static Recorder r;
  return r;
}

void Recorder::start(std::int64_t step) {
  std::lock_guard lock(mu_);
  events_.clear();
  step_ = step;
  on_ = true;
}

std::vector<Event> Recorder::stop() {
  std::lock_guard lock(mu_);
  on_ = false;
  return std::move(events_);
}

void Recorder::add(Event e) {
  std::lock_guard lock(mu_);
  if (on_) events_.push_back(std::move(e));
}

Span::Span(const char* row, const char* cat, const char* name, int micro_batch, int chunk)
    : row_(row), cat_(cat), name_(name), micro_batch_(micro_batch), chunk_(chunk) {
  if (on()) begin_us_ = epoch_us();
}

Span::~Span() {
  if (begin_us_ < 0) return;
  Recorder& r = Recorder::global();
  r.add({name_, cat_, row_, begin_us_, epoch_us(), micro_batch_, r.step(), chunk_});
}

void PhaseRow::enter(const char* phase) {
  Recorder& r = Recorder::global();
  const std::int64_t t = epoch_us();
  if (phase_ && r.on()) r.add({phase_, "phase", "step", begin_us_, t, -1, r.step()});
  phase_ = phase;
  begin_us_ = t;
}

}  // namespace ht::trace
