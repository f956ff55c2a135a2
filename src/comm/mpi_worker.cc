// MpiWorker: the communication thread of one MpiCommunicator — queue, issue
// (or run a small collective on the caller's thread), poll with back-off,
// complete, split, the debug-mode signature check, and the lifecycle
// (finalize, abort, shutdown). The control channel and the
// deadline diagnosis are in mpi_diagnosis.cc.
#include "comm/mpi_worker.h"

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>
#include <map>

#include "core/mpi_check.h"
#include "ht/comm/flight_recorder.h"

namespace ht::comm::detail {
namespace {

// More than this many operations in flight at once and the thread waits for
// some to complete before issuing more (MPI implementations keep per-request
// state; nothing real needs more).
constexpr std::size_t kMaxInFlight = 64;

// Collectives up to this size may run on the caller's thread, polled for at
// most kCallerPoll (an 8-byte all_reduce between ranks of one host takes
// 1-2 us; 64 KiB about 15 us). Handing over to the thread is what costs where
// ranks outnumber cores: at 4 ranks on 2 cores the 8-byte all_reduce took
// 33-57 us with a 50 us poll and 8-12 us with 200 us.
constexpr std::size_t kCallerMaxBytes = std::size_t(64) << 10;
constexpr auto kCallerPoll = std::chrono::microseconds(200);

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.message();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown exception";
  }
}

int recorder_peer(const WorkState& w) { return w.sig.root >= 0 ? w.sig.root : w.peer; }

}  // namespace

MpiWorker::MpiWorker(MpiComm data, MpiComm control, std::string name, CommOptions options)
    : name_(std::move(name)), options_(std::move(options)), data_(std::move(data)), control_(std::move(control)) {
  HT_MPI_CHECK(MPI_Comm_rank(data_.get(), &rank_));
  HT_MPI_CHECK(MPI_Comm_size(data_.get(), &size_));
  HT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  // Each member's world rank, so that a timeout can name a culprit the
  // supervisor knows (its exit record speaks in world ranks).
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  HT_MPI_CHECK(MPI_Comm_group(data_.get(), &group));
  HT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> mine(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) mine[std::size_t(r)] = r;
  world_of_.resize(std::size_t(size_));
  HT_MPI_CHECK(MPI_Group_translate_ranks(group, size_, mine.data(), world, world_of_.data()));
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  thread_ = std::thread([this] { run(); });
}

MpiWorker::~MpiWorker() { shutdown(); }

std::string MpiWorker::broken_reason() const {
  std::lock_guard lock(mu_);
  return broken_reason_;
}

void MpiWorker::check_usable() const {
  std::lock_guard lock(mu_);
  if (finalized_ || (stop_ && !broken_))
    throw CommError(ErrorKind::kComm, fmt::format("communicator '{}' has been finalised", name_));
  if (broken_)
    throw CommError(ErrorKind::kComm, fmt::format("communicator '{}' is unusable after an earlier failure ({}); "
                                                  "create a new one (restart from a checkpoint)",
                                                  name_, broken_reason_));
}

void MpiWorker::enqueue(std::unique_ptr<Op> op) {
  WorkState& w = *op->work;
  const OpKind kind = OpKind(w.sig.kind);
  bool on_caller = false;
  std::exception_ptr start_error;
  {
    std::lock_guard lock(mu_);
    if (finalized_ || stop_ || broken_) {
      const std::string why = broken_ ? "it is unusable after an earlier failure (" + broken_reason_ + ")"
                                      : "it has been finalised (or destroyed)";
      throw CommError(ErrorKind::kComm,
                      fmt::format("{} on group '{}' refused: {}", op_kind_name(kind), name_, why));
    }
    w.group = name_;
    if (is_collective(kind)) {
      w.sig.seq = ++coll_seq_;
      coll_enqueued_.store(w.sig.seq);
    } else {
      w.sig.seq = ++p2p_seq_;
      p2p_enqueued_.store(w.sig.seq);
    }
    w.deadline = std::chrono::steady_clock::now() + options_.timeout;
    w.recorder_id = FlightRecorder::global().record(op_kind_name(kind), name_, w.sig.seq, w.sig.count,
                                                     DType(w.sig.dtype), recorder_peer(w));
    while (!unsettled_.empty() && unsettled_.front()->status.load() != WorkState::kPending) unsettled_.pop_front();
    unsettled_.push_back(op->work);
    on_caller = may_run_on_caller(*op);
    if (on_caller) {
      // Issued under mu_: no operation enqueued after this one can be issued
      // before it, so every rank issues the group's collectives in one order.
      ++in_flight_count_;
      ++callers_polling_;
      try {
        op->body.start(data_.get(), op->requests);
        FlightRecorder::global().update(w.recorder_id, OpState::kStarted);
      } catch (...) {
        start_error = std::current_exception();
      }
    } else {
      queue_.push_back(std::move(op));
      queued_.store(queue_.size());
    }
  }
  if (on_caller)
    run_on_caller(std::move(op), start_error);
  else
    cv_.notify_all();
}

