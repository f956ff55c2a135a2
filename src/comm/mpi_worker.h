// Private: the engine behind one MpiCommunicator — its two MPI communicators,
// its communication thread with a FIFO queue, and the control channel that
// answers "where are you?" queries and diagnoses missed deadlines.
//
// Threads: user threads call enqueue/on_deadline/finalize/abort; the
// communication thread makes every MPI call on the two communicators except
// their creation and a small collective that finds it idle, which the caller
// issues and polls itself before handing it over if it is not done. See
// docs/design.md, "Communication".
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_handles.h"
#include "comm/mpi_op.h"
#include "comm/poll_backoff.h"
#include "ht/comm/communicator.h"
#include "ht/comm/mpi_communicator.h"

namespace ht::comm::detail {

/// A split in progress: the arguments, and the communicators it produced
/// (null for a rank that passed a negative colour).
struct SplitRequest {
  int color = 0, key = 0;
  std::int32_t mine[2] = {0, 0};    // this rank's (colour, key), the send buffer of the exchange
  std::vector<std::int32_t> table;  // (colour, key) of every rank, gathered before MPI_Comm_split
  std::unique_ptr<MPI_Comm> control_target = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MpiComm data, control;
};

/// Where a peer is, as it answers a status query.
struct PeerStatus {
  std::uint64_t query_id = 0;
  std::uint64_t coll_enqueued = 0;   // last collective its owner enqueued
  std::uint64_t coll_completed = 0;  // last collective completed
  std::uint64_t p2p_enqueued = 0;
  std::int32_t broken = 0;  // its communicator has timed out or been aborted
  std::int32_t pad = 0;
};

class MpiWorker {
 public:
  /// Takes ownership of the data and control communicators (duplicates made
  /// for this group alone) and starts the communication thread.
  MpiWorker(MpiComm data, MpiComm control, std::string name, CommOptions options);
  /// Aborts unless finalised, then joins the thread. Never throws.
  ~MpiWorker();
  MpiWorker(const MpiWorker&) = delete;
  MpiWorker& operator=(const MpiWorker&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  const CommOptions& options() const { return options_; }

  /// Numbers the operation, records it in the flight recorder, sets its
  /// deadline and queues it — or, for a small collective on an idle engine,
  /// runs it on the caller's thread (see run_on_caller). Throws CommError if
  /// the communicator has been aborted, timed out or finalised.
  void enqueue(std::unique_ptr<Op> op);
  /// Throws CommError unless operations can still be enqueued.
  void check_usable() const;
  /// How many small collectives completed on their caller's thread and how
  /// many were handed to the communication thread.
  CallerPathCounts caller_path_counts() const;
  /// CPU time (ms) the communication thread has used; its last reading
  /// once it has ended.
  double thread_cpu_ms() const;

  /// Called by a waiter whose operation has missed its deadline: asks the
  /// peers where they are, dumps the flight recorder, settles the operation
  /// with a CommTimeout and aborts the communicator. Returns when `w` is
  /// settled (possibly completed after all, or failed for another reason).
  void on_deadline(WorkState& w);

  /// Waits (up to `timeout`) until every queued operation has completed, then
  /// stops the thread and frees the communicators. Throws CommTimeout (and
  /// aborts) if work is still outstanding at the deadline. Idempotent.
  void finalize(std::chrono::milliseconds timeout);
  /// Marks the communicator broken with `reason`: queued and in-flight
  /// operations fail with CommError, later calls throw. Never blocks for long,
  /// never throws.
  void abort(const std::string& reason) noexcept;
  /// Aborts unless finalised, stops the thread and joins it. Idempotent;
  /// never throws.
  void shutdown() noexcept;

 private:
  enum class DiagState { kIdle, kRequested, kCollecting, kDone };
  /// An operation issued on a caller's thread that did not complete there:
  /// the communication thread adopts it (or fails it with `error`).
  struct HandOff {
    std::unique_ptr<Op> op;
    std::exception_ptr error;
  };
  /// A control message being sent: MPI reads `msg` until `request` completes.
  struct PendingSend {
    PeerStatus msg;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  // Caller's thread.
  bool may_run_on_caller(const Op& op) const;
  void run_on_caller(std::unique_ptr<Op> op, std::exception_ptr start_error);
  void hand_off(std::unique_ptr<Op> op, std::exception_ptr error);

  // Communication thread.
  void run() noexcept;
  void adopt_handed_off();
  void loop();
  bool poll_once();
  bool poll_until(const std::function<bool()>& done, std::size_t payload_bytes);
  void pause(PollBackoff& backoff, bool wake_on_queue);
  void start(std::unique_ptr<Op> op);
  void issue(Op& op);
  void check_signatures(Op& op);
  void run_split(Op& op);
  bool test_in_flight();
  /// Also called by a caller's thread, for an operation it completed (never with an error).
  void complete(std::unique_ptr<Op> op, std::exception_ptr error);
  void abandon(std::unique_ptr<Op> op, const std::string& reason);
  void handle_abort();
  void service_control();
  void shutdown_thread_side() noexcept;
  std::size_t largest_in_flight() const;
  void join_thread() noexcept;
  /// Whether an operation with steps is in flight (then nothing else starts).
  bool stepped_in_flight() const;

  // Either side.
  bool broken() const { return broken_.load(); }
  std::string broken_reason() const;
  /// Communication thread only (it may keep the operation in abandoned_).
  void fail_op(std::unique_ptr<Op> op, std::exception_ptr error);
  void note_completed(std::uint64_t seq);
  /// Asks the peers of `w` where they are and returns the CommTimeout for it
  /// (`waited`: how long it was given); dumps the flight recorder.
  std::exception_ptr diagnose(const WorkState& w, std::chrono::milliseconds waited, const std::string& context);
  std::string arrival_text(const WorkState& w, const std::vector<PeerStatus>& replies,
                           const std::vector<bool>& answered, bool asked, std::chrono::milliseconds budget,
                           std::vector<int>& arrived, std::vector<int>& missing) const;
  /// The world ranks of the missing ranks that did not answer (all the
  /// missing ones when every one answered): CommTimeout::suspects.
  std::vector<int> suspects(const std::vector<int>& missing, const std::vector<bool>& answered, bool asked) const;

  const std::string name_;
  const CommOptions options_;
  MpiComm data_, control_;
  int rank_ = 0, size_ = 1;
  int world_rank_ = 0;  // names the flight-recorder dump
  std::vector<int> world_of_;  // the world rank of each rank of this communicator

  // Queue and lifecycle, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;          // wakes the thread: work, abort, stop, diagnosis
  std::condition_variable drained_cv_;  // wakes finalize (queue and in-flight empty) and a stopping thread (no caller polls)
  std::deque<std::unique_ptr<Op>> queue_;
  std::vector<HandOff> handed_off_;  // issued on a caller's thread, to be polled by the communication thread
  std::size_t callers_polling_ = 0;  // operations a caller's thread is polling now
  CallerPathCounts path_counts_;
  std::deque<std::shared_ptr<WorkState>> unsettled_;  // enqueued, oldest first; pruned of settled ones
  std::size_t in_flight_count_ = 0;
  std::uint64_t coll_seq_ = 0, p2p_seq_ = 0;
  bool stop_ = false;
  bool finalized_ = false;
  std::string broken_reason_;

  std::atomic<bool> broken_{false};
  std::atomic<std::size_t> queued_{0};        // queue_.size(), for the thread's lock-free spin
  std::atomic<bool> stop_requested_{false};  // stop_, likewise
  std::atomic<bool> has_handed_off_{false};  // !handed_off_.empty(), likewise
  std::atomic<bool> abort_handled_{false};
  std::atomic<bool> dumped_{false};        // the flight recorder has been dumped for this failure
  std::atomic<bool> diag_pending_{false};  // a diagnosis waits for its queries to be sent
  std::atomic<std::uint64_t> coll_enqueued_{0}, coll_completed_{0}, p2p_enqueued_{0};

  // Thread-only state.
  std::vector<std::unique_ptr<Op>> in_flight_;
  std::vector<std::unique_ptr<Op>> abandoned_;  // failed by an abort while MPI still owns their buffers
  std::vector<std::unique_ptr<PendingSend>> sends_;  // control messages in flight

  // Deadline diagnosis, under diag_mu_; one at a time (diag_serial_mu_).
  std::mutex diag_serial_mu_;
  std::mutex diag_mu_;
  std::condition_variable diag_cv_;
  DiagState diag_state_ = DiagState::kIdle;
  std::uint64_t diag_id_ = 0;
  std::vector<int> diag_peers_;
  std::vector<PeerStatus> diag_replies_;
  std::vector<bool> diag_answered_;
  std::chrono::steady_clock::time_point diag_deadline_;

  std::mutex join_mu_;  // finalize, shutdown and the destructor may race to join
  std::thread thread_;
  // The thread's CPU clock, valid from the thread's start until it ends
  // (its id could then name another thread's): set and cleared by the thread.
  mutable std::mutex cpu_clock_mu_;
  clockid_t cpu_clock_{};
  bool cpu_clock_valid_ = false;
  mutable double last_cpu_ms_ = 0;
};

}  // namespace ht::comm::detail
