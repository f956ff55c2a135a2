// NcclCommunicator::Impl: creation support, enqueueing, polling and
// completion, and the failure paths (timeout, NCCL and CUDA errors).
#include "comm/nccl_state.h"

#include <algorithm>
#include <thread>

#include "core/cuda_check.h"
#include "core/cuda_context.h"

namespace ht::comm {

using detail::Clock;
using detail::OpInfo;
using detail::PendingOp;

namespace detail {

void Backoff::pause() {
  ++polls_;
  if (polls_ <= 100) {
    std::this_thread::yield();
    return;
  }
  // 20 us, 40 us, ... doubling up to 1 ms: a hung collective costs ~1000
  // wake-ups a second, a slow one is noticed within 1 ms.
  const int shift = std::min(polls_ - 101, 6);
  std::this_thread::sleep_for(std::chrono::microseconds(std::min(1000, 20 << shift)));
}

}  // namespace detail

NcclCommunicator::Impl::Impl(std::string group_name, int cuda_device, int process_rank, CommOptions comm_options)
    : name(std::move(group_name)), device(cuda_device), world_rank(process_rank), options(std::move(comm_options)) {}

NcclCommunicator::Impl::~Impl() {
  // The owner aborts or finalizes first; this covers a state that never got
  // an owner (a failed bootstrap or split).
  abort_now("communicator state destroyed", false);
  // Operations that never completed (an abort, a failure) and failed
  // enqueues may still have kernels on our stream reading their tensors:
  // their memory goes back to the allocator only once the stream has
  // drained, which the abort above bounds. Not a step's path: a finalised
  // communicator has nothing left here.
  if (stream_.get() && (!outstanding_.empty() || !abandoned_.empty())) {
    const ht::cuda::DeviceGuard guard(Device::cuda(device));
    if (cudaStreamSynchronize(stream_.get()) != cudaSuccess) cudaGetLastError();
  }
  outstanding_.clear();
  abandoned_.clear();
}

// --- Creation ---------------------------------------------------------------

std::optional<ncclResult_t> NcclCommunicator::Impl::poll_ready(Clock::time_point deadline) {
  detail::Backoff backoff;
  for (;;) {
    const ncclResult_t state = async_state();
    if (state != ncclInProgress) return state;
    if (Clock::now() > deadline) return std::nullopt;
    backoff.pause();
  }
}

void NcclCommunicator::Impl::init_resources() {
  int count = 0, user_rank = 0;
  ncclResult_t r = locked_call([&](ncclComm_t c) { return ncclCommCount(c, &count); });
  if (r != ncclSuccess) fail_nccl(r, "ncclCommCount", nullptr);
  r = locked_call([&](ncclComm_t c) { return ncclCommUserRank(c, &user_rank); });
  if (r != ncclSuccess) fail_nccl(r, "ncclCommUserRank", nullptr);
  size = count;
  rank = user_rank;

  const ht::cuda::DeviceGuard guard(Device::cuda(device));
  stream_ = detail::CudaStream(device);
  ready_ = detail::CudaEvent(device);
  // The barrier's value is never read: any contents will do.
  barrier_buf_ = Tensor::empty({1}, DType::kI32, Device::cuda(device), MemCategory::kCommunication);
  if (options.debug) {
    const std::int64_t words = std::int64_t(size + 1) * detail::kSignatureWords;
    debug_done_ = detail::CudaEvent(device);
    debug_dev_ = Tensor::empty({words}, DType::kI32, Device::cuda(device), MemCategory::kCommunication);
    // Pinned, so that the copies to and from it are truly asynchronous: a
    // pageable copy would block the host on our stream with no deadline.
    debug_host_ = Tensor::empty({words}, DType::kI32, Device::cpu(), MemCategory::kCommunication, HostMemory::kPinned);
  }
}

// --- Enqueueing ---------------------------------------------------------------

std::shared_ptr<PendingOp> NcclCommunicator::Impl::begin(const OpInfo& info) {
  check_usable(info.op);
  prune_outstanding();
  auto op = std::make_shared<PendingOp>();
  op->info = info;
  op->done = detail::CudaEvent(device);

  // Order our stream after the caller's, so that inputs written by kernels
  // enqueued there earlier are complete before NCCL reads them. Done before
  // the sequence number is taken: a failure here leaves the group in step.
  const cudaError_t recorded = cudaEventRecord(ready_.get(), ht::cuda::current_stream());
  if (recorded != cudaSuccess) {
    cudaGetLastError();
    throw Error(ErrorKind::kCuda,
                fmt::format("{} on NCCL group '{}': cannot order the communicator's stream after the calling "
                            "thread's current stream ({}); is that stream on another device than the "
                            "communicator's cuda:{}?",
                            info.op, name, cudaGetErrorString(recorded), device),
                std::source_location::current(), cudaGetErrorName(recorded));
  }
  HT_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));

  op->seq = ++seq_;
  op->deadline = Clock::now() + options.timeout;
  op->flight_id = FlightRecorder::global().record(info.op, name, op->seq, info.count, info.dtype, info.peer);
  return op;
}