// A small collective on an idle engine is issued and polled on the caller's
// thread: the caller would wait for it anyway, and handing it to the
// communication thread and back costs two thread wake-ups (about 4 us of an
// 8-byte all_reduce's 6). Only what the thread would start at once
// qualifies: nothing queued or in flight, one step, no point-to-point
// messages (which a later ring could match), no debug-mode check (itself a
// collective on the control communicator).
bool MpiWorker::may_run_on_caller(const Op& op) const {
  const OpKind kind = OpKind(op.work->sig.kind);
  return is_collective(kind) && kind != OpKind::kSplit && !op.body.next && !op.body.point_to_point &&
         op.body.payload_bytes <= kCallerMaxBytes && !options_.debug && queue_.empty() && in_flight_count_ == 0 &&
         handed_off_.empty();
}

// Polls for at most the time such a collective takes when every rank is
// there; a late peer, a failure or an abort hands it to the communication
// thread, whose polling, deadline and diagnosis then cover it as if it had
// been started there.
void MpiWorker::run_on_caller(std::unique_ptr<Op> op, std::exception_ptr start_error) {
  if (start_error) {
    hand_off(std::move(op), start_error);
    return;
  }
  const auto give_up = std::chrono::steady_clock::now() + kCallerPoll;
  bool done = false;
  std::exception_ptr error;
  try {
    // No sched_yield between tests: it made the call slower at 2 ranks on 2
    // cores (2.9-3.1 against 2.2-2.7 us) and at 4 (57-110 against 33-57 us).
    do {
      done = op->requests.test();
    } while (!done && !broken_ && std::chrono::steady_clock::now() < give_up);
    if (done && op->body.finish) op->body.finish(op->requests);
  } catch (...) {
    error = std::current_exception();
  }
  if (done && !error) {
    {
      std::lock_guard lock(mu_);
      --callers_polling_;
      ++path_counts_.completed_on_caller;
    }
    complete(std::move(op), nullptr);
  } else {
    hand_off(std::move(op), error);
  }
}

// The thread takes every hand-off: it does not finish shutting down while a
// caller still polls an operation (see shutdown_thread_side).
void MpiWorker::hand_off(std::unique_ptr<Op> op, std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    handed_off_.push_back({std::move(op), error});
    has_handed_off_.store(true);
    --callers_polling_;
    ++path_counts_.handed_off;
  }
  cv_.notify_all();
  drained_cv_.notify_all();
}

double MpiWorker::thread_cpu_ms() const {
  std::lock_guard lock(cpu_clock_mu_);
  timespec t{};
  if (cpu_clock_valid_ && ::clock_gettime(cpu_clock_, &t) == 0)
    last_cpu_ms_ = double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
  return last_cpu_ms_;
}

CallerPathCounts MpiWorker::caller_path_counts() const {
  std::lock_guard lock(mu_);
  return path_counts_;
}

void MpiWorker::abort(const std::string& reason) noexcept {
  try {
    std::lock_guard lock(mu_);
    if (!broken_) {
      broken_reason_ = reason;
      broken_.store(true);
    }
  } catch (...) {
    broken_.store(true);
  }
  cv_.notify_all();
  drained_cv_.notify_all();
}

void MpiWorker::finalize(std::chrono::milliseconds timeout) {
  std::shared_ptr<WorkState> stuck;
  {
    std::unique_lock lock(mu_);
    if (finalized_) return;
    const bool drained = drained_cv_.wait_for(
        lock, timeout, [&] { return broken_.load() || (queue_.empty() && in_flight_count_ == 0); });
    if (drained) {
      // In the same hold as the check, so that no operation can slip in
      // between (another thread's call is refused from here on).
      stop_ = true;
      stop_requested_.store(true);
    } else {
      for (const auto& w : unsettled_)
        if (w->status.load() == WorkState::kPending) {
          stuck = w;
          break;
        }
    }
  }
  if (stuck) {
    std::exception_ptr err = diagnose(*stuck, timeout, fmt::format("finalize() of group '{}' waited for it: ", name_));
    stuck->settle(err, [&] { abort(what_of(err)); });
    abort(what_of(err));  // also if the operation completed meanwhile: the queue did not drain in time
    shutdown();
    {
      std::lock_guard lock(mu_);
      finalized_ = true;
    }
    std::rethrow_exception(err);
  }
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    stop_requested_.store(true);
  }
  cv_.notify_all();
  join_thread();
  std::lock_guard lock(mu_);
  finalized_ = true;
}

