// Private: one operation of an MpiCommunicator as the communication thread
// sees it — its description (for messages, the flight recorder and the
// debug-mode check), its completion state shared with Work handles, and how
// to issue and finish it in MPI.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/mpi_handles.h"
#include "ht/comm/communicator.h"
#include "ht/core/tensor.h"

namespace ht::comm::detail {

enum class OpKind : std::int32_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kAllToAllV,
  kBarrier,
  kSplit,
  kSend,
  kRecv,
  kSendRecv,
};
const char* op_kind_name(OpKind k);
/// Collectives are numbered in one sequence per communicator (the same on
/// every rank of the group); point-to-point calls in another.
inline bool is_collective(OpKind k) { return k != OpKind::kSend && k != OpKind::kRecv && k != OpKind::kSendRecv; }

/// What every rank of a group must agree on for one collective, exchanged as
/// fixed-size bytes in debug mode. `root` is -1 where there is none, `redop`
/// -1 for collectives that do not reduce, `count` the per-rank element count
/// as the caller states it (0 for barrier and split).
struct OpSignature {
  std::uint64_t seq = 0;
  std::int64_t count = 0;
  std::int32_t kind = 0;
  std::int32_t dtype = 0;
  std::int32_t root = -1;
  std::int32_t redop = -1;
  friend bool operator==(const OpSignature&, const OpSignature&) = default;
};
/// "all_reduce(1000 x f32, sum)", "broadcast(8 x i32, root 1)", "barrier()".
std::string signature_str(const OpSignature& s);

/// The completion of one operation: settled once by the communication thread
/// (or by a timing-out waiter), waited on by any number of Work handles.
struct WorkState {
  OpSignature sig;            // what was called (seq is the collective or p2p number)
  std::string group;          // communicator name
  int peer = -1, peer2 = -1;  // send/recv peer; send_recv: dst, src
  std::chrono::steady_clock::time_point deadline;
  std::uint64_t recorder_id = 0;

  enum Status : int { kPending = 0, kDone = 1, kFailed = 2 };
  std::atomic<int> status{kPending};
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;

  /// Completes (null `e`) or fails the operation; the first call wins and
  /// wakes every waiter, after running `before_wake` (if it won). Returns
  /// whether this call settled it.
  bool settle(std::exception_ptr e, const std::function<void()>& before_wake = {});
  /// "all_reduce #42 on group 'world' (1048576 x f32)", "send #3 to rank 1 on group 'world' (8 x i32)".
  std::string describe() const;
};

/// How to run one operation: `start` issues the nonblocking MPI calls into
/// the request set on the communication thread; `next`, if set, is called
/// each time every request has completed and issues the next step (returning
/// true) or returns false when there is none; `finish`, once the last step
/// has completed, converts and checks results. All may throw (the operation
/// then fails). Scratch buffers live in the closures until the Op is gone.
/// An operation with steps runs alone: nothing else starts while it is in
/// flight, so that its point-to-point messages (one tag) cannot be matched
/// by another operation's receives.
struct OpBody {
  std::function<void(MPI_Comm, RequestSet&)> start;
  std::function<bool(MPI_Comm, RequestSet&)> next;
  std::function<void(const RequestSet&)> finish;
  /// A receive that learns its message's size before it takes it: called
  /// (after start) until it returns true, having posted its receive into a
  /// buffer the message fits (MPI_Improbe, MPI_Imrecv). A receive posted
  /// smaller than its message is unsafe: Open MPI's shared-memory single
  /// copy then writes past the buffer (a heap corrupted, not an error).
  std::function<bool(MPI_Comm, RequestSet&)> match;
  /// Bytes this rank moves; sizes how long the thread spins before backing off.
  std::size_t payload_bytes = 0;
  /// Its requests are point-to-point only (send, recv, ring steps), so an
  /// abandoned one may be cancelled at shutdown.
  bool point_to_point = false;
};

struct SplitRequest;  // comm/mpi_worker.h

/// One queued or in-flight operation.
struct Op {
  std::shared_ptr<WorkState> work;
  OpBody body;
  RequestSet requests;
  bool matched = false;  // body.match has posted its receive
  /// Debug mode: every rank's signature, gathered on the control
  /// communicator before the operation is issued; split: its exchanges. MPI
  /// writes `gathered` until `check_requests` complete.
  std::vector<OpSignature> gathered;
  RequestSet check_requests;
  std::shared_ptr<SplitRequest> split;  // kSplit only
};

// Bodies of the operations, over arguments already validated by the
// communicator. `tag` is the point-to-point tag; rank/size are the group's.
OpBody all_reduce_body(const Tensor& in, const Tensor& out, ReduceOp op, int rank, int size);
OpBody reduce_scatter_body(const Tensor& in, const Tensor& out, ReduceOp op, int rank, int size);
OpBody all_gather_body(const Tensor& in, const Tensor& out, int rank, int size);
OpBody broadcast_body(const Tensor& t, int root);
OpBody reduce_body(const Tensor& in, const Tensor& out, ReduceOp op, int root, int rank, int size);
OpBody all_to_all_body(const Tensor& in, const Tensor& out, int size);
OpBody all_to_all_v_body(const Tensor& in, const std::vector<std::int64_t>& send_counts, const Tensor& out,
                         const std::vector<std::int64_t>& recv_counts);
OpBody send_body(const Tensor& t, int peer, int tag);
OpBody recv_body(const Tensor& t, int peer, int tag);
OpBody send_recv_body(const Tensor& send, int dst, const Tensor& recv, int src, int tag);
OpBody barrier_body();

}  // namespace ht::comm::detail
