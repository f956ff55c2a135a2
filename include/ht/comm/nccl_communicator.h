// ht::comm::NcclCommunicator: the Communicator for CUDA tensors, over NCCL.
// The NCCL unique id is bootstrapped through a host Communicator (MPI), so
// this header depends on no MPI, CUDA or NCCL header.
//
// Streams and ordering. Each communicator owns one non-blocking CUDA stream.
// A call first makes that stream wait for the work already enqueued on the
// calling thread's current stream (ht::cuda::current_stream(), the legacy
// default stream unless set), so inputs produced by earlier kernels are
// ready, then enqueues the NCCL operation on its own stream and returns. The
// Work's wait() blocks the host until the operation completed (or its
// deadline passed) and also makes the caller's current stream wait for it.
//
// Reductions. f16 and bf16 sums and averages are computed in f32, as the MPI
// backend does: the input is cast to an f32 scratch buffer on the device,
// reduced there, and cast back (so they move twice the bytes of a raw NCCL
// f16 reduction). max and min reduce in the element type (exact). avg of
// i32 is not supported (kNotSupported), as in the MPI backend.
//
// Failures. NCCL communicators are created non-blocking; every NCCL call is
// followed by polling ncclCommGetAsyncError, and waits have the deadline of
// CommOptions::timeout from enqueue. On a deadline the communicator is
// aborted (ncclCommAbort), the flight recorder dumped to
// CommOptions::run_dir, and CommTimeout thrown. NCCL cannot report which
// ranks arrived: CommTimeout::arrived() holds this rank only and missing()
// every other rank. An asynchronous NCCL error aborts the communicator and
// throws CommError with NCCL's message.
//
// Lifetimes. The communicator holds a reference to every tensor an
// operation touches (and to its scratch buffers) until it has seen the
// operation complete, so a caller may drop its handles early without the
// memory being freed under NCCL. Works keep the communicator's state alive.
//
// Debug mode (CommOptions::debug): before each collective the ranks
// all-gather a signature (operation, count, dtype, root, reduction, number
// of the collective) and every rank throws CommError listing each rank's call
// if they differ. This synchronises the host with the device per collective.
//
// Thread-safety: calls that enqueue work are serialised by a mutex (NCCL
// requires one thread at a time per communicator); abort() may be called
// from any thread at any time. ncclCommAbort itself may wait for the device
// work queued on our stream before the aborted operation (such as the
// caller's kernels it was ordered after).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ht/comm/communicator.h"

namespace ht::comm {

class NcclCommunicator final : public Communicator {
 public:
  struct Impl;  // private; defined in src/comm/nccl_state.h

  /// Takes over a ready communicator state (use make_nccl_world or split).
  explicit NcclCommunicator(std::shared_ptr<Impl> impl);
  /// Aborts the communicator unless finalize() completed; never throws.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  const std::string& name() const override;
  bool debug() const override;
  /// The CUDA device every tensor passed in must live on.
  Device device() const override;

  WorkPtr all_reduce(const Tensor& in, Tensor& out, ReduceOp op) override;
  /// In place: out may be the block rank() of in (NCCL's convention).
  WorkPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  /// In place: in may be the block rank() of out (NCCL's convention).
  WorkPtr all_gather(const Tensor& in, Tensor& out) override;
  WorkPtr broadcast(Tensor& t, int root) override;
  /// `out` must be defined on root only.
  WorkPtr reduce(const Tensor& in, Tensor& out, ReduceOp op, int root) override;
  /// In place (in and out the same tensor) costs a copy of the input.
  WorkPtr all_to_all(const Tensor& in, Tensor& out) override;
  /// Grouped ncclSend/ncclRecv of the blocks that are not empty.
  WorkPtr all_to_all_v(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                       const std::vector<std::int64_t>& recv_counts) override;
  /// A send to or receive from this rank itself would never complete: use
  /// send_recv with dst == src == rank().
  WorkPtr send(const Tensor& t, int peer) override;
  WorkPtr recv(Tensor& t, int peer) override;
  /// dst and src are both this rank, or neither is.
  WorkPtr send_recv(const Tensor& send, int dst, Tensor& recv, int src) override;
  /// An all_reduce of one i32 on a device scratch buffer.
  WorkPtr barrier() override;

  /// ncclCommSplit with a non-blocking configuration. Waits (at most the
  /// timeout) until the new communicator is ready. A negative `color` takes
  /// part in the split but joins no group: returns nullptr (as MPI's).
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  /// Waits for outstanding work, then ncclCommFinalize (polled until done)
  /// and ncclCommDestroy, all within `timeout`. Throws CommTimeout (after
  /// aborting) if that does not finish, CommError if the communicator was
  /// aborted before. A second call returns at once.
  void finalize(std::chrono::milliseconds timeout) override;
  /// ncclCommAbort, and a flight-recorder dump; never throws. Waits at most
  /// for one non-blocking NCCL call in progress on another thread.
  void abort() noexcept override;

 private:
  std::shared_ptr<Impl> impl_;
};

/// Creates the NCCL communicator "world" over the ranks of `host_world` (a
/// communicator of host tensors, such as MPI's world), with rank r of the
/// host world as NCCL rank r, using CUDA device `device` on this process.
/// Collective over host_world: rank 0 creates the NCCL unique id and
/// broadcasts it as a host i32 tensor. Waits at most options.timeout for
/// NCCL to initialise. Throws kInvalidArgument for a bad device, kNotSupported
/// in a build without NCCL, CommError / CommTimeout if NCCL fails.
std::unique_ptr<Communicator> make_nccl_world(Communicator& host_world, int device, const CommOptions& options = {});

/// Whether this build has the NCCL backend.
bool nccl_compiled();
/// The NCCL library version in use ("2.28.9"), or "" without NCCL.
std::string nccl_version();

}  // namespace ht::comm
