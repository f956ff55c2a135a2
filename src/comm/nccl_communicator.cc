// NcclCommunicator's lifecycle: bootstrap of the world communicator through a
// host communicator, split, finalize, abort and destruction.
#include "ht/comm/nccl_communicator.h"

#include <cstring>

#include "comm/nccl_state.h"

namespace ht::comm {

using detail::Clock;
using detail::OpInfo;
using detail::PendingOp;

NcclCommunicator::NcclCommunicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {
  HT_CHECK(impl_ != nullptr, ErrorKind::kInternal, "NcclCommunicator needs a communicator state");
}

NcclCommunicator::~NcclCommunicator() {
  // A safety net: without finalize() the peers' state is unknown, so abort
  // (which never waits for them) rather than destroy. Outstanding Works keep
  // the state alive and report the abort. After finalize() this does nothing.
  try {
    impl_->abort_now(fmt::format("NCCL group '{}' destroyed without finalize()", impl_->name), false);
  } catch (...) {
    impl_->abort_now("communicator destroyed without finalize()", false);  // formatting failed
  }
}

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }
const std::string& NcclCommunicator::name() const { return impl_->name; }
bool NcclCommunicator::debug() const { return impl_->options.debug; }
Device NcclCommunicator::device() const { return Device::cuda(impl_->device); }

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  HT_CHECK_ARG(!name.empty(), "split of NCCL group '{}': the new group needs a name", impl_->name);
  return impl_->split(color, key, name);
}

void NcclCommunicator::finalize(std::chrono::milliseconds timeout) { impl_->finalize(timeout); }

void NcclCommunicator::abort() noexcept {
  try {
    impl_->abort_now(fmt::format("abort() called on NCCL group '{}'", impl_->name), true);
  } catch (...) {
    // Only formatting the reason can throw (allocation); abort anyway.
    impl_->abort_now("abort() called", true);
  }
}

// --- Impl lifecycle ---------------------------------------------------------

void NcclCommunicator::Impl::abort_now(const std::string& reason, bool dump) noexcept {
  if (aborted_.exchange(true)) return;
  ncclComm_t comm = nullptr;
  try {
    {
      std::lock_guard lock(reason_mu_);
      abort_reason_ = reason;
    }
    // Taking the handle under its lock waits for a non-blocking NCCL call in
    // progress on another thread (microseconds); afterwards nobody can reach it.
    std::lock_guard lock(nccl_mu_);
    comm = std::exchange(comm_, nullptr);
  } catch (...) {
    // std::mutex::lock failing leaves nothing safe to do but go on.
  }
  // Ends NCCL's kernels and proxy threads; NCCL switches to the
  // communicator's device itself. The result is ignored: there is nobody to
  // tell, and nothing else to try.
  if (comm) ncclCommAbort(comm);
  if (!dump) return;
  try {
    std::string path = FlightRecorder::global().dump(options.run_dir, world_rank, reason);
    std::lock_guard lock(reason_mu_);
    dump_path_ = std::move(path);
  } catch (const std::exception& e) {
    try {
      std::lock_guard lock(reason_mu_);
      dump_path_ = fmt::format("(not written: {})", e.what());
    } catch (...) {
    }
  } catch (...) {
  }
}