WorkPtr NcclCommunicator::Impl::finish(std::shared_ptr<PendingOp> op) {
  FlightRecorder::global().update(op->flight_id, OpState::kStarted);  // handed to the device
  outstanding_.push_back(op);
  return std::make_shared<detail::NcclWork>(shared_from_this(), std::move(op));
}

void NcclCommunicator::Impl::abandon(PendingOp& op) {
  std::lock_guard lock(op.mu);
  abandoned_.push_back(std::move(op.keep_alive));
  op.keep_alive.clear();
}

void NcclCommunicator::Impl::fail_enqueue(PendingOp& op, const std::exception& e) {
  abandon(op);
  FlightRecorder::global().update(op.flight_id, OpState::kFailed);
  abort_now(fmt::format("{} failed while being enqueued: {}; this rank may be out of step with its peers, so "
                        "the communicator is aborted",
                        describe(op), e.what()),
            true);
  throw;  // the original error, to the caller
}

// --- Completion ---------------------------------------------------------------

bool NcclCommunicator::Impl::test(PendingOp& op) {
  {
    std::lock_guard lock(op.mu);
    if (op.completed) return true;
  }
  const cudaError_t q = cudaEventQuery(op.done.get());
  // Read the flag after the query: if no abort had happened by then, a
  // completed event means NCCL finished the operation (an abort also ends
  // its kernels, and then the data is garbage).
  if (aborted_.load()) throw_aborted(fmt::format("{} (seq {})", op.info.op, op.seq));
  if (q == cudaSuccess) {
    mark_completed(op);
    return true;
  }
  if (q != cudaErrorNotReady) fail_cuda(q, op);
  const ncclResult_t state = async_state();
  if (state != ncclSuccess && state != ncclInProgress) fail_nccl(state, "an asynchronous NCCL error", &op);
  if (Clock::now() > op.deadline)
    fail_timeout(&op, fmt::format("did not complete within {} ms of its enqueue", options.timeout.count()));
  return false;
}

void NcclCommunicator::Impl::wait(PendingOp& op, std::optional<Clock::time_point> deadline, const std::string& late) {
  detail::Backoff backoff;
  while (!test(op)) {
    if (deadline && Clock::now() > *deadline) fail_timeout(&op, late);
    backoff.pause();
  }
}

void NcclCommunicator::Impl::mark_completed(PendingOp& op) {
  std::vector<Tensor> release;
  {
    std::lock_guard lock(op.mu);
    if (op.completed) return;
    op.completed = true;
    release.swap(op.keep_alive);
  }
  FlightRecorder::global().update(op.flight_id, OpState::kCompleted);
  // `release` returns the tensors to the stream-ordered allocator here,
  // outside the lock: the host has seen the operation's event, so the memory
  // is free for any stream, and no cudaFree (a device-wide synchronisation)
  // happens on this completion path.
}

void NcclCommunicator::Impl::prune_outstanding() {
  while (!outstanding_.empty()) {
    PendingOp& op = *outstanding_.front();
    bool done = false;
    {
      std::lock_guard lock(op.mu);
      done = op.completed;
    }
    if (!done) {
      const cudaError_t q = cudaEventQuery(op.done.get());
      if (q == cudaSuccess && !aborted_.load()) {
        mark_completed(op);
        done = true;
      } else if (q != cudaErrorNotReady && q != cudaSuccess) {
        cudaGetLastError();  // reported by the op's wait()
      }
    }
    if (!done) return;
    outstanding_.pop_front();
  }
}

// --- Failure ------------------------------------------------------------------

std::string NcclCommunicator::Impl::describe(const PendingOp& op) const {
  std::string peer;
  if (op.info.peer >= 0) peer = fmt::format(", {} {}", op.info.peer_name, op.info.peer);
  std::string reduce;
  if (op.info.reduce_op >= 0) reduce = fmt::format(", {}", reduce_op_name(ReduceOp(op.info.reduce_op)));
  return fmt::format("{} (seq {}, {} x {}{}{}) on group '{}'", op.info.op, op.seq, op.info.count,
                     dtype_name(op.info.dtype), reduce, peer, name);
}

