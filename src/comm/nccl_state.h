// Private: the state of one NCCL communicator (NcclCommunicator::Impl),
// shared by its owner and by every Work it handed out, and the Work type.
// Defined in nccl_state.cc (enqueueing, completion, failure),
// nccl_communicator.cc (abort, split, finalize) and nccl_debug_check.cc.
//
// Locking. `mu_` serialises the calls that enqueue work, split and finalize
// (NCCL wants one thread at a time per communicator) and guards the list of
// outstanding operations. `nccl_mu_` guards the ncclComm_t handle only for
// the length of one non-blocking NCCL call, never across a wait, so abort()
// from a watchdog thread waits at most for one such call, then sets the
// handle to null under it: nobody can use a communicator NCCL has freed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/nccl_handles.h"
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "ht/core/stream.h"
#include "ht/comm/flight_recorder.h"
#include "ht/comm/nccl_communicator.h"
#include "ht/comm/work.h"

namespace ht::comm::detail {

using Clock = std::chrono::steady_clock;

/// What an operation is, for the flight recorder, debug checks and messages.
struct OpInfo {
  const char* op = "";     // "all_reduce"
  std::int64_t count = 0;  // NCCL's count argument: elements per rank
  DType dtype = DType::kF32;
  int peer = -1;                   // root, peer or colour, where there is one
  const char* peer_name = "root";  // what `peer` is, for messages
  int reduce_op = -1;              // a ReduceOp, where there is one
  bool collective = true;          // every rank calls it (checked in debug mode)
};

/// One enqueued operation, shared by its Work and the communicator's list
/// of outstanding operations.
struct PendingOp {
  OpInfo info;
  std::uint64_t seq = 0;
  std::uint64_t flight_id = 0;
  Clock::time_point deadline;
  CudaEvent done;  // recorded on the communicator's stream after the operation

  std::mutex mu;
  bool completed = false;          // seen complete while the communicator was not aborted
  std::vector<Tensor> keep_alive;  // inputs, outputs and scratch; released once complete
};

/// Words of the debug-mode signature each rank contributes (nccl_debug_check.cc).
inline constexpr int kSignatureWords = 8;

/// Sleeps progressively longer between polls: yields for the first few
/// microseconds (a small collective completes in a few), then sleeps up to 1 ms.
class Backoff {
 public:
  void pause();

 private:
  int polls_ = 0;
};

}  // namespace ht::comm::detail

namespace ht::comm {

struct NcclCommunicator::Impl : std::enable_shared_from_this<NcclCommunicator::Impl> {
  using Clock = detail::Clock;
  using PendingOp = detail::PendingOp;