std::unique_ptr<Communicator> NcclCommunicator::Impl::split(int color, int key, const std::string& new_name) {
  std::lock_guard lock(mu_);
  const ht::cuda::DeviceGuard guard(Device::cuda(device));
  OpInfo info;
  info.op = "split";
  info.dtype = DType::kF32;
  info.peer = color;
  info.peer_name = "colour";
  std::shared_ptr<PendingOp> op = begin(info);
  // A negative colour takes part but joins no group (NCCL returns no handle).
  const bool joins = color >= 0;
  auto child = std::make_shared<Impl>(new_name, device, world_rank, options);
  // NCCL runs the split as an asynchronous job tied to this (the parent)
  // communicator, which reports ncclInProgress until the job is done; only
  // then does the job write the new handle, from its own thread. The handle
  // goes to a heap slot, so that if we give up waiting a late write still
  // lands in memory that is ours: on those paths the slot is leaked.
  auto slot = std::make_unique<ncclComm_t>(nullptr);
  try {
    if (options.debug) debug_check(*op);
    ncclConfig_t config = detail::nonblocking_config(child->name);
    const ncclResult_t r = locked_call(
        [&](ncclComm_t c) { return ncclCommSplit(c, joins ? color : NCCL_SPLIT_NOCOLOR, key, slot.get(), &config); });
    if (r != ncclSuccess && r != ncclInProgress) {
      (void)slot.release();
      fail_nccl(r, "ncclCommSplit", op.get());
    }
    const std::optional<ncclResult_t> parent_state = poll_ready(op->deadline);
    if (!parent_state || *parent_state != ncclSuccess) {
      (void)slot.release();  // the job may still write it
      if (!parent_state)
        fail_timeout(op.get(),
                     fmt::format("did not create group '{}' within {} ms", new_name, options.timeout.count()));
      fail_nccl(*parent_state, fmt::format("ncclCommSplit into group '{}'", new_name), op.get());
    }
    if (joins) {
      HT_CHECK(*slot != nullptr, ErrorKind::kInternal,
               "ncclCommSplit into group '{}' reported success but returned no communicator", new_name);
      *child->handle_slot() = *slot;
      // The new communicator may still be finishing its own initialisation.
      const std::optional<ncclResult_t> child_state = child->poll_ready(op->deadline);
      if (!child_state)
        fail_timeout(op.get(), fmt::format("created group '{}' but it did not become ready within {} ms", new_name,
                                           options.timeout.count()));
      if (*child_state != ncclSuccess) {
        const std::string last = child->last_nccl_error();
        fail_nccl(*child_state, fmt::format("initialising group '{}' after ncclCommSplit ({})", new_name, last),
                  op.get());
      }
      child->init_resources();
    }
  } catch (const CommError&) {
    child->abort_now("split failed", false);
    throw;
  } catch (const std::exception& e) {
    child->abort_now("split failed", false);
    fail_enqueue(*op, e);
  }
  // Nothing was enqueued on the stream: the split is complete here.
  {
    std::lock_guard op_lock(op->mu);
    op->completed = true;
  }
  FlightRecorder::global().update(op->flight_id, OpState::kCompleted);
  if (!joins) return nullptr;
  return std::make_unique<NcclCommunicator>(std::move(child));
}

void NcclCommunicator::Impl::finalize(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  if (finalized_) return;
  check_usable("finalize");
  const Clock::time_point deadline = Clock::now() + timeout;
  const std::string late = fmt::format("was still running when finalize()'s timeout of {} ms ran out", timeout.count());
  for (const std::shared_ptr<PendingOp>& op : outstanding_) wait(*op, deadline, late);
  outstanding_.clear();

  // ncclCommFinalize flushes NCCL's own pending work and synchronises with
  // the peers' proxies; non-blocking, it reports ncclInProgress until done.
  ncclResult_t r = locked_call([](ncclComm_t c) { return ncclCommFinalize(c); });
  if (r == ncclInProgress) {
    const std::optional<ncclResult_t> state = poll_ready(deadline);
    if (!state)
      fail_timeout(nullptr, fmt::format("did not finish ncclCommFinalize within finalize()'s timeout of {} ms",
                                        timeout.count()));
    r = *state;
  }
  if (r != ncclSuccess) fail_nccl(r, "ncclCommFinalize", nullptr);

  ncclComm_t comm = nullptr;
  {
    std::lock_guard handle_lock(nccl_mu_);
    comm = std::exchange(comm_, nullptr);
  }
  finalized_ = true;
  barrier_buf_ = Tensor();
  debug_dev_ = Tensor();
  debug_host_ = Tensor();
  // After a successful finalize, destroy only frees local memory.
  r = ncclCommDestroy(comm);
  if (r != ncclSuccess && r != ncclInProgress)
    throw CommError(
        ErrorKind::kComm,
        fmt::format("ncclCommDestroy of NCCL group '{}' failed after finalize: {}", name, ncclGetErrorString(r)),
        std::source_location::current(), fmt::format("{} ({})", ncclGetErrorString(r), int(r)));
}