void MpiWorker::join_thread() noexcept {
  std::lock_guard lock(join_mu_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void MpiWorker::shutdown() noexcept {
  bool need_abort;
  {
    std::lock_guard lock(mu_);
    need_abort = !finalized_ && !stop_;
  }
  if (need_abort) abort("the communicator was destroyed without finalize()");
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    stop_requested_.store(true);
  }
  cv_.notify_all();
  join_thread();
}

// ---- the communication thread ----

void MpiWorker::run() noexcept {
  // Sleeps of tens of microseconds need a timer slack below the default 50 us.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const std::string thread_name = ("htc " + name_).substr(0, 15);
  pthread_setname_np(pthread_self(), thread_name.c_str());
  {
    std::lock_guard lock(cpu_clock_mu_);
    cpu_clock_valid_ = pthread_getcpuclockid(pthread_self(), &cpu_clock_) == 0;
  }
  try {
    loop();
  } catch (...) {
    abort(fmt::format("internal failure of the communication thread of '{}': {}", name_,
                      what_of(std::current_exception())));
  }
  shutdown_thread_side();
  thread_cpu_ms();  // the last reading: the clock ends with the thread
  std::lock_guard lock(cpu_clock_mu_);
  cpu_clock_valid_ = false;
}

void MpiWorker::loop() {
  PollBackoff backoff;
  backoff.reset_idle();
  bool was_idle = true;
  for (;;) {
    bool progress = poll_once();
    if (broken_ && !abort_handled_) {
      handle_abort();
      progress = true;
    }
    while (!broken_ && in_flight_.size() < kMaxInFlight && queued_.load() > 0 && !stepped_in_flight()) {
      std::unique_ptr<Op> op;
      {
        std::lock_guard lock(mu_);
        if (queue_.empty()) break;
        op = std::move(queue_.front());
        queue_.pop_front();
        queued_.store(queue_.size());
        ++in_flight_count_;
      }
      start(std::move(op));
      progress = true;
    }
    if (stop_requested_.load()) {
      std::lock_guard lock(mu_);
      if (broken_ || (queue_.empty() && in_flight_count_ == 0 && handed_off_.empty())) break;
    }
    const bool idle = in_flight_.empty();
    if (progress || idle != was_idle) {
      if (idle)
        backoff.reset_idle();
      else
        backoff.reset(largest_in_flight());
    }
    was_idle = idle;
    pause(backoff, true);
  }
}

void MpiWorker::adopt_handed_off() {
  std::vector<HandOff> taken;
  {
    std::lock_guard lock(mu_);
    taken.swap(handed_off_);
    has_handed_off_.store(false);
  }
  for (HandOff& h : taken) {
    if (h.error) {
      fail_op(std::move(h.op), h.error);
    } else if (abort_handled_) {  // the abort has already settled everything else in flight
      abandon(std::move(h.op), broken_reason());
    } else {
      in_flight_.push_back(std::move(h.op));
    }
  }
}

bool MpiWorker::stepped_in_flight() const {
  for (const auto& op : in_flight_)
    if (op->body.next) return true;
  return false;
}

std::size_t MpiWorker::largest_in_flight() const {
  std::size_t most = 0;
  for (const auto& op : in_flight_) most = std::max(most, op->body.payload_bytes);
  return most;
}

bool MpiWorker::poll_once() {
  service_control();
  bool progress = false;
  if (has_handed_off_.load()) {
    adopt_handed_off();
    progress = true;
  }
  progress = test_in_flight() || progress;
  // Operations abandoned by an abort may still complete; then their buffers can go.
  for (std::size_t i = 0; i < abandoned_.size();) {
    Op& op = *abandoned_[i];
    bool done = false;
    try {
      done = op.check_requests.test() && op.requests.test();
    } catch (...) {
      done = false;
    }
    if (done) {
      abandoned_.erase(abandoned_.begin() + std::ptrdiff_t(i));
    } else {
      ++i;
    }
  }
  return progress;
}

bool MpiWorker::poll_until(const std::function<bool()>& done, std::size_t payload_bytes) {
  PollBackoff backoff;
  backoff.reset(payload_bytes);
  for (;;) {
    const bool progress = poll_once();
    if (done()) return true;
    if (broken_) return false;
    if (progress) backoff.reset(payload_bytes);
    pause(backoff, false);
  }
}

void MpiWorker::pause(PollBackoff& backoff, bool wake_on_queue) {
  switch (backoff.next()) {
    case PollBackoff::Action::kSpin: return;
    case PollBackoff::Action::kYield: sched_yield(); return;
    case PollBackoff::Action::kSleep: {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, backoff.sleep(), [&] {
        return stop_ || (wake_on_queue && (!queue_.empty() || !handed_off_.empty())) || (broken_ && !abort_handled_) ||
               diag_pending_;
      });
      return;
    }
  }
}

