// ht::train::Job: one training process's place in the job its launcher
// started, and the contract with the supervisor (htrun) that every program
// built on the library keeps without code of its own.
//
// Construction, in this order: when a launcher names the rank (mpirun, srun:
// launcher_rank, ht/core/launcher_env.h), heartbeats start at once under
// <run_dir>/heartbeat, before MPI, so that a supervisor can tell a rank that
// never started from peers waiting for it; MPI then joins every rank of
// MPI_COMM_WORLD (a process started without a launcher is a job of one) and
// the pp x dp x tp mesh is split from the world (deadlines from
// HT_COMM_TIMEOUT, see comm_env.h); rank 0 creates the run directory; the
// failures to rehearse are read from HT_FAULTS, less those already fired in
// this run directory.
//
// run_job() runs a program's body inside a Job and turns whatever ends it
// into what htrun reads: a decision to stop (Job::end_with: preemption, a
// straggler) its exit record and code; an exception becomes the exit record
// <run_dir>/exit/rank_R.json and the exit code of its kind (resilience::
// exit_code_for: 2 for bad input, 74 communication, 76 divergence, 78
// corruption), and the process ends at once with _Exit, without waiting in
// MPI_Finalize for ranks still inside a collective. See docs/htrun.md for
// the whole contract (flags htrun appends, heartbeats, checkpoints, codes).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ht/comm/device_mesh.h"
#include "ht/comm/mpi_runtime.h"
#include "ht/core/device.h"
#include "ht/core/launcher_env.h"
#include "ht/core/stream.h"
#include "ht/parallel/layout.h"
#include "ht/resilience/faults.h"
#include "ht/resilience/rank_guard.h"

namespace ht::train {

struct JobOptions {
  std::string run_dir = "runs/run";  // heartbeats, exit records, fired faults, metrics
  /// Where the job computes. CUDA indices count from each rank's first GPU:
  /// the rank with local rank L on its node uses cuda:((index + L) mod the
  /// visible devices), so "cuda" gives every rank of a node its own GPU
  /// (as torchrun's LOCAL_RANK does). See Job::device().
  Device device = Device::cpu();
  /// The run's layout (parallel/layout.h): the mesh is split from its tp,
  /// pp, cp and ep, dp being the rest of the world (a dp given must fill
  /// it). The one value a program sets: TrainFlags fills it from the
  /// flags, and an engine on this job checks its own against the mesh.
  parallel::Layout layout;
  double heartbeat_s = 2;   // seconds between heartbeats
  double watchdog_s = 300;  // seconds without progress before the rank exits as hung (0: off)
  /// Called on every rank once the world exists and before the mesh is split
  /// from it (collective over the world): may change the layout, e.g. to
  /// one planned for the world found (TrainFlags' --auto). Whatever it
  /// sets must be the same on every rank. None by default.
  std::function<void(comm::Communicator& world, JobOptions& options)> choose_layout;

  /// Throws kConfig naming the bad value.
  void validate() const;
};

/// How a run that stops early but in order ends (preemption, a straggler to
/// replace): the exit code htrun reads, the reason and the world ranks
/// blamed. fit() hands it to the job (Job::end_with); run_job ends the
/// process with it once the program's body has returned.
struct ExitDecision {
  int code = 0;
  std::string reason;
  std::vector<int> blamed;
};

/// The device a rank computes on: `requested` itself on the CPU; on CUDA,
/// index (requested.index + local_rank) mod device_count. Throws
/// kNotSupported when no CUDA device is visible, kConfig when the requested
/// index is not below device_count; both name what to change.
Device rank_device(Device requested, int local_rank, int device_count);

/// Heartbeats for the rank an MPI launcher names, started before MPI (phase
/// "launch"); null when no launcher names one.
std::unique_ptr<resilience::RankGuard> start_launch_guard(const JobOptions& options);

/// The mesh's communicators. On the CPU they are MPI's (or, for a job of one
/// started without a launcher, the self communicator). On a CUDA device each
/// is a routing communicator (routing_communicator.h): device tensors move
/// over NCCL, one rank per GPU, whose unique ids MPI bootstraps, and host
/// tensors (control: verdicts, checksums, checkpoint agreement) over MPI.
/// Deadlines and aborts cover both planes of every group.
class Job {
 public:
  /// Collective over the launcher's world. Throws kConfig when tp x pp does
  /// not divide the world, kIo when the run directory cannot be created,
  /// kNotSupported for a CUDA device in a build without CUDA or NCCL.
  /// `guard`: one already beating for this rank (start_launch_guard), which
  /// must outlive the job; null: the job starts its own.
  explicit Job(const JobOptions& options, resilience::RankGuard* guard = nullptr);
  /// Aborts the mesh's communicators unless finish() finalised them (see
  /// DeviceMesh); never blocks on peers.
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const JobOptions& options() const { return options_; }
  /// This rank's device: options().device resolved by rank_device. On a
  /// CUDA device the job's thread computes on a stream of its own, current
  /// from construction to destruction (ht/core/stream.h), not the legacy
  /// default stream.
  Device device() const { return device_; }
  comm::DeviceMesh& mesh() { return *mesh_; }
  resilience::RankGuard& guard() { return *guard_; }
  /// This process's world rank; rank 0 prints and writes the run's files.
  int rank() const { return mesh_->rank(); }
  bool rank0() const { return rank() == 0; }
  /// HT_FAULTS, less the faults already fired in this run directory.
  const resilience::FaultPlan& faults() const { return faults_; }

  /// Runs `fn` on world rank 0 while the others wait for its verdict, then
  /// on the others: so a bad input fails every rank with rank 0's message
  /// instead of leaving them waiting for a file that will never appear
  /// (preparing a dataset, say). Collective. Rethrows rank 0's error on rank
  /// 0; the others throw kIo naming `what`.
  void rank0_first(const std::string& what, const std::function<void()>& fn);

  /// Finalises the mesh's communicators (collective, within 60 s).
  void finish();

  /// Ends the run with `decision` when the body returns (run_job writes the
  /// exit record, unless it was written, and exits with its code; no
  /// finish(): peers may already be leaving). fit() calls it on a stop;
  /// code after fit() can tell by exit_decision().
  void end_with(ExitDecision decision) { exit_decision_ = std::move(decision); }
  const std::optional<ExitDecision>& exit_decision() const { return exit_decision_; }

 private:
  JobOptions options_;
  Device device_;
  Stream compute_stream_;                          // none on the CPU
  std::unique_ptr<StreamGuard> on_compute_stream_;  // destroyed before the stream
  std::unique_ptr<resilience::RankGuard> own_guard_;
  resilience::RankGuard* guard_ = nullptr;
  std::unique_ptr<comm::MpiRuntime> mpi_;
  std::unique_ptr<comm::DeviceMesh> mesh_;
  resilience::FaultPlan faults_;
  std::optional<ExitDecision> exit_decision_;
};

/// Runs `body` in a Job built from `options` and returns 0 when it returns.
/// Whatever it throws (or the Job's construction throws) is printed as
/// "<program>: <message>" and ends the process with the exit record and
/// code htrun reads; see above. A body that ends with Job::end_with (fit on
/// preemption or a straggler) exits with that decision's code.
int run_job(const char* program, const JobOptions& options, const std::function<void(Job&)>& body);
/// The same with options from `resolve` (parsing flags, say), called first:
/// what it throws is a usage error (printed, exit 2, no exit record).
int run_job(const char* program, const std::function<JobOptions()>& resolve, const std::function<void(Job&)>& body);

}  // namespace ht::train