// --- World bootstrap ----------------------------------------------------------

std::unique_ptr<Communicator> make_nccl_world(Communicator& host_world, int device, const CommOptions& options) {
  HT_CHECK_ARG(host_world.device().is_cpu(),
               "make_nccl_world: the bootstrap communicator '{}' must carry host tensors (MPI), but it works on {}",
               host_world.name(), host_world.device().str());
  const int rank = host_world.rank();
  const int size = host_world.size();
  const int devices = cuda_device_count();
  HT_CHECK_ARG(device >= 0 && device < devices,
               "make_nccl_world: rank {} asks for CUDA device {} but {} device(s) are visible; pass the node-local "
               "rank modulo the device count, or check CUDA_VISIBLE_DEVICES",
               rank, device, devices);

  // Rank 0 creates the unique id and broadcasts it, after a status word so
  // that a failure there is reported on every rank instead of leaving the
  // others to wait for an id that never comes.
  constexpr std::int64_t kIdWords = (std::int64_t(sizeof(ncclUniqueId)) + 3) / 4;
  Tensor message = Tensor::zeros({1 + kIdWords}, DType::kI32, Device::cpu(), MemCategory::kCommunication);
  std::int32_t* words = message.data<std::int32_t>();
  if (rank == 0) {
    ncclUniqueId id{};
    const ncclResult_t r = ncclGetUniqueId(&id);
    words[0] = std::int32_t(r);
    if (r == ncclSuccess) std::memcpy(words + 1, &id, sizeof id);
  }
  host_world.broadcast(message, 0)->wait();
  if (words[0] != std::int32_t(ncclSuccess)) {
    const auto r = ncclResult_t(words[0]);
    throw CommError(ErrorKind::kComm,
                    fmt::format("make_nccl_world over '{}': rank 0 could not create the NCCL unique id: {} (see "
                                "rank 0's NCCL_DEBUG=WARN output)",
                                host_world.name(), ncclGetErrorString(r)),
                    std::source_location::current(), fmt::format("{} ({})", ncclGetErrorString(r), int(r)));
  }
  ncclUniqueId id{};
  std::memcpy(&id, words + 1, sizeof id);

  const ht::cuda::DeviceGuard guard(Device::cuda(device));
  auto impl = std::make_shared<NcclCommunicator::Impl>(host_world.name(), device, rank, options);
  impl->rank = rank;  // for messages until NCCL confirms them
  impl->size = size;
  const Clock::time_point deadline = Clock::now() + options.timeout;
  ncclConfig_t config = detail::nonblocking_config(impl->name);
  const ncclResult_t r = ncclCommInitRankConfig(impl->handle_slot(), size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) impl->fail_nccl(r, "ncclCommInitRankConfig", nullptr);
  const std::optional<ncclResult_t> state = impl->poll_ready(deadline);
  if (!state)
    impl->fail_timeout(nullptr, fmt::format("was not initialised within {} ms (ncclCommInitRankConfig over {} "
                                            "ranks on cuda:{}); did every rank call make_nccl_world?",
                                            options.timeout.count(), size, device));
  if (*state != ncclSuccess) impl->fail_nccl(*state, "ncclCommInitRankConfig", nullptr);
  impl->init_resources();
  return std::make_unique<NcclCommunicator>(std::move(impl));
}

bool nccl_compiled() { return true; }

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "?";
  // Since NCCL 2.9 the code is major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
}

}  // namespace ht::comm