  /// `process_rank` (the world rank) names this process's flight-recorder dump.
  Impl(std::string group_name, int cuda_device, int process_rank, CommOptions comm_options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Identity. rank and size are set once NCCL has created the communicator.
  const std::string name;
  const int device;
  const int world_rank;
  const CommOptions options;
  int rank = 0;
  int size = 1;

  // --- Creation (bootstrap and split) -----------------------------------
  /// Where ncclCommInitRankConfig / ncclCommSplit write the new handle.
  /// Only before the communicator is shared.
  ncclComm_t* handle_slot() { return &comm_; }
  /// Polls ncclCommGetAsyncError until the state is no longer ncclInProgress
  /// and returns it; nullopt if `deadline` passed first.
  std::optional<ncclResult_t> poll_ready(Clock::time_point deadline);
  /// Reads rank and size from NCCL and creates the stream, events and
  /// scratch buffers. Throws CommError or ht::Error(kCuda).
  void init_resources();

  // --- Enqueueing --------------------------------------------------------
  /// Runs `body` to enqueue one operation on the communicator's stream,
  /// after the caller's current stream, and returns its Work. `keep_alive`
  /// holds every tensor the operation touches until it has completed.
  /// Validation must be done before: a failure inside aborts the
  /// communicator, as this rank may now be out of step with its peers.
  template <typename Body>
  WorkPtr enqueue(const detail::OpInfo& info, std::vector<Tensor> keep_alive, Body&& body);
  /// Calls `fn(comm)` under the handle lock and, if it returns
  /// ncclInProgress, polls until NCCL has taken the call; on an error or at
  /// op's deadline aborts and throws. `what` names the NCCL function.
  template <typename Fn>
  void nccl(const PendingOp& op, const char* what, Fn&& fn);
  cudaStream_t stream() const { return stream_.get(); }
  /// A device i32 scratch of one element, for barrier().
  const Tensor& barrier_buffer() const { return barrier_buf_; }

  // --- Completion ---------------------------------------------------------
  /// Non-blocking: true once `op` completed. Throws CommTimeout past its
  /// deadline, CommError on an NCCL or CUDA failure or after an abort.
  bool test(PendingOp& op);
  /// Blocks until `op` completed, polling test(). `deadline`, if given, may
  /// be earlier than the op's own (finalize's timeout); missing it fails with
  /// CommTimeout saying `late` ("was still running when ...").
  void wait(PendingOp& op, std::optional<Clock::time_point> deadline = std::nullopt, const std::string& late = {});

  // --- Lifecycle ------------------------------------------------------------
  /// Throws CommError if the communicator was aborted or finalized.
  void check_usable(const char* what) const;
  /// Holds `mu_` while splitting (a collective over this communicator).
  std::unique_ptr<Communicator> split(int color, int key, const std::string& new_name);
  void finalize(std::chrono::milliseconds timeout);
  /// Sets the aborted flag, ncclCommAbort, and (if `dump`) writes the flight
  /// recorder with `reason`. Idempotent; never throws.
  void abort_now(const std::string& reason, bool dump) noexcept;
  bool aborted() const { return aborted_.load(); }

  /// "all_reduce (seq 7, 1024 x f32, root 0) on group 'world'".
  std::string describe(const PendingOp& op) const;
  /// Aborts (dumping the flight recorder) and throws CommTimeout naming `op`
  /// (or, when null, `what` alone, e.g. "initialisation").
  [[noreturn]] void fail_timeout(const PendingOp* op, const std::string& what);
  /// Aborts and throws CommError with NCCL's error string and last message.
  [[noreturn]] void fail_nccl(ncclResult_t result, const std::string& what, const PendingOp* op);

 private:
  /// Runs `fn(comm)` under nccl_mu_; throws CommError if the handle is gone.
  template <typename Fn>
  ncclResult_t locked_call(Fn&& fn);
  /// ncclCommGetAsyncError under the handle lock (its result if the query
  /// itself fails); throws CommError after an abort.
  ncclResult_t async_state();
  std::string last_nccl_error();
  [[noreturn]] void throw_aborted(const std::string& what) const;
  [[noreturn]] void fail_cuda(cudaError_t code, const PendingOp& op);
  void mark_completed(PendingOp& op);
  /// Drops completed operations from the front of outstanding_ (in order:
  /// they run on one stream). Never throws on a failed op: wait() reports it.
  void prune_outstanding();
  /// HT_COMM_DEBUG: all-gathers every rank's (op, count, dtype, root, seq)
  /// and throws CommError (after aborting) if they differ.
  void debug_check(PendingOp& op);
  /// Everything enqueue() does before `body`: returns the op, recorded.
  std::shared_ptr<PendingOp> begin(const detail::OpInfo& info);
  WorkPtr finish(std::shared_ptr<PendingOp> op);
  [[noreturn]] void fail_enqueue(PendingOp& op, const std::exception& e);
  /// Keeps a failed enqueue's tensors until the stream has drained (kernels
  /// enqueued before the failure may still read them): see ~Impl.
  void abandon(PendingOp& op);

  std::mutex mu_;
  bool finalized_ = false;                              // guarded by mu_
  std::uint64_t seq_ = 0;                               // guarded by mu_
  std::uint64_t collective_seq_ = 0;                    // collectives checked in debug mode; guarded by mu_
  std::deque<std::shared_ptr<PendingOp>> outstanding_;  // guarded by mu_
  std::vector<std::vector<Tensor>> abandoned_;          // failed enqueues' tensors; guarded by mu_

  mutable std::mutex nccl_mu_;
  ncclComm_t comm_ = nullptr;  // guarded by nccl_mu_ once shared

  std::atomic<bool> aborted_{false};
  mutable std::mutex reason_mu_;
  std::string abort_reason_;  // guarded by reason_mu_
  std::string dump_path_;     // guarded by reason_mu_

  detail::CudaStream stream_;
  detail::CudaEvent ready_;       // recorded on the caller's stream, waited on by ours
  detail::CudaEvent debug_done_;  // end of a debug-mode signature exchange
  Tensor barrier_buf_;            // 1 x i32 on the device
  Tensor debug_dev_;              // (size + 1) x 8 i32 on the device (debug mode)
  Tensor debug_host_;             // the same on pinned host memory (debug mode)
};

namespace detail {

/// A Work backed by a CUDA event on the communicator's stream.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator::Impl> comm, std::shared_ptr<PendingOp> op)
      : comm_(std::move(comm)), op_(std::move(op)) {}
  /// Polls until complete (or the deadline), then makes the calling thread's
  /// current stream wait for the operation's event.
  void wait() override;
  bool test() override;
  /// One non-blocking test (which throws on a failure or a passed deadline),
  /// then the event wait on the caller's current stream.
  void stream_wait() override;

 private:
  void order_caller_stream();

  std::shared_ptr<NcclCommunicator::Impl> comm_;
  std::shared_ptr<PendingOp> op_;
};

}  // namespace detail

// --- Templates ------------------------------------------------------------

template <typename Fn>
ncclResult_t NcclCommunicator::Impl::locked_call(Fn&& fn) {
  std::lock_guard lock(nccl_mu_);
  if (!comm_) throw_aborted("NCCL call");
  return fn(comm_);
}

template <typename Fn>
void NcclCommunicator::Impl::nccl(const PendingOp& op, const char* what, Fn&& fn) {
  ncclResult_t result = locked_call(std::forward<Fn>(fn));
  if (result == ncclInProgress) {
    const std::optional<ncclResult_t> state = poll_ready(op.deadline);
    if (!state) fail_timeout(&op, std::string("was not accepted by NCCL (") + what + ")");
    result = *state;
  }
  if (result != ncclSuccess) fail_nccl(result, what, &op);
}

template <typename Body>
WorkPtr NcclCommunicator::Impl::enqueue(const detail::OpInfo& info, std::vector<Tensor> keep_alive, Body&& body) {
  std::lock_guard lock(mu_);
  const ht::cuda::DeviceGuard guard(Device::cuda(device));
  std::shared_ptr<PendingOp> op = begin(info);
  try {
    op->keep_alive = std::move(keep_alive);
    if (options.debug && info.collective) debug_check(*op);
    {
      // Enqueues such as ht::ops::cast inside `body` go on our stream too.
      const StreamGuard on_comm_stream(stream_.get());  // ops such as ht::ops::cast enqueue on it
      body(std::as_const(*op));
    }
    HT_CUDA_CHECK(cudaEventRecord(op->done.get(), stream_.get()));
  } catch (const CommError&) {
    abandon(*op);
    throw;  // the communicator is already aborted
  } catch (const std::exception& e) {
    fail_enqueue(*op, e);
  }
  return finish(std::move(op));
}

}  // namespace ht::comm
