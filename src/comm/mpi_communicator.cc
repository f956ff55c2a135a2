// MpiCommunicator: argument checks on the caller's thread, Work handles, and
// the world factory. The operations themselves run in comm/mpi_engine.cc.
#include "ht/comm/mpi_communicator.h"

#include <climits>
#include <thread>

#include "comm/mpi_engine.h"
#include "core/mpi_check.h"
#include "ht/comm/mpi_runtime.h"

namespace ht::comm {

using detail::Engine;
using detail::Op;
using detail::OpBody;
using detail::OpKind;
using detail::OpSignature;
using detail::WorkState;

namespace {

// A Work is one WorkState plus the engine that can diagnose its deadline
// (keeping the engine alive: a Work may outlive its communicator).
class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<Engine> engine, std::shared_ptr<WorkState> state)
      : engine_(std::move(engine)), state_(std::move(state)) {}

  void wait() override {
    // No spinning here: the communication thread spins for both. A waiter
    // that spins (even yielding) competes with that thread for the core and
    // was measured to make an 8-byte all_reduce 95 us instead of 5.5 us (2
    // ranks on 2 busy cores); blocking costs one futex wake-up.
    if (state_->status.load() == WorkState::kPending) {
      std::unique_lock lock(state_->mu);
      state_->cv.wait_until(lock, state_->deadline,
                            [&] { return state_->status.load() != WorkState::kPending; });
    }
    if (state_->status.load() == WorkState::kPending) engine_->on_deadline(*state_);
    rethrow_if_failed();
  }

  bool test() override {
    if (state_->status.load() == WorkState::kPending) {
      if (std::chrono::steady_clock::now() < state_->deadline) return false;
      engine_->on_deadline(*state_);
    }
    rethrow_if_failed();
    return true;
  }

 private:
  void rethrow_if_failed() {
    if (state_->status.load() != WorkState::kFailed) return;
    std::exception_ptr e;
    {
      std::lock_guard lock(state_->mu);
      e = state_->error;
    }
    std::rethrow_exception(e);
  }

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<WorkState> state_;
};

// Argument checks, each naming the operation and the group.
class Check {
 public:
  Check(const char* op, const Engine& e) : op_(op), e_(e) {}

  [[noreturn]] void fail(ErrorKind kind, const std::string& what) const {
    throw Error(kind, fmt::format("{} on group '{}' (rank {} of {}): {}", op_, e_.name(), e_.rank(), e_.size(), what));
  }
  void tensor(const Tensor& t, const char* arg) const {
    if (!t.defined()) fail(ErrorKind::kInvalidArgument, fmt::format("{} is an undefined tensor", arg));
    if (!t.device().is_cpu())
      fail(ErrorKind::kDeviceMismatch,
           fmt::format("{} is on {}, but an MPI communicator carries host tensors: use a NCCL communicator for CUDA "
                       "tensors, or copy it to the CPU",
                       arg, t.device().str()));
    if (t.numel() > INT_MAX)
      fail(ErrorKind::kNotSupported,
           fmt::format("{} has {} elements, more than the {} one MPI call can carry: split it into chunks", arg,
                       t.numel(), INT_MAX));
  }
  void same_dtype(const Tensor& a, const char* an, const Tensor& b, const char* bn) const {
    if (a.dtype() != b.dtype())
      fail(ErrorKind::kDTypeMismatch,
           fmt::format("{} is {} but {} is {}; they must match", an, dtype_name(a.dtype()), bn, dtype_name(b.dtype())));
  }
  void count(bool ok, const std::string& what) const {
    if (!ok) fail(ErrorKind::kShapeMismatch, what);
  }
  void reduce_op(DType t, ReduceOp op) const {
    if (t == DType::kI32 && op == ReduceOp::kAvg)
      fail(ErrorKind::kNotSupported,
           "avg of i32 is not supported (an integer mean would have to round): reduce with sum and divide, or "
           "convert to f32");
  }
  void rank(int r, const char* what) const {
    if (r < 0 || r >= e_.size())
      fail(ErrorKind::kOutOfRange, fmt::format("{} {} is not a rank of this group of {}", what, r, e_.size()));
  }
  /// `a` and `b` must be the same bytes (when `same_ok`), `b` exactly at
  /// `expected_b` (an in-place block), or not overlap at all.
  void overlap(const Tensor& a, const char* an, const Tensor& b, const char* bn, const void* allowed_b,
               const char* allowed_form) const {
    if (a.nbytes() == 0 || b.nbytes() == 0 || !same_storage(a, b)) return;
    if (allowed_b && b.data_ptr() == allowed_b) return;
    fail(ErrorKind::kInvalidArgument,
         fmt::format("{} and {} overlap; pass {}, or tensors that do not overlap", an, bn, allowed_form));
  }

 private:
  const char* op_;
  const Engine& e_;
};