void MpiWorker::start(std::unique_ptr<Op> op) {
  try {
    const OpKind kind = OpKind(op->work->sig.kind);
    if (options_.debug && is_collective(kind)) check_signatures(*op);
    if (kind == OpKind::kSplit) {
      FlightRecorder::global().update(op->work->recorder_id, OpState::kStarted);
      run_split(*op);
      complete(std::move(op), nullptr);
      return;
    }
    if (op->body.start) op->body.start(data_.get(), op->requests);
    FlightRecorder::global().update(op->work->recorder_id, OpState::kStarted);
    in_flight_.push_back(std::move(op));
  } catch (...) {
    fail_op(std::move(op), std::current_exception());
  }
}

// Every rank sends its signature of collective #seq to every other over the
// control communicator; all see the same table, so all reach the same
// verdict, and on a mismatch none issues the data collective: nothing hangs
// and no buffer is written with another call's data.
void MpiWorker::check_signatures(Op& op) {
  const WorkState& w = *op.work;
  op.gathered.assign(std::size_t(size_), OpSignature{});
  HT_MPI_CHECK(MPI_Iallgather(&w.sig, int(sizeof(OpSignature)), MPI_BYTE, op.gathered.data(),
                              int(sizeof(OpSignature)), MPI_BYTE, control_.get(), op.check_requests.add()));
  if (!poll_until([&] { return op.check_requests.test(); }, 0))
    throw CommError(ErrorKind::kComm, fmt::format("{}: the communicator was aborted while checking that every rank "
                                                  "made the same call (debug mode): {}",
                                                  w.describe(), broken_reason()));
  auto same_call = [](const OpSignature& a, const OpSignature& b) {
    return a.kind == b.kind && a.count == b.count && a.dtype == b.dtype && a.root == b.root && a.redop == b.redop &&
           a.seq == b.seq;
  };
  bool all_same = true;
  for (const OpSignature& s : op.gathered) all_same = all_same && same_call(s, op.gathered[0]);
  if (all_same) return;
  // Group ranks by what they called; name rank 0's call as the reference.
  std::vector<std::pair<OpSignature, std::vector<int>>> calls;
  for (int r = 0; r < size_; ++r) {
    const OpSignature& s = op.gathered[std::size_t(r)];
    auto it = std::find_if(calls.begin(), calls.end(), [&](const auto& c) { return same_call(c.first, s); });
    if (it == calls.end())
      calls.push_back({s, {r}});
    else
      it->second.push_back(r);
  }
  auto ranks_str = [](const std::vector<int>& ranks) {
    return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
  };
  auto call_str = [&](const OpSignature& s) {
    std::string text = signature_str(s);
    if (s.seq != w.sig.seq) text += fmt::format(" as its #{}", s.seq);
    return text;
  };
  std::vector<std::string> others;
  for (std::size_t i = 1; i < calls.size(); ++i)
    others.push_back(fmt::format("{} called {}", ranks_str(calls[i].second), call_str(calls[i].first)));
  throw CommError(ErrorKind::kComm,
                  fmt::format("{} where {} called {} (#{} on '{}'): every rank of a group must make the same "
                              "collective calls in the same order (found by HT_COMM_DEBUG=1)",
                              fmt::join(others, "; "), ranks_str(calls[0].second), call_str(calls[0].first),
                              w.sig.seq, name_));
}

