// ht::comm::Communicator: the collective operations every backend implements
// (MPI for host tensors, NCCL for CUDA tensors), over one group of ranks.
//
// Every call is asynchronous and returns a Work (see work.h). Calls on one
// communicator execute in the order they were made, and every rank of the
// group must make the same calls in the same order (as in MPI and NCCL);
// HT_COMM_DEBUG=1 checks that before each collective and reports a mismatch
// instead of hanging. In-place: pass the same tensor as input and output.
// Element counts are per rank; dtypes f32, f16, bf16, i32 (f16/bf16 sums
// accumulate in f32). Composites (bucketed reductions, object broadcast) are
// free functions on top, not members.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ht/comm/work.h"
#include "ht/core/tensor.h"

namespace ht::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
std::string reduce_op_name(ReduceOp op);

struct CommOptions {
  /// Deadline of every operation, from its enqueue (HT_COMM_TIMEOUT, seconds).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  /// Verify before each collective that all ranks call the same operation
  /// with the same count and dtype (HT_COMM_DEBUG=1). Costs one small
  /// exchange per collective.
  bool debug = false;
  /// Where flight-recorder dumps go on a timeout, an abort or a fatal signal
  /// (empty: the current directory).
  std::string run_dir;
  /// Operations remembered by the flight recorder.
  int flight_recorder_entries = 1000;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The group's name ("world", "dp.1", "tp.0"), used in messages and dumps.
  virtual const std::string& name() const = 0;
  /// Where its tensors must live: Device::cpu() for MPI, a CUDA device for NCCL.
  virtual Device device() const = 0;

  /// out = op over ranks of in; in and out have the same count.
  virtual WorkPtr all_reduce(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  /// in holds size() * n elements; out (n) gets block rank() of the reduction.
  virtual WorkPtr reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  /// in holds n elements; out (size() * n) gets every rank's block in rank order.
  virtual WorkPtr all_gather(const Tensor& in, Tensor& out) = 0;
  /// t on `root` is copied to every rank's t.
  virtual WorkPtr broadcast(Tensor& t, int root) = 0;
  /// out on `root` = op over ranks of in (out is ignored elsewhere).
  virtual WorkPtr reduce(const Tensor& in, Tensor& out, ReduceOp op, int root) = 0;
  /// in and out hold size() blocks of n; block j of in goes to rank j, block
  /// i of out comes from rank i.
  virtual WorkPtr all_to_all(const Tensor& in, Tensor& out) = 0;
  /// The all-to-all of uneven blocks (MPI_Alltoallv): `in` holds this
  /// rank's blocks for ranks 0, 1, ... packed in rank order, send_counts[r]
  /// elements for rank r; `out` receives recv_counts[r] elements from rank
  /// r, packed in rank order. Rank a's send_counts[b] must equal rank b's
  /// recv_counts[a] (exchange the counts first, with all_to_all of an i32
  /// tensor); zeros are allowed. Not in place. Mixtures of experts'
  /// dispatch and combine.
  virtual WorkPtr all_to_all_v(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                               const std::vector<std::int64_t>& recv_counts) = 0;
  virtual WorkPtr send(const Tensor& t, int peer) = 0;
  virtual WorkPtr recv(Tensor& t, int peer) = 0;
  /// Sends to `dst` and receives from `src` at once (no ordering deadlock).
  virtual WorkPtr send_recv(const Tensor& send, int dst, Tensor& recv, int src) = 0;
  virtual WorkPtr barrier() = 0;

  /// A communicator over the ranks that pass the same `color`, ordered by
  /// (key, rank). Collective over this communicator. `name` names the new group.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  /// Completes outstanding work and releases the group, waiting at most
  /// `timeout`; throws CommTimeout if peers do not finish. Idempotent.
  virtual void finalize(std::chrono::milliseconds timeout) = 0;
  /// Abandons outstanding work: never blocks, never throws; callable from a
  /// watchdog thread. Every later call throws CommError.
  virtual void abort() noexcept = 0;

  /// CPU time (ms) used so far by the threads this communicator runs for
  /// itself (an MPI group's communication thread, where its transfers are
  /// copied); 0 for one that runs none. What a transfer took from the cores,
  /// which its wall time does not tell (most of that may be waiting).
  virtual double own_threads_cpu_ms() const { return 0; }

  /// Whether it runs in debug mode (CommOptions::debug, HT_COMM_DEBUG=1):
  /// the layers above check more then too (a pipeline sends every transfer's
  /// shape ahead of it, not only the first's).
  virtual bool debug() const { return false; }
};

}  // namespace ht::comm
