// MpiCommunicator: argument checks on the caller's thread, Work handles, and
// the world factory. The operations themselves run in comm/mpi_worker.cc.
#include "ht/comm/mpi_communicator.h"

#include <climits>
#include <thread>

#include "comm/collective_args.h"
#include "comm/mpi_worker.h"
#include "core/mpi_check.h"
#include "ht/comm/mpi_runtime.h"

namespace ht::comm {

using detail::CollectiveGroup;
using detail::MpiWorker;
using detail::Op;
using detail::OpBody;
using detail::OpKind;
using detail::OpSignature;
using detail::WorkState;
using detail::throw_argument_error;

namespace {

// A Work is one WorkState plus the engine that can diagnose its deadline
// (keeping the engine alive: a Work may outlive its communicator).
class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<MpiWorker> engine, std::shared_ptr<WorkState> state)
      : engine_(std::move(engine)), state_(std::move(state)) {}

  void wait() override {
    // No spinning here: the communication thread spins for both. A waiter
    // that spins (even yielding) competes with that thread for the core and
    // was measured to make an 8-byte all_reduce 95 us instead of 5.5 us (2
    // ranks on 2 busy cores); blocking costs one futex wake-up.
    if (state_->status.load() == WorkState::kPending) {
      const auto blocked_from = std::chrono::steady_clock::now();
      std::unique_lock lock(state_->mu);
      state_->cv.wait_until(lock, state_->deadline,
                            [&] { return state_->status.load() != WorkState::kPending; });
      detail::add_blocked_wait(std::chrono::steady_clock::now() - blocked_from);
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

  std::shared_ptr<MpiWorker> engine_;
  std::shared_ptr<WorkState> state_;
};

// An MPI communicator carries host tensors whose counts fit one MPI call.
void check_host_tensor(const CollectiveGroup& g, const char* op, const Tensor& t, std::string_view arg) {
  if (!t.device().is_cpu())
    throw_argument_error(g, op, ErrorKind::kDeviceMismatch,
                         fmt::format("{} is on {}, but an MPI communicator carries host tensors: use a NCCL "
                                     "communicator for CUDA tensors, or copy it to the CPU",
                                     arg, t.device().str()));
  if (t.numel() > INT_MAX)
    throw_argument_error(g, op, ErrorKind::kNotSupported,
                         fmt::format("{} has {} elements, more than the {} one MPI call can carry: split it into chunks",
                                     arg, t.numel(), INT_MAX));
}

/// The group as the shared argument checks (comm/collective_args.h) name it.
CollectiveGroup group_of(const MpiWorker& e) {
  return CollectiveGroup{"MPI", e.name(), e.rank(), e.size(), Device::cpu(), &check_host_tensor};
}

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

MpiCommunicator::MpiCommunicator(std::shared_ptr<MpiWorker> engine) : engine_(std::move(engine)) {}

// The engine itself may live on in Work handles; its thread does not.
MpiCommunicator::~MpiCommunicator() { engine_->shutdown(); }

int MpiCommunicator::rank() const { return engine_->rank(); }
int MpiCommunicator::size() const { return engine_->size(); }
const std::string& MpiCommunicator::name() const { return engine_->name(); }

namespace {
WorkPtr submit(const std::shared_ptr<MpiWorker>& engine, OpSignature sig, OpBody body, int peer = -1, int peer2 = -1) {
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
  engine_->check_usable();
  detail::check_all_reduce_args(group_of(*engine_), in, out, op);
  return submit(engine_, signature(OpKind::kAllReduce, in.numel(), in.dtype(), -1, int(op)),
                detail::all_reduce_body(in, out, op, rank(), size()));
}

WorkPtr MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  engine_->check_usable();
  detail::check_reduce_scatter_args(group_of(*engine_), in, out, op);
  return submit(engine_, signature(OpKind::kReduceScatter, out.numel(), in.dtype(), -1, int(op)),
                detail::reduce_scatter_body(in, out, op, rank(), size()));
}

WorkPtr MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  engine_->check_usable();
  detail::check_all_gather_args(group_of(*engine_), in, out);
  return submit(engine_, signature(OpKind::kAllGather, in.numel(), in.dtype()),
                detail::all_gather_body(in, out, rank(), size()));
}

WorkPtr MpiCommunicator::broadcast(Tensor& t, int root) {
  engine_->check_usable();
  detail::check_broadcast_args(group_of(*engine_), t, root);
  return submit(engine_, signature(OpKind::kBroadcast, t.numel(), t.dtype(), root), detail::broadcast_body(t, root));
}

WorkPtr MpiCommunicator::reduce(const Tensor& in, Tensor& out, ReduceOp op, int root) {
  engine_->check_usable();
  detail::check_reduce_args(group_of(*engine_), in, out, op, root);
  return submit(engine_, signature(OpKind::kReduce, in.numel(), in.dtype(), root, int(op)),
                detail::reduce_body(in, out, op, root, rank(), size()));
}

WorkPtr MpiCommunicator::all_to_all(const Tensor& in, Tensor& out) {
  engine_->check_usable();
  detail::check_all_to_all_args(group_of(*engine_), in, out);
  return submit(engine_, signature(OpKind::kAllToAll, in.numel(), in.dtype()),
                detail::all_to_all_body(in, out, size()));
}

WorkPtr MpiCommunicator::all_to_all_v(const Tensor& in, const std::vector<std::int64_t>& send_counts, Tensor& out,
                                      const std::vector<std::int64_t>& recv_counts) {
  engine_->check_usable();
  detail::check_all_to_all_v_args(group_of(*engine_), in, send_counts, out, recv_counts);
  // The ranks' counts differ: the debug check compares the group's size.
  return submit(engine_, signature(OpKind::kAllToAllV, size(), in.dtype()),
                detail::all_to_all_v_body(in, send_counts, out, recv_counts));
}

namespace {
constexpr int kP2pTag = 7;
}

WorkPtr MpiCommunicator::send(const Tensor& t, int peer) {
  engine_->check_usable();
  detail::check_point_to_point_args(group_of(*engine_), "send", t, peer);
  return submit(engine_, signature(OpKind::kSend, t.numel(), t.dtype()), detail::send_body(t, peer, kP2pTag), peer);
}

WorkPtr MpiCommunicator::recv(Tensor& t, int peer) {
  engine_->check_usable();
  detail::check_point_to_point_args(group_of(*engine_), "recv", t, peer);
  return submit(engine_, signature(OpKind::kRecv, t.numel(), t.dtype()), detail::recv_body(t, peer, kP2pTag), peer);
}

WorkPtr MpiCommunicator::send_recv(const Tensor& send, int dst, Tensor& recv, int src) {
  engine_->check_usable();
  detail::check_send_recv_args(group_of(*engine_), send, dst, recv, src);
  return submit(engine_, signature(OpKind::kSendRecv, send.numel(), send.dtype()),
                detail::send_recv_body(send, dst, recv, src, kP2pTag), dst, src);
}

WorkPtr MpiCommunicator::barrier() {
  engine_->check_usable();
  return submit(engine_, signature(OpKind::kBarrier, 0, DType::kF32), detail::barrier_body());
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  engine_->check_usable();
  if (name.empty())
    throw_argument_error(group_of(*engine_), "split", ErrorKind::kInvalidArgument,
                         "the new group needs a name (e.g. \"dp.0\")");
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
  auto engine = std::make_shared<MpiWorker>(std::move(request->data), std::move(request->control), name,
                                         engine_->options());
  return std::make_unique<MpiCommunicator>(std::move(engine));
}

void MpiCommunicator::finalize(std::chrono::milliseconds timeout) { engine_->finalize(timeout); }

void MpiCommunicator::abort() noexcept { engine_->abort("abort() was called"); }

CallerPathCounts MpiCommunicator::caller_path_counts() const { return engine_->caller_path_counts(); }

double MpiCommunicator::own_threads_cpu_ms() const { return engine_->thread_cpu_ms(); }
bool MpiCommunicator::debug() const { return engine_->options().debug; }

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
  auto engine = std::make_shared<MpiWorker>(std::move(comms[0]), std::move(comms[1]), "world", options);
  return std::make_unique<MpiCommunicator>(std::move(engine));
}

}  // namespace ht::comm