OpSignature signature(OpKind kind, std::int64_t count, DType dtype, int root = -1, int redop = -1) {
  OpSignature s;
  s.kind = std::int32_t(kind);
  s.count = count;
  s.dtype = std::int32_t(dtype);
  s.root = root;
  s.redop = redop;
  return s;
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {}

// The engine itself may live on in Work handles; its thread does not.
MpiCommunicator::~MpiCommunicator() { engine_->shutdown(); }

int MpiCommunicator::rank() const { return engine_->rank(); }
int MpiCommunicator::size() const { return engine_->size(); }
const std::string& MpiCommunicator::name() const { return engine_->name(); }

namespace {
WorkPtr submit(const std::shared_ptr<Engine>& engine, OpSignature sig, OpBody body, int peer = -1, int peer2 = -1) {
  auto op = std::make_unique<Op>();
  op->work = std::make_shared<WorkState>();
  op->work->sig = sig;
  op->work->peer = peer;
  op->work->peer2 = peer2;
  op->body = std::move(body);
  auto state = op->work;
  engine->enqueue(std::move(op));
  return std::make_shared<MpiWork>(engine, std::move(state));
}
}  // namespace

WorkPtr MpiCommunicator::all_reduce(const Tensor& in, Tensor& out, ReduceOp op) {
  const Check c("all_reduce", *engine_);
  engine_->check_usable();
  c.tensor(in, "in");
  c.tensor(out, "out");
  c.same_dtype(in, "in", out, "out");
  c.count(in.numel() == out.numel(),
          fmt::format("in has {} elements but out has {}; they must match", in.numel(), out.numel()));
  c.reduce_op(in.dtype(), op);
  c.overlap(in, "in", out, "out", in.data_ptr(), "the same tensor as in and out for in-place");
  return submit(engine_, signature(OpKind::kAllReduce, in.numel(), in.dtype(), -1, int(op)),
                detail::all_reduce_body(in, out, op, rank(), size()));
}

WorkPtr MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  const Check c("reduce_scatter", *engine_);
  engine_->check_usable();
  c.tensor(in, "in");
  c.tensor(out, "out");
  c.same_dtype(in, "in", out, "out");
  c.count(in.numel() == std::int64_t(size()) * out.numel(),
          fmt::format("in has {} elements but must hold size() x out = {} x {} = {}", in.numel(), size(), out.numel(),
                      std::int64_t(size()) * out.numel()));
  c.reduce_op(in.dtype(), op);
  const void* own_block = static_cast<const char*>(in.data_ptr()) + std::size_t(rank()) * out.nbytes();
  c.overlap(in, "in", out, "out", own_block, "out = block rank() of in for in-place");
  return submit(engine_, signature(OpKind::kReduceScatter, out.numel(), in.dtype(), -1, int(op)),
                detail::reduce_scatter_body(in, out, op, rank(), size()));
}

WorkPtr MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  const Check c("all_gather", *engine_);
  engine_->check_usable();
  c.tensor(in, "in");
  c.tensor(out, "out");
  c.same_dtype(in, "in", out, "out");
  c.count(out.numel() == std::int64_t(size()) * in.numel(),
          fmt::format("out has {} elements but must hold size() x in = {} x {} = {}", out.numel(), size(), in.numel(),
                      std::int64_t(size()) * in.numel()));
  const void* own_block = static_cast<const char*>(out.data_ptr()) + std::size_t(rank()) * in.nbytes();
  c.overlap(out, "out", in, "in", own_block, "in = block rank() of out for in-place");
  return submit(engine_, signature(OpKind::kAllGather, in.numel(), in.dtype()),
                detail::all_gather_body(in, out, rank(), size()));
}

WorkPtr MpiCommunicator::broadcast(Tensor& t, int root) {
  const Check c("broadcast", *engine_);
  engine_->check_usable();
  c.tensor(t, "t");
  c.rank(root, "root");
  return submit(engine_, signature(OpKind::kBroadcast, t.numel(), t.dtype(), root), detail::broadcast_body(t, root));
}

WorkPtr MpiCommunicator::reduce(const Tensor& in, Tensor& out, ReduceOp op, int root) {
  const Check c("reduce", *engine_);
  engine_->check_usable();
  c.tensor(in, "in");
  c.rank(root, "root");
  c.reduce_op(in.dtype(), op);
  if (rank() == root) {
    c.tensor(out, "out (on the root)");
    c.same_dtype(in, "in", out, "out");
    c.count(in.numel() == out.numel(),
            fmt::format("in has {} elements but out has {}; they must match", in.numel(), out.numel()));
    c.overlap(in, "in", out, "out", in.data_ptr(), "the same tensor as in and out for in-place");
  }
  return submit(engine_, signature(OpKind::kReduce, in.numel(), in.dtype(), root, int(op)),
                detail::reduce_body(in, out, op, root, rank(), size()));
}