// MPI_Comm_split blocks until every rank of the group calls it, so the ranks
// first exchange (colour, key) with a nonblocking all-gather that the
// deadline covers: once it completes, every rank is at the split and the
// blocking call returns promptly. The control communicator of the new group
// is then duplicated with the nonblocking MPI_Comm_idup.
void MpiWorker::run_split(Op& op) {
  SplitRequest& s = *op.split;
  const WorkState& w = *op.work;
  auto aborted = [&] {
    return CommError(ErrorKind::kComm,
                     fmt::format("{}: the communicator was aborted during the split: {}", w.describe(), broken_reason()));
  };
  // Pending nonblocking collectives on this communicator, including one a
  // caller's thread still polls, are complete before the blocking split is issued.
  auto nothing_else_in_flight = [&] {
    std::lock_guard lock(mu_);
    return in_flight_.empty() && handed_off_.empty() && callers_polling_ == 0;
  };
  if (!poll_until(nothing_else_in_flight, 0)) throw aborted();
  s.mine[0] = s.color;
  s.mine[1] = s.key;
  s.table.assign(2 * std::size_t(size_), 0);
  HT_MPI_CHECK(MPI_Iallgather(s.mine, 2, MPI_INT32_T, s.table.data(), 2, MPI_INT32_T, data_.get(),
                              op.check_requests.add()));
  if (!poll_until([&] { return op.check_requests.test(); }, 0)) throw aborted();
  MPI_Comm data = MPI_COMM_NULL;
  HT_MPI_CHECK(MPI_Comm_split(data_.get(), s.color < 0 ? MPI_UNDEFINED : s.color, s.key, &data));
  if (data == MPI_COMM_NULL) return;
  s.data = MpiComm(data);
  HT_MPI_CHECK(MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN));
  HT_MPI_CHECK(MPI_Comm_idup(data, s.control_target.get(), op.check_requests.add()));
  if (!poll_until([&] { return op.check_requests.test(); }, 0)) throw aborted();
  s.control = MpiComm(*s.control_target);
  HT_MPI_CHECK(MPI_Comm_set_errhandler(s.control.get(), MPI_ERRORS_RETURN));
}

