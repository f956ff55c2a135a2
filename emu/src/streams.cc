// The emulated device's streams and events. Each stream is a host thread
// running its work in order, so work on different streams overlaps as on a
// GPU, and a missing wait between streams shows as a wrong or flaky result.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "internal.h"

struct CUstream_st {
  explicit CUstream_st(bool blocking_) : blocking(blocking_), worker([this] { run(); }) {}
  ~CUstream_st() {
    {
      std::lock_guard lock(m);
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }

  void run() {
    std::unique_lock lock(m);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      std::function<void()> work = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      if (ht::emu::fault_injected("device-lost"))  // the device fell off the bus: nothing it was given happens
        ht::emu::fail_device(cudaErrorLaunchFailure, "injected device failure (HT_EMU_FAULTS=device-lost)");
      else
        work();
      lock.lock();
      ++completed;
      cv.notify_all();
    }
  }

  /// Blocks until the stream has run its first `ticket` pieces of work.
  void wait_for(std::uint64_t ticket) {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return completed >= ticket; });
  }

  const bool blocking;  // synchronises with the legacy default stream
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  std::uint64_t enqueued = 0, completed = 0;
  bool stop = false;
  std::thread worker;  // last: it starts running at construction
};

/// What an event's records and waits share: a wait enqueued before the
/// event is destroyed still ends when the record it captured is reached.
struct EventState {
  std::mutex m;
  std::condition_variable cv;
  std::uint64_t recorded = 0, reached = 0;  // records made, and how many of them the stream has reached
  std::chrono::steady_clock::time_point when{};
};

struct CUevent_st {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
  bool timing = true;
};

namespace ht::emu {
namespace {

std::mutex g_streams_mutex;
std::set<CUstream_st*>& g_streams = *new std::set<CUstream_st*>;  // every live stream, the legacy one included; never destroyed (streams' threads may outlive static objects)

CUstream_st* legacy() {
  static CUstream_st* const stream = [] {
    auto* s = new CUstream_st(true);  // never destroyed: work may be enqueued until exit
    std::lock_guard lock(g_streams_mutex);
    g_streams.insert(s);
    return s;
  }();
  return stream;
}

}  // namespace

CUstream_st* resolve(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return legacy();
  std::lock_guard lock(g_streams_mutex);
  return g_streams.count(stream) ? stream : nullptr;
}

void enqueue(CUstream_st* stream, std::function<void()> work) {
  // The legacy default stream waits for the blocking streams' earlier work,
  // and they for its.
  std::vector<std::pair<CUstream_st*, std::uint64_t>> after;
  CUstream_st* const legacy_stream = legacy();
  {
    std::lock_guard lock(g_streams_mutex);
    for (CUstream_st* s : g_streams) {
      if (s == stream || !s->blocking || !stream->blocking) continue;
      if (s != legacy_stream && stream != legacy_stream) continue;
      std::lock_guard slock(s->m);
      if (s->enqueued > s->completed) after.emplace_back(s, s->enqueued);
    }
  }
  std::function<void()> task = after.empty() ? std::move(work) : [after, w = std::move(work)] {
    for (const auto& [s, ticket] : after) s->wait_for(ticket);
    w();
  };
  {
    std::lock_guard lock(stream->m);
    stream->queue.push_back(std::move(task));
    ++stream->enqueued;
  }
  stream->cv.notify_all();
}

cudaError_t enqueue_work(CUstream_st* stream, std::function<void()> work) {
  CUstream_st* s = resolve(stream);
  if (!s) return set_last_error(cudaErrorInvalidResourceHandle);
  if (sticky_error() != cudaSuccess) return sticky_error();
  enqueue(s, std::move(work));
  return cudaSuccess;
}

void drain(CUstream_st* stream) {
  std::uint64_t ticket;
  {
    std::lock_guard lock(stream->m);
    ticket = stream->enqueued;
  }
  stream->wait_for(ticket);
}

void drain_all() {
  std::vector<CUstream_st*> streams;
  {
    std::lock_guard lock(g_streams_mutex);
    streams.assign(g_streams.begin(), g_streams.end());
  }
  for (CUstream_st* s : streams) drain(s);
}

}  // namespace ht::emu

using namespace ht::emu;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream) return set_last_error(cudaErrorInvalidValue);
  auto* s = new CUstream_st((flags & cudaStreamNonBlocking) == 0);
  std::lock_guard lock(g_streams_mutex);
  g_streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s || s == resolve(nullptr)) return set_last_error(cudaErrorInvalidResourceHandle);
  drain(s);  // the runtime lets pending work finish
  {
    std::lock_guard lock(g_streams_mutex);
    g_streams.erase(s);
  }
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return set_last_error(cudaErrorInvalidResourceHandle);
  drain(s);
  return result(cudaSuccess);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return set_last_error(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(s->m);
  if (sticky_error() != cudaSuccess) return sticky_error();
  return s->completed >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (!event) return set_last_error(cudaErrorInvalidValue);
  *event = new CUevent_st;
  (*event)->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return set_last_error(cudaErrorInvalidResourceHandle);
  delete event;  // records and waits still enqueued hold its state
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!event || !s) return set_last_error(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  std::uint64_t record;
  {
    std::lock_guard lock(e->m);
    record = ++e->recorded;
  }
  enqueue(s, [e, record] {
    std::lock_guard lock(e->m);
    e->reached = std::max(e->reached, record);
    e->when = std::chrono::steady_clock::now();
    e->cv.notify_all();
  });
  return result(cudaSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return set_last_error(cudaErrorInvalidResourceHandle);
  EventState& e = *event->state;
  std::lock_guard lock(e.m);
  if (sticky_error() != cudaSuccess) return sticky_error();
  return e.reached >= e.recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return set_last_error(cudaErrorInvalidResourceHandle);
  EventState& e = *event->state;
  std::unique_lock lock(e.m);
  const std::uint64_t record = e.recorded;
  e.cv.wait(lock, [&] { return e.reached >= record; });
  return result(cudaSuccess);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  CUstream_st* s = resolve(stream);
  if (!event || !s) return set_last_error(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  std::uint64_t record;
  {
    std::lock_guard lock(e->m);
    record = e->recorded;  // the work captured by the latest record, as the runtime does
  }
  if (record == 0) return result(cudaSuccess);  // never recorded: nothing to wait for
  enqueue(s, [e, record] {
    std::unique_lock lock(e->m);
    e->cv.wait(lock, [&] { return e->reached >= record; });
  });
  return result(cudaSuccess);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end) return set_last_error(cudaErrorInvalidValue);
  if (!start->timing || !end->timing) return set_last_error(cudaErrorInvalidResourceHandle);
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess)
    return set_last_error(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->state->when - start->state->when).count();
  return cudaSuccess;
}
