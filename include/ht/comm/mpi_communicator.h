// ht::comm::MpiCommunicator: the Communicator for host tensors, over MPI.
//
// Each communicator owns two duplicates of its group's MPI communicator (one
// for data, one for small control messages) and one communication thread.
// Every call validates its arguments on the caller's thread (throwing
// ht::Error naming the operation, the group and the counts), then queues the
// operation and returns a Work at once; the thread issues nonblocking MPI
// calls in queue order and polls them, so the caller never blocks in MPI and
// compute on other threads overlaps communication. f16 and bf16 reductions
// are carried out in f32 (converted in, reduced, rounded back to nearest
// even); avg is the sum divided by the group size; avg of i32 is not
// supported (kNotSupported). Counts above INT_MAX elements per call are not
// supported. In-place forms: all_reduce, broadcast, reduce (root) and
// all_to_all with the same tensor as input and output; reduce_scatter with
// `out` = block rank() of `in`; all_gather with `in` = block rank() of `out`
// (NCCL's layouts). Any other overlap between input and output is an error.
//
// Deadlines: every operation must complete within CommOptions::timeout of
// its enqueue; a waiter that passes the deadline asks the other ranks where
// they are and throws CommTimeout naming those that did not arrive, dumps
// the flight recorder to CommOptions::run_dir, and the communicator is
// aborted. Asking takes at most min(5 s, timeout), also in Work::test()
// past the deadline. Debug mode (CommOptions::debug) checks before each collective
// that all ranks call the same operation.
//
// Thread-safety: all members may be called from any thread; operations
// queue in the order the calls return. Requires a live MpiRuntime (or MPI
// initialised with MPI_THREAD_MULTIPLE) for the communicator's whole life.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ht/comm/communicator.h"

namespace ht::comm {

namespace detail {
class MpiWorker;
}

/// Where the small collectives of an MpiCommunicator ran (see
/// docs/design.md, "Small collectives run on the caller's thread"):
/// completed on the caller's thread, or handed to the communication thread
/// because a peer was late.
struct CallerPathCounts {
  std::uint64_t completed_on_caller = 0;
  std::uint64_t handed_off = 0;
};

class MpiCommunicator final : public Communicator {
 public:
  /// Finalises nothing: if finalize() was not called it aborts (outstanding
  /// work fails with CommError) and joins the communication thread. Never throws.
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  const std::string& name() const override;
  Device device() const override { return Device::cpu(); }

  WorkPtr all_reduce(const Tensor& in, Tensor& out, ReduceOp op) override;
  WorkPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override;
  WorkPtr all_gather(const Tensor& in, Tensor& out) override;
  WorkPtr broadcast(Tensor& t, int root) override;
  /// `out` may be undefined on ranks other than `root`.
  WorkPtr reduce(const Tensor& in, Tensor& out, ReduceOp op, int root) override;
  WorkPtr all_to_all(const Tensor& in, Tensor& out) override;
  WorkPtr all_to_all_v(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                       const std::vector<std::int64_t>& recv_counts) override;
  WorkPtr send(const Tensor& t, int peer) override;
  WorkPtr recv(Tensor& t, int peer) override;
  WorkPtr send_recv(const Tensor& send, int dst, Tensor& recv, int src) override;
  WorkPtr barrier() override;

  /// Blocks until the split has run (at most the timeout). A negative
  /// `color` takes part in the split but joins no group: returns nullptr.
  /// The new communicator inherits this one's options.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  void finalize(std::chrono::milliseconds timeout) override;
  void abort() noexcept override;
  double own_threads_cpu_ms() const override;
  bool debug() const override;

  /// Diagnostics: where this communicator's small collectives ran so far.
  CallerPathCounts caller_path_counts() const;

  /// Internal: use make_mpi_world() or split().
  explicit MpiCommunicator(std::shared_ptr<detail::MpiWorker> engine);

 private:
  std::shared_ptr<detail::MpiWorker> engine_;
};

/// A communicator over all processes of the MPI job (a duplicate of
/// MPI_COMM_WORLD), named "world". Collective: every rank must call it.
/// Throws ht::Error(kConfig) if MPI is not initialised (create an MpiRuntime
/// first), CommTimeout if the other ranks do not join within options.timeout.
std::unique_ptr<Communicator> make_mpi_world(const CommOptions& options = {});

}  // namespace ht::comm
