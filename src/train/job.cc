// ht::train::Job: MPI, the mesh and the guard of one training process.
#include "ht/train/job.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "ht/comm/comm_env.h"
#include "ht/comm/mpi_communicator.h"
#include "ht/comm/nccl_communicator.h"
#include "ht/comm/routing_communicator.h"
#include "ht/comm/self_communicator.h"
#include "core/files.h"

namespace ht::train {

namespace fs = std::filesystem;

void JobOptions::validate() const {
  HT_CHECK(!run_dir.empty(), ErrorKind::kConfig, "--run-dir is empty: name a directory for the run's files");
  layout.validate();
  HT_CHECK(heartbeat_s > 0 && watchdog_s >= 0, ErrorKind::kConfig,
           "--heartbeat ({} s) must be positive and --watchdog ({} s) non-negative", heartbeat_s, watchdog_s);
}

Device rank_device(Device requested, int local_rank, int device_count) {
  if (!requested.is_cuda()) return requested;
  HT_CHECK(cuda_compiled(), ErrorKind::kNotSupported,
           "--device {}: this build of hypertrain has no CUDA backend; rebuild with the CUDA toolkit installed "
           "(-DHT_WITH_CUDA=ON) or use --device cpu",
           requested.str());
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  HT_CHECK(device_count > 0, ErrorKind::kNotSupported,
           "--device {}: no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES={}); run on a machine with "
           "a GPU or use --device cpu",
           requested.str(), visible ? visible : "unset");
  HT_CHECK(requested.index >= 0 && requested.index < device_count, ErrorKind::kConfig,
           "--device {}: only {} CUDA device(s) are visible (cuda:0 to cuda:{}); indices count from each rank's first "
           "GPU, so --device cuda gives every rank of a node its own",
           requested.str(), device_count, device_count - 1);
  return Device::cuda((requested.index + local_rank) % device_count);
}

namespace {

resilience::GuardOptions guard_options(const JobOptions& o) {
  return {.run_dir = o.run_dir,
          .heartbeat = std::chrono::milliseconds(std::int64_t(o.heartbeat_s * 1000)),
          .watchdog = std::chrono::milliseconds(std::int64_t(o.watchdog_s * 1000))};
}

}  // namespace

std::unique_ptr<resilience::RankGuard> start_launch_guard(const JobOptions& options) {
  const int rank = launcher_rank();
  if (rank < 0 || !launched_by_mpi()) return nullptr;
  auto guard = std::make_unique<resilience::RankGuard>(guard_options(options), rank);
  guard->progress(0, resilience::Phase::kLaunch);
  return guard;
}

Job::Job(const JobOptions& options, resilience::RankGuard* guard)
    : options_((options.validate(), options)),
      device_(rank_device(options_.device, launcher_local_rank(), cuda_device_count())),
      compute_stream_(device_),
      on_compute_stream_(std::make_unique<StreamGuard>(compute_stream_.handle())),
      guard_(guard) {
  comm::CommOptions comm_options;
  comm_options.run_dir = options_.run_dir;
  comm_options = comm::comm_options_from_env(comm_options);
  std::unique_ptr<comm::Communicator> world;
  const parallel::Layout& l = options_.layout;
  if (launched_by_mpi() || l.tp * l.pp * l.cp * l.ep > 1) {
    mpi_ = std::make_unique<comm::MpiRuntime>();
    world = comm::make_mpi_world(comm_options);
  } else {
    world = comm::make_self_communicator("world");
  }
  if (device_.is_cuda()) {
    // NCCL is the data plane on a GPU, one rank or many, so that a job of one
    // runs the same path as a job of thousands.
    HT_CHECK(comm::nccl_compiled(), ErrorKind::kNotSupported,
             "--device {}: this build of hypertrain has CUDA but no NCCL, which carries device tensors between ranks; "
             "install NCCL (libnccl-dev) and rebuild, or use --device cpu",
             device_.str());
    auto nccl = comm::make_nccl_world(*world, device_.index, comm_options);
    world = comm::make_routing_communicator(std::move(world), std::move(nccl));
  }
  if (options_.choose_layout) {
    options_.choose_layout(*world, options_);
    options_.validate();
  }
  if (options_.layout.dp > 0) options_.layout.on_world(world->size());  // a dp given must fill the world
  mesh_ = std::make_unique<comm::DeviceMesh>(std::move(world), options_.layout.tp, options_.layout.pp,
                                             options_.layout.cp, options_.layout.ep);
  std::error_code ec;
  if (rank0()) ec = ht::detail::make_directories(options_.run_dir);
  HT_CHECK(!ec && (!rank0() || fs::is_directory(options_.run_dir)), ErrorKind::kIo,
           "cannot create run directory '{}': {}", options_.run_dir, ec ? ec.message() : "not a directory");
  if (!guard_) {
    own_guard_ = std::make_unique<resilience::RankGuard>(guard_options(options_), rank());
    guard_ = own_guard_.get();
  }
  HT_CHECK(guard_->rank() == rank(), ErrorKind::kInternal,
           "the launcher named this process rank {}, MPI says {}: heartbeats would be misattributed", guard_->rank(),
           rank());
  guard_->progress(0, resilience::Phase::kStart);
  if (const char* spec = std::getenv("HT_FAULTS")) {
    faults_ = resilience::FaultPlan::parse(spec);
    faults_.drop_fired(options_.run_dir);
  }
}

Job::~Job() = default;

void Job::finish() {
  if (mesh_) mesh_->finalize(std::chrono::seconds(60));
}

void Job::rank0_first(const std::string& what, const std::function<void()>& fn) {
  comm::Communicator& world = mesh_->world();
  Tensor ok = Tensor::from_vector(std::vector<std::int32_t>{0}, {1});
  std::exception_ptr failure;
  if (rank0()) {
    try {
      fn();
      ok.data<std::int32_t>()[0] = 1;
    } catch (const Error&) {
      failure = std::current_exception();
    }
  }
  world.broadcast(ok, 0)->wait();
  if (failure) std::rethrow_exception(failure);
  HT_CHECK(ok.data<std::int32_t>()[0] == 1, ErrorKind::kIo, "rank 0 failed at {} (see its message)", what);
  if (!rank0()) fn();
}

int run_job(const char* program, const JobOptions& options, const std::function<void(Job&)>& body) {
  return run_job(program, [&] { return options; }, body);
}

int run_job(const char* program, const std::function<JobOptions()>& resolve, const std::function<void(Job&)>& body) {
  // The job outlives a throw: the exit record is written and the process
  // ends before MPI or the mesh are torn down (MPI_Finalize would wait for
  // ranks still in a collective).
  std::unique_ptr<resilience::RankGuard> launch_guard;
  std::unique_ptr<Job> job;
  try {
    const JobOptions options = resolve();
    options.validate();
    launch_guard = start_launch_guard(options);
    job = std::make_unique<Job>(options, launch_guard.get());
    body(*job);
    if (const std::optional<ExitDecision>& d = job->exit_decision())
      job->guard().exit(d->code, d->reason, d->blamed);  // recorded by fit before its last collective
    job->finish();
    return resilience::kExitOk;
  } catch (const std::exception& e) {
    // With a job, the guard says it ("[rank r] <kind>: message") and writes the record.
    const int code = resilience::exit_code_for(e);
    // A collective that timed out names the ranks that did not answer: the
    // supervisor blames their node, not this one's.
    const auto* timeout = dynamic_cast<const comm::CommTimeout*>(&e);
    const std::vector<int> blamed = timeout ? timeout->suspects() : std::vector<int>{};
    if (resilience::RankGuard* guard = job ? &job->guard() : launch_guard.get()) guard->exit(code, e.what(), blamed);
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
  }
}

}  // namespace ht::train