bool MpiWorker::test_in_flight() {
  bool progress = false;
  for (std::size_t i = 0; i < in_flight_.size();) {
    Op& op = *in_flight_[i];
    bool done = false;
    std::exception_ptr error;
    try {
      // A receive still waiting for its message to arrive makes no progress.
      if (op.body.match && !op.matched) {
        if (!op.body.match(data_.get(), op.requests)) {
          ++i;
          continue;
        }
        op.matched = true;
        progress = true;
      }
      done = op.requests.test();
    } catch (...) {
      error = std::current_exception();
    }
    if (!done && !error) {
      ++i;
      continue;
    }
    if (!error && op.body.next) {
      try {
        if (op.body.next(data_.get(), op.requests)) {  // another step issued
          progress = true;
          ++i;
          continue;
        }
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (!error && op.body.finish) {
      try {
        op.body.finish(op.requests);
      } catch (...) {
        error = std::current_exception();
      }
    }
    std::unique_ptr<Op> owned = std::move(in_flight_[i]);
    in_flight_.erase(in_flight_.begin() + std::ptrdiff_t(i));
    if (error)
      fail_op(std::move(owned), error);
    else
      complete(std::move(owned), nullptr);
    progress = true;
  }
  return progress;
}

void MpiWorker::complete(std::unique_ptr<Op> op, std::exception_ptr error) {
  if (error) {
    fail_op(std::move(op), error);
    return;
  }
  const std::shared_ptr<WorkState> work = op->work;
  WorkState& w = *work;
  if (is_collective(OpKind(w.sig.kind))) note_completed(w.sig.seq);
  // Its scratch buffers are freed, and it stops counting as in flight,
  // before the waiter wakes: once wait() returns, the operation holds no
  // memory and the waiter's next small collective finds the engine idle.
  op.reset();
  {
    std::lock_guard lock(mu_);
    --in_flight_count_;
  }
  drained_cv_.notify_all();
  // The recorder learns of the completion before the waiter wakes, so that a
  // dump the waiter makes next (as a rank that stops there does) shows it.
  w.settle(nullptr, [&w] { FlightRecorder::global().update(w.recorder_id, OpState::kCompleted); });
}

// Raises coll_completed_ to `seq`; the caller's thread and the communication
// thread may complete operations at the same time.
void MpiWorker::note_completed(std::uint64_t seq) {
  std::uint64_t seen = coll_completed_.load();
  while (seen < seq && !coll_completed_.compare_exchange_weak(seen, seq)) {
  }
}

// A failed operation leaves the group out of step (this rank did not take
// part, or took part only partly), so the whole communicator is aborted.
void MpiWorker::fail_op(std::unique_ptr<Op> op, std::exception_ptr error) {
  WorkState& w = *op->work;
  // Broken before the waiter wakes, so that its next call is refused.
  abort(fmt::format("{} failed: {}", w.describe(), what_of(error)));
  w.settle(error, [&w] { FlightRecorder::global().update(w.recorder_id, OpState::kFailed); });
  if (op->requests.active() || op->check_requests.active()) abandoned_.push_back(std::move(op));
  op.reset();
  {
    std::lock_guard lock(mu_);
    --in_flight_count_;
  }
  drained_cv_.notify_all();
}

// An operation in flight when the communicator was aborted fails; MPI may
// still write into its buffers, so it is kept until its requests complete.
void MpiWorker::abandon(std::unique_ptr<Op> op, const std::string& reason) {
  WorkState& w = *op->work;
  if (w.settle(std::make_exception_ptr(CommError(
          ErrorKind::kComm,
          fmt::format("{} was abandoned in flight: the communicator was aborted ({}); its output is undefined",
                      w.describe(), reason)))))
    FlightRecorder::global().update(w.recorder_id, OpState::kFailed);
  abandoned_.push_back(std::move(op));
  {
    std::lock_guard lock(mu_);
    --in_flight_count_;
  }
  drained_cv_.notify_all();
}

void MpiWorker::handle_abort() {
  abort_handled_.store(true);
  const std::string reason = broken_reason();
  std::deque<std::unique_ptr<Op>> queued;
  {
    std::lock_guard lock(mu_);
    queued.swap(queue_);
    queued_.store(0);
  }
  bool unfinished = !queued.empty() || !in_flight_.empty();
  {
    std::lock_guard lock(mu_);
    unfinished = unfinished || in_flight_count_ > in_flight_.size() || !handed_off_.empty();  // on callers' threads
  }
  for (auto& op : queued) {
    WorkState& w = *op->work;
    if (w.settle(std::make_exception_ptr(CommError(
            ErrorKind::kComm, fmt::format("{} was not run: the communicator was aborted ({})", w.describe(), reason)))))
      FlightRecorder::global().update(w.recorder_id, OpState::kFailed);
  }
  for (auto& op : in_flight_) abandon(std::move(op), reason);
  in_flight_.clear();
  if (unfinished && !dumped_.exchange(true)) {
    try {
      FlightRecorder::global().dump(options_.run_dir, world_rank_, "abort of group '" + name_ + "': " + reason);
    } catch (const std::exception& e) {
      fmt::print(stderr, "hypertrain: could not dump the flight recorder: {}\n", e.what());
    }
  }
}

void MpiWorker::shutdown_thread_side() noexcept {
  try {
    {
      // A caller polls an operation for at most kCallerPoll before it
      // completes or hands it over; wait for that (with a wide margin), so
      // that nothing is handed to a thread that has gone. New ones cannot
      // start: the communicator is stopped or broken by now.
      std::unique_lock lock(mu_);
      drained_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return callers_polling_ == 0; });
    }
    adopt_handed_off();
    if (broken_ && !abort_handled_) handle_abort();
    for (auto& op : in_flight_) abandon(std::move(op), "the communication thread stopped");
    in_flight_.clear();
  } catch (...) {
  }
  // Control messages still in flight are point-to-point sends: their requests
  // may be freed (they complete in the background); their buffers are leaked.
  for (auto& s : sends_) {
    if (s && s->request != MPI_REQUEST_NULL) {
      MPI_Request_free(&s->request);
      (void)s.release();
    }
  }
  sends_.clear();
  // Abandoned point-to-point requests (a receive whose sender never came) can
  // be cancelled; give the cancellations a moment to complete.
  for (auto& op : abandoned_)
    if (op->body.point_to_point) op->requests.cancel();
  const auto cancel_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  bool leaked = false;
  for (auto& op : abandoned_) {
    bool done = false;
    do {
      try {
        done = op->check_requests.test() && op->requests.test();
      } catch (...) {
      }
    } while (!done && op->body.point_to_point && std::chrono::steady_clock::now() < cancel_deadline);
    if (done) continue;
    // MPI may still write into these buffers: leak them with their requests.
    add_abandoned_mpi_operations(op->requests.active_count() + op->check_requests.active_count());
    (void)op.release();
    leaked = true;
  }
  abandoned_.clear();
  if (leaked) {
    (void)data_.release();
    (void)control_.release();
  } else {
    data_.reset();
    control_.reset();
  }
}

}  // namespace ht::comm::detail