void NcclCommunicator::Impl::fail_timeout(const PendingOp* op, const std::string& what) {
  if (op) FlightRecorder::global().update(op->flight_id, OpState::kTimedOut);
  std::string message = fmt::format(
      "NCCL {} {} (rank {} of {}, world rank {}, operation timeout {} ms). NCCL cannot report which ranks arrived; see "
      "the "
      "flight-recorder dumps of every rank (ht-flight-recorder merges them and names the ranks that fell behind). "
      "The communicator is aborted",
      op ? describe(*op) : fmt::format("group '{}'", name), what, rank, size, world_rank, options.timeout.count());
  abort_now(message, true);
  {
    std::lock_guard lock(reason_mu_);
    if (!dump_path_.empty()) message += fmt::format("; this rank's dump: {}", dump_path_);
  }
  std::vector<int> arrived{rank}, missing;
  for (int r = 0; r < size; ++r)
    if (r != rank) missing.push_back(r);
  throw CommTimeout(message, std::move(arrived), std::move(missing));
}

void NcclCommunicator::Impl::fail_nccl(ncclResult_t result, const std::string& what, const PendingOp* op) {
  const std::string last = last_nccl_error();
  if (op) FlightRecorder::global().update(op->flight_id, OpState::kFailed);
  const std::string message = fmt::format(
      "NCCL {} failed in {}: {} (last NCCL message: {}). The communicator is aborted; recover by "
      "creating new communicators (restart from the last checkpoint)",
      op ? describe(*op) : fmt::format("group '{}'", name), what, ncclGetErrorString(result),
      last.empty() ? "none" : last);
  abort_now(message, true);
  throw CommError(ErrorKind::kComm, message, std::source_location::current(),
                  fmt::format("{} ({})", ncclGetErrorString(result), int(result)));
}

void NcclCommunicator::Impl::fail_cuda(cudaError_t code, const PendingOp& op) {
  cudaGetLastError();
  FlightRecorder::global().update(op.flight_id, OpState::kFailed);
  const std::string message = fmt::format("CUDA error while {} was in flight: {}. The communicator is aborted",
                                          describe(op), cudaGetErrorString(code));
  abort_now(message, true);
  throw CommError(ErrorKind::kCuda, message, std::source_location::current(),
                  fmt::format("{} ({})", cudaGetErrorName(code), int(code)));
}

void NcclCommunicator::Impl::throw_aborted(const std::string& what) const {
  std::string reason;
  {
    std::lock_guard lock(reason_mu_);
    reason = abort_reason_;
  }
  throw CommError(ErrorKind::kComm,
                  fmt::format("{}: NCCL group '{}' was aborted ({}); create new communicators (restart from the "
                              "last checkpoint)",
                              what, name, reason.empty() ? "no reason recorded" : reason));
}

void NcclCommunicator::Impl::check_usable(const char* what) const {
  if (aborted_.load()) throw_aborted(what);
  if (finalized_) throw CommError(ErrorKind::kComm, fmt::format("{}: NCCL group '{}' was finalized", what, name));
}

ncclResult_t NcclCommunicator::Impl::async_state() {
  return locked_call([](ncclComm_t c) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(c, &state);
    return r != ncclSuccess ? r : state;
  });
}

std::string NcclCommunicator::Impl::last_nccl_error() {
  std::lock_guard lock(nccl_mu_);
  const char* text = ncclGetLastError(comm_);
  return text ? text : "";
}

// --- Work ---------------------------------------------------------------------

namespace detail {

void NcclWork::wait() {
  const auto blocked_from = std::chrono::steady_clock::now();
  comm_->wait(*op_);
  detail::add_blocked_wait(std::chrono::steady_clock::now() - blocked_from);
  order_caller_stream();
}

bool NcclWork::test() { return comm_->test(*op_); }

void NcclWork::stream_wait() {
  (void)comm_->test(*op_);
  order_caller_stream();
}

void NcclWork::order_caller_stream() {
  // After wait() the host has seen the event complete, so this costs the GPU
  // nothing; after stream_wait() it is the whole wait, on the device.
  HT_CUDA_CHECK(cudaStreamWaitEvent(ht::cuda::current_stream(), op_->done.get(), 0));
}

}  // namespace detail
}  // namespace ht::comm