WorkPtr MpiCommunicator::all_to_all(const Tensor& in, Tensor& out) {
  const Check c("all_to_all", *engine_);
  engine_->check_usable();
  c.tensor(in, "in");
  c.tensor(out, "out");
  c.same_dtype(in, "in", out, "out");
  c.count(in.numel() == out.numel(),
          fmt::format("in has {} elements but out has {}; they must match", in.numel(), out.numel()));
  c.count(in.numel() % size() == 0, fmt::format("in has {} elements, not a multiple of the group size {}: it must "
                                                "hold size() blocks of equal length",
                                                in.numel(), size()));
  c.overlap(in, "in", out, "out", in.data_ptr(), "the same tensor as in and out for in-place");
  return submit(engine_, signature(OpKind::kAllToAll, in.numel(), in.dtype()),
                detail::all_to_all_body(in, out, size()));
}

namespace {
constexpr int kP2pTag = 7;
}

WorkPtr MpiCommunicator::send(const Tensor& t, int peer) {
  const Check c("send", *engine_);
  engine_->check_usable();
  c.tensor(t, "t");
  c.rank(peer, "peer");
  return submit(engine_, signature(OpKind::kSend, t.numel(), t.dtype()), detail::send_body(t, peer, kP2pTag), peer);
}

WorkPtr MpiCommunicator::recv(Tensor& t, int peer) {
  const Check c("recv", *engine_);
  engine_->check_usable();
  c.tensor(t, "t");
  c.rank(peer, "peer");
  return submit(engine_, signature(OpKind::kRecv, t.numel(), t.dtype()), detail::recv_body(t, peer, kP2pTag), peer);
}

WorkPtr MpiCommunicator::send_recv(const Tensor& send, int dst, Tensor& recv, int src) {
  const Check c("send_recv", *engine_);
  engine_->check_usable();
  c.tensor(send, "send");
  c.tensor(recv, "recv");
  c.rank(dst, "dst");
  c.rank(src, "src");
  return submit(engine_, signature(OpKind::kSendRecv, send.numel(), send.dtype()),
                detail::send_recv_body(send, dst, recv, src, kP2pTag), dst, src);
}

WorkPtr MpiCommunicator::barrier() {
  engine_->check_usable();
  return submit(engine_, signature(OpKind::kBarrier, 0, DType::kF32), detail::barrier_body());
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  const Check c("split", *engine_);
  engine_->check_usable();
  if (name.empty()) c.fail(ErrorKind::kInvalidArgument, "the new group needs a name (e.g. \"dp.0\")");
  auto op = std::make_unique<Op>();
  op->work = std::make_shared<WorkState>();
  op->work->sig = signature(OpKind::kSplit, 0, DType::kF32);
  op->split = std::make_shared<detail::SplitRequest>();
  op->split->color = color;
  op->split->key = key;
  auto request = op->split;
  auto state = op->work;
  engine_->enqueue(std::move(op));
  MpiWork(engine_, state).wait();
  if (!request->data) return nullptr;
  auto engine = std::make_shared<Engine>(std::move(request->data), std::move(request->control), name,
                                         engine_->options());
  return std::make_unique<MpiCommunicator>(std::move(engine));
}

void MpiCommunicator::finalize(std::chrono::milliseconds timeout) { engine_->finalize(timeout); }

void MpiCommunicator::abort() noexcept { engine_->abort("abort() was called"); }

CallerPathCounts MpiCommunicator::caller_path_counts() const { return engine_->caller_path_counts(); }

std::unique_ptr<Communicator> make_mpi_world(const CommOptions& options) {
  HT_CHECK(mpi_is_initialized(), ErrorKind::kConfig,
           "make_mpi_world: MPI is not initialised; create an ht::comm::MpiRuntime at the top of main() first");
  int provided = MPI_THREAD_SINGLE;
  HT_MPI_CHECK(MPI_Query_thread(&provided));
  HT_CHECK(provided >= MPI_THREAD_MULTIPLE, ErrorKind::kConfig,
           "make_mpi_world: MPI was initialised without MPI_THREAD_MULTIPLE, which MPI communicators need (they call "
           "MPI from their own threads); let ht::comm::MpiRuntime initialise MPI");
  HT_CHECK(options.timeout.count() > 0, ErrorKind::kConfig, "make_mpi_world: timeout must be positive, got {} ms",
           options.timeout.count());
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  detail::MpiComm comms[2];
  for (auto& comm : comms) {
    MPI_Comm c = MPI_COMM_NULL;
    if (!detail::idup_until(MPI_COMM_WORLD, &c, deadline))
      throw CommTimeout(fmt::format("creating communicator 'world' (MPI_Comm_idup of MPI_COMM_WORLD) did not complete "
                                    "within {} ms: some rank did not call make_mpi_world",
                                    options.timeout.count()),
                        {}, {});
    comm = detail::MpiComm(c);
  }
  auto engine = std::make_shared<Engine>(std::move(comms[0]), std::move(comms[1]), "world", options);
  return std::make_unique<MpiCommunicator>(std::move(engine));
}

}  // namespace ht::comm
